"""Attribution and sustained scoring on known inputs, with hand-computed answers."""

from __future__ import annotations

import pytest
from edgequal.agent.measure.attribution import (
    attribute_windows,
    contention_between,
    interference_present,
    interference_rise,
)
from edgequal.agent.measure.sustained import nominal_clocks_khz, score_windows, window_telemetry

TICKS = 100  # clock ticks per second


def sample(t, busy, total, steal=0, agent=0, others=None):
    return {
        "t": t,
        "cpu": {"total": total, "busy": busy, "idle": total - busy, "steal": steal},
        "agent_ticks": agent,
        "others": others or {},
        "others_since": t - 1.0 if others else None,
    }


def test_contention_between_brackets_the_window_and_splits_the_cpu():
    samples = [
        sample(10.0, busy=0, total=0),
        sample(11.0, busy=150, total=200, agent=2, others={"stress": 50}),
        sample(12.0, busy=300, total=400, steal=8, agent=4, others={"stress": 48, "sshd": 2}),
        sample(13.0, busy=350, total=600, agent=5),
    ]
    # Window 10.5..11.5: bracketed by the samples at 10 and 12 (span 2 s). The worker ran
    # 0.9 CPU-s and waited 0.1 s over the 1 s window.
    ev = contention_between(
        samples, 10.5, 11.5, 2, TICKS, worker_sched_ns=[900_000_000, 100_000_000]
    )
    assert ev["span_s"] == 2.0
    assert ev["worker_cpus"] == 0.9
    assert ev["cpu_share"] == 0.9 and ev["runq_wait_share"] == 0.1
    # busy 300 ticks = 3 CPU-s over 2 s = 1.5 CPUs; minus the agent (0.02) and the worker (0.9)
    assert ev["other_cpus"] == pytest.approx(0.58)
    assert ev["other_cpu_share"] == pytest.approx(0.29)
    assert ev["steal_share"] == pytest.approx(8 / 400)
    assert ev["top_processes"] == [
        {"name": "stress", "cpu_share": 0.49},  # 98 ticks over 2 s
        {"name": "sshd", "cpu_share": 0.01},
    ]


def test_a_scan_that_covers_more_than_the_window_counts_for_its_overlap():
    # One scan at t=15 covering 10..15 (5 s): stress used 400 ticks = 0.8 CPUs throughout.
    scan = sample(15.0, busy=700, total=1000, others={"stress": 400})
    scan["others_since"] = 10.0
    samples = [sample(10.0, 0, 0), sample(11.0, 100, 200), sample(12.0, 200, 400), scan]
    ev = contention_between(samples, 10.2, 10.8, 2, TICKS)  # bracketed by 10 and 11
    # 1 s of the 5 s scan overlaps the 1 s span: 80 ticks over 1 s = 0.8 CPUs.
    assert ev["span_s"] == 1.0
    assert ev["top_processes"] == [{"name": "stress", "cpu_share": 0.8}]


def test_contention_without_samples_or_worker_figures():
    assert contention_between([], 0, 1, 2, TICKS) is None
    assert contention_between([sample(5.0, 0, 0)], 0, 1, 2, TICKS) is None
    ev = contention_between([sample(0, 0, 0), sample(2, 100, 400)], 0.5, 1.5, 2, TICKS)
    assert ev["worker_cpus"] is None and ev["runq_wait_share"] is None
    assert ev["other_cpus"] == 0.5


def test_interference_rise_and_presence():
    ref = {"runq_wait_share": 0.02, "other_cpus": 0.1, "steal_share": 0.0}
    assert interference_rise(dict(ref), ref) == []
    worse = {"runq_wait_share": 0.40, "other_cpus": 1.6, "steal_share": 0.03}
    assert interference_rise(worse, ref) == [
        "run-queue wait +38% of runnable time",
        "other processes +1.50 CPUs",
        "steal +3%",
    ]
    assert interference_rise(None, ref) == [] and interference_rise(worse, None) == []
    assert interference_present({"runq_wait_share": 0.04, "steal_share": 0.0}) == []
    assert interference_present({"runq_wait_share": 0.05, "steal_share": 0.0}) == [
        "run-queue wait 5% of runnable time"
    ]
    # No schedstat: other processes' CPU alone, at twice the rise threshold.
    assert interference_present({"runq_wait_share": None, "other_cpus": 0.6, "steal_share": 0})


def window(i, rate, reasons=(), wait=0.0, partial=False, t0=None):
    t0 = float(i) if t0 is None else t0
    return {
        "index": i,
        "t0": t0,
        "t1": t0 + 1.0,
        "rate_per_s": rate,
        "partial": partial,
        "throttle_reasons": list(reasons),
        "interference": {"runq_wait_share": wait, "other_cpus": 0.0, "steal_share": 0.0},
        "max_temp_c": None,
    }


def test_each_window_gets_the_cause_its_evidence_supports():
    windows = [
        window(0, 100.0),
        window(1, 98.0),  # within 3 %: no drop
        window(2, 90.0, wait=0.30),  # drop with run-queue wait: interference
        window(3, 60.0, reasons=["clock_drop"]),  # throttled
        window(4, 95.0),  # drop, no evidence: unexplained
        window(5, 10.0, partial=True),  # partial: throughput not judged
    ]
    summary = attribute_windows(windows)
    assert [w["cause"] for w in windows] == [
        "none",
        "none",
        "interference",
        "throttling",
        "unexplained",
        "none",
    ]
    assert windows[2]["cause_detail"] == ["run-queue wait +30% of runnable time"]
    assert summary == {"drops": 3, "reference_index": 0}


