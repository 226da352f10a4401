"""Outputs checked during the timed phases (measure/timed_outputs.py): the bounded sampler,
the comparison with the drift phase's rules, and the finding it gives."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.measure.drift import Tolerance, drift_report, parse_decision_rule
from edgequal.agent.measure.latency import time_loop_ns
from edgequal.agent.measure.sustained import closed_loop
from edgequal.agent.measure.timed_outputs import (
    MAX_MISMATCH_RECORDS,
    OutputSampler,
    checked_count,
    compare_timed_outputs,
    phase_timed_outputs,
    place_mismatches,
    timed_outputs_finding,
)

REFERENCE = {"scores": np.array([[0.1, 0.7, 0.2]], dtype=np.float32)}


def fp32_compare(cases):
    """The drift phase's comparison with fp32 tolerances and an argmax decision rule."""
    return drift_report(cases, Tolerance.for_class("fp32"), parse_decision_rule("argmax"))


class Counter:
    """A bound call returning fresh outputs: right until ``bad_from`` calls, then wrong."""

    def __init__(self, bad_from: int | None = None):
        self.n = 0
        self.bad_from = bad_from

    def __call__(self):
        self.n += 1
        a = REFERENCE["scores"].copy()
        if self.bad_from is not None and self.n > self.bad_from:
            a = np.roll(a, 1, axis=-1)
        return [a]


def read(returned):
    return {"scores": returned[0]}


@pytest.mark.parametrize("calls", [1, 5, 256, 257, 1000, 4099])
def test_every_kth_call_is_kept_within_the_bound_and_the_count_is_ceil_calls_over_k(calls):
    sampler = OutputSampler(read, max_cases=256)
    n = time_loop_ns(Counter(), np.empty(calls, np.int64), calls, 0.0, sampler=sampler)
    assert n == calls
    indices = [i for i, _, _ in sampler.kept]
    assert len(indices) <= 256
    assert indices == list(range(0, calls, sampler.every))
    assert len(indices) == checked_count(calls, sampler.every)
    # k is the smallest power of two that keeps the count within the bound.
    if calls <= 256:
        assert sampler.every == 1
    else:
        assert checked_count(calls, sampler.every // 2) > 256


def test_the_byte_bound_thins_before_the_case_bound():
    big = lambda: [np.zeros(1000, np.float32)]  # noqa: E731  4,000 bytes a call
    sampler = OutputSampler(lambda r: {"y": r[0]}, max_cases=256, max_bytes=40_000)
    time_loop_ns(big, np.empty(100, np.int64), 100, 0.0, sampler=sampler)
    assert len(sampler.kept) <= 10
    assert sampler.every == 16  # 100 calls: 0, 16, ..., 96 (7 kept)
    assert len(sampler.kept) == checked_count(100, 16) == 7


def test_a_loop_in_parts_indexes_calls_across_the_parts():
    sampler = OutputSampler(read, max_cases=4)
    call = Counter()
    a = time_loop_ns(call, np.empty(6, np.int64), 6, 0.0, sampler=sampler, first=0)
    b = time_loop_ns(call, np.empty(7, np.int64), 7, 0.0, sampler=sampler, first=a)
    assert a + b == 13
    assert [i for i, _, _ in sampler.kept] == list(range(0, 13, sampler.every))


def test_clean_outputs_all_match_the_golden_ones():
    sampler = OutputSampler(read)
    time_loop_ns(Counter(), np.empty(300, np.int64), 300, 0.0, sampler=sampler)
    out = compare_timed_outputs(sampler, 300, REFERENCE, REFERENCE, fp32_compare, 0.0)
    assert out["calls"] == 300
    assert out["every"] == 2
    assert out["checked"] == 150
    assert out["mismatches"] == 0 and out["mismatched"] == []
    assert out["reference"] == "golden"


def test_outputs_that_go_wrong_after_n_calls_are_named_by_call_and_output():
    sampler = OutputSampler(read)
    # The call object counts from 1; the loop's index from 0: call index 40 is the 41st.
    time_loop_ns(Counter(bad_from=40), np.empty(100, np.int64), 100, 0.0, sampler=sampler)
    out = compare_timed_outputs(sampler, 100, REFERENCE, REFERENCE, fp32_compare, 0.0)
    assert out["every"] == 1 and out["checked"] == 100
    assert out["mismatches"] == 60
    assert len(out["mismatched"]) == MAX_MISMATCH_RECORDS
    first = out["mismatched"][0]
    assert first["call"] == 40
    names = [o["output"] for o in first["outputs"]]
    assert names == ["scores", "scores"]  # out of tolerance, and the argmax flipped
    assert "outside atol" in first["outputs"][0]["reason"]
    assert first["outputs"][1]["reason"] == "decision flipped (argmax)"


def test_outputs_wrong_at_rest_are_compared_with_themselves():
    """Drift the drift phase reports is not a change while timed."""
    drifted = {"scores": REFERENCE["scores"] + 0.01}
    sampler = OutputSampler(lambda r: drifted)
    time_loop_ns(lambda: None, np.empty(10, np.int64), 10, 0.0, sampler=sampler)
    out = compare_timed_outputs(sampler, 10, REFERENCE, drifted, fp32_compare, 0.0)
    assert out["reference"] == "at_rest"
    assert out["mismatches"] == 0 and out["checked"] == 10


def test_the_sustained_loop_keeps_outputs_with_their_time():
    sampler = OutputSampler(read)
    ticks = iter(range(10**6))
    result = closed_loop(
        Counter(bad_from=7),
        duration_s=3600.0,
        window_s=3600.0,
        on_window=lambda w: None,
        stop_requested=lambda: next(ticks) >= 20,
        sampler=sampler,
    )
    assert result["calls"] == 20
    out = compare_timed_outputs(
        sampler, result["calls"], REFERENCE, REFERENCE, fp32_compare, result["started_at"]
    )
    assert (out["checked"], out["mismatches"]) == (20, 13)
    assert out["mismatched"][0]["call"] == 7
    assert out["mismatched"][0]["t_monotonic"] >= result["started_at"]


def test_the_finding_names_phase_window_temperature_and_output():
    checked = {
        "calls": 1000,
        "checked": 250,
        "every": 4,
        "reference": "golden",
        "mismatches": 3,
        "mismatched": [
            {
                "call": 804,
                "t_s": 12.5,
                "t_monotonic": 112.5,
                "outputs": [{"output": "scores", "reason": "PSNR 3.0 dB < 30 dB", "max_abs": 1.0}],
            }
        ],
    }
    samples = [
        {"t": 111.0, "temp_c": 70.0},
        {"t": 112.4, "temp_c": 81.5},
        {"t": 113.6, "temp_c": 82},
    ]
    windows = [{"index": 0, "t0": 100.0, "t1": 110.0}, {"index": 1, "t0": 110.0, "t1": 120.0}]
    placed = phase_timed_outputs([place_mismatches(checked, samples, windows)])
    assert placed["mismatched"][0]["temp_c"] == 81.5
    assert placed["mismatched"][0]["window"] == 1
    finding = timed_outputs_finding("sustained", placed, "onnxruntime")
    assert finding["phase"] == "sustained" and finding["kind"] == "timed_outputs_changed"
    assert (finding["call"], finding["window"], finding["temp_c"]) == (804, 1, 81.5)
    assert finding["output"] == "scores"
    assert finding["message"] == (
        "outputs changed while timed (sustained): 3 of 250 checked calls out of tolerance, "
        "first at call 804, 12.5 s into the phase, window 1, 81.5 °C: output scores "
        "(PSNR 3.0 dB < 30 dB)"
    )


def test_a_board_without_a_sensor_reports_the_temperature_absent():
    checked = {
        "calls": 10, "checked": 10, "every": 1, "reference": "golden", "mismatches": 1,
        "mismatched": [{"call": 3, "t_s": 0.1, "t_monotonic": 5.0, "outputs": []}],
    }  # fmt: skip
    placed = place_mismatches(checked, [{"t": 5.0, "temp_c": None}], sensor=False)
    m = placed["mismatched"][0]
    assert (m["temp_c"], m["temp_sensor"]) == (None, False)
    assert "window" not in m
    assert "no temperature sensor" in timed_outputs_finding("latency", placed, "litert")["message"]


def test_all_matched_gives_no_finding():
    checked = {"calls": 9, "checked": 9, "every": 1, "reference": "golden", "mismatches": 0,
               "mismatched": []}  # fmt: skip
    assert timed_outputs_finding("latency", checked, "onnxruntime") is None


def test_the_fault_injector_corrupts_real_outputs_only_on_its_condition():
    import time

    from edgequal.agent.runtimes.faults import (
        TEMP_READ_INTERVAL_S,
        FaultyRuntime,
        OutputFault,
        corrupt,
    )
    from edgequal.contract.errors import BadInput

    assert str(OutputFault.parse("after_calls:3")) == "after_calls:3"
    assert OutputFault.parse("above_c:71.5").above_c == 71.5
    for bad in ("after_calls:-1", "above_c:hot", "sometimes"):
        with pytest.raises(BadInput, match="output fault"):
            OutputFault.parse(bad)
    wrong = corrupt({"f": np.array([0.25], np.float32), "i": np.array([3], np.int8)})
    assert wrong["f"].tolist() == [0.75] and wrong["f"].dtype == np.float32
    assert wrong["i"].tolist() == [-4] and wrong["i"].dtype == np.int8

    class Real:  # the two calls the wrapper adds to: a bound call and reading its outputs
        def bind(self, feeds):
            return Counter()

        def bound_outputs(self, returned):
            return read(returned)

    temps = iter([40.0, 90.0])
    faulty = FaultyRuntime(Real(), OutputFault(after_calls=2))
    call = faulty.bind({})
    seen = [faulty.bound_outputs(call())["scores"][0, 1] for _ in range(4)]
    assert seen == pytest.approx([0.7, 0.7, 0.3, 0.3])
    hot = FaultyRuntime(Real(), OutputFault(above_c=80.0), lambda: next(temps))
    call = hot.bind({})
    assert hot.bound_outputs(call())["scores"][0, 1] == pytest.approx(0.7)
    time.sleep(TEMP_READ_INTERVAL_S)  # the next call reads the sensor again
    assert hot.bound_outputs(call())["scores"][0, 1] == pytest.approx(0.3)