def test_a_drop_on_a_machine_shared_throughout_is_interference_not_unexplained():
    # Every window waited for a CPU about as much: the fastest is no quiet reference, so a
    # drop beside it is not the board's. Without waits the same drop is unexplained.
    windows = [window(0, 100.0, wait=0.60), window(1, 63.0, wait=0.62), window(2, 99.0, wait=0.6)]
    attribute_windows(windows)
    assert [w["cause"] for w in windows] == ["none", "interference", "none"]
    assert windows[1]["cause_detail"] == [
        "run-queue wait 62% of runnable time here and in the fastest window too "
        "(no quiet window to compare with)"
    ]
    s = score_windows(windows, started_at=0.0, planned_windows=3)
    assert s["verdict"] == "stable" and s["interference_windows"] == 1
    quiet = [window(0, 100.0), window(1, 63.0, wait=0.62)]
    attribute_windows(quiet)
    assert quiet[1]["cause"] == "interference"  # its own wait rose over the reference's
    only_reference = [window(0, 100.0, wait=0.6), window(1, 63.0, wait=0.01)]
    attribute_windows(only_reference)
    assert only_reference[1]["cause"] == "unexplained"


def test_score_windows_verdicts():
    # An interfered window is kept but not scored: the other two decide, stable.
    w = [window(0, 100.0), window(1, 40.0, wait=0.5), window(2, 99.0)]
    s = score_windows(w, started_at=0.0)
    assert (s["verdict"], s["cause"], s["interference_windows"]) == ("stable", "none", 1)
    assert (s["windows"], s["scored_windows"]) == (3, 2)
    assert s["stability"] == 0.99 and s["stability_with_interference"] == 0.4
    assert [x["scored"] for x in w] == [True, False, True]
    assert (s["peak_per_s"], s["sustained_per_s"]) == (100.0, 99.5)
    # Too few windows left to score (2 of 4 planned needed, 1 left): inconclusive, never failed.
    w = [window(0, 100.0), window(1, 40.0, wait=0.5), window(2, 45.0, wait=0.5)]
    s = score_windows(w, started_at=0.0, planned_windows=4)
    assert (s["verdict"], s["cause"], s["scored_windows"]) == ("inconclusive", "interference", 1)
    assert "fewer than 2 of 4 planned windows" in s["reason"]
    assert "re-run on a quiet board" in s["reason"]
    # Throttling that fails the run even without the interfered window.
    w = [window(0, 100.0), window(1, 50.0, reasons=["passive_trip"]), window(2, 40.0, wait=0.5)]
    s = score_windows(w, started_at=0.0)
    assert (s["verdict"], s["cause"]) == ("failed", "throttling")
    assert s["time_to_first_throttle_s"] == 1.0
    # No evidence at all: unexplained, not failed.
    s = score_windows([window(0, 100.0), window(1, 50.0)], started_at=0.0)
    assert (s["verdict"], s["cause"]) == ("unexplained", "unexplained")
    # Throttled but steady: degraded.
    s = score_windows([window(0, 100.0), window(1, 99.0, reasons=["cooling_device"])], 0.0)
    assert (s["verdict"], s["cause"]) == ("degraded", "throttling")
    s = score_windows([window(0, 100.0), window(1, 99.0)], 0.0)
    assert (s["verdict"], s["cause"], s["reason"]) == ("stable", "none", None)


def telemetry(t, temp=None, clock=None, cooling=0, flags=None):
    return {
        "t": t,
        "temp_c": temp,
        "clocks_khz": {"policy0": clock},
        "arm_clock_khz": None,
        "cooling_states": {"cooling_device0": cooling},
        "throttled": flags,
    }


def test_window_telemetry_uses_the_one_throttle_rule_and_the_profile_indicators():
    samples = [
        telemetry(0.5, temp=50.0, clock=1_500_000),
        telemetry(1.5, temp=58.0, clock=1_500_000),
        telemetry(2.2, temp=61.0, clock=1_400_000, cooling=1),  # first sample after the window
    ]
    nominal = nominal_clocks_khz(samples)
    assert nominal == {"policy0": 1_500_000}
    w = {"t0": 0.0, "t1": 2.0}
    got = window_telemetry(w, samples, trip_c=60.0, nominal_khz=nominal)
    # Inside: 50 and 58 °C; the sample just after the window shows the throttling begun in it.
    assert got["max_temp_c"] == 58.0 and got["samples"] == 2
    assert got["throttle_reasons"] == ["clock_drop", "cooling_device", "passive_trip"]
    assert got["over_trip"] is False
    only = window_telemetry(w, samples, 60.0, nominal, indicators=["passive_trip"])
    assert only["throttle_reasons"] == ["passive_trip"]
    # 1,455,000 kHz is exactly 97 % of nominal: not a drop.
    edge = [telemetry(0.5, clock=1_500_000), telemetry(1.5, clock=1_455_000)]
    assert window_telemetry(w, edge, None, nominal_clocks_khz(edge))["throttle_reasons"] == []


def test_an_unexplained_drop_beside_interfered_windows_is_not_the_boards():
    # Window 2 dropped with no evidence; window 1 was taken by interference: undecided.
    w = [window(0, 100.0), window(1, 40.0, wait=0.5), window(2, 60.0), window(3, 99.0)]
    s = score_windows(w, started_at=0.0, planned_windows=4)
    assert (s["verdict"], s["cause"], s["scored_windows"]) == ("inconclusive", "interference", 3)
    assert "no throttling or interference measured" in s["reason"]
    # Without the interfered window the same drop is unexplained (degraded), as before.
    s = score_windows([window(0, 100.0), window(1, 60.0), window(2, 99.0)], 0.0)
    assert (s["verdict"], s["cause"]) == ("unexplained", "unexplained")
