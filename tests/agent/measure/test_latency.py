"""The warm-up and timing loop of measure/latency.py on real calls, judged on their own clock."""

from __future__ import annotations

import time

from edgequal.agent.measure.latency import LatencySettings, warm_up


def test_warm_up_runs_its_minimum_seconds_even_for_a_fast_call():
    """A call far faster than the warm-up buffer can hold for the minimum seconds still warms
    up for those seconds (on the loop's own clock), then judges steadiness."""
    settings = LatencySettings(
        warmup_min_runs=10, warmup_min_s=0.3, warmup_max_s=5.0, min_runs=1, min_s=0.0, max_runs=1
    )
    t0 = time.monotonic()
    result = warm_up(lambda: None, settings)
    assert time.monotonic() - t0 >= 0.3
    assert result["seconds"] >= 0.3 and result["runs"] > 4096  # more than one buffer-full


def test_the_timed_loop_runs_its_seconds_when_the_warm_up_underestimated_its_pace():
    """The sample array is sized from the warm-up's pace; a loop that runs faster than
    that fills it early, grows it, and still runs its planned seconds."""
    from edgequal.agent.measure.latency import measure_latency

    pace = {"fast": False}

    def call():
        if not pace["fast"]:
            time.sleep(0.002)  # the warm-up's pace: 2 ms a call
        else:
            sum(range(300))  # then a few µs: 0.3 s stays far below max_runs

    settings = LatencySettings(
        warmup_min_runs=10,
        warmup_min_s=0.05,
        warmup_max_s=0.2,
        min_runs=20,
        min_s=0.3,
        max_runs=1_000_000,
    )
    result = measure_latency(
        call, settings, on_phase=lambda name: pace.update(fast=name == "latency")
    )
    # 0.3 s at the warm-up's pace is about 166 calls: the array held 265 at first.
    assert result["loop_s"] >= 0.3
    assert result["summary"]["count"] > 265


def _switch_every(k: int, slow_ns: int = 0, slow: list | None = None):
    """A ``switches`` reader and a call: every k-th call moves the reader's count (as a
    preemption during it would) and, with ``slow_ns``, busies itself that long (its call
    number, from 1, appended to ``slow``). The reader adds the process's real involuntary
    switches (the worker's own reader): on a busy machine other processes preempt the
    fast calls too, and the loop tags those as it would on a board."""
    from edgequal.agent.worker.io import involuntary_switches

    state = {"calls": 0, "switched": 0}

    def call():
        state["calls"] += 1
        if state["calls"] % k == 0:
            state["switched"] += 1
            if slow is not None:
                slow.append(state["calls"])
            t_end = time.perf_counter_ns() + slow_ns
            while time.perf_counter_ns() < t_end:
                pass

    return (lambda: state["switched"] + involuntary_switches()), call


def test_tagged_calls_are_excluded_from_the_clean_figures_and_the_tags_round_trip():
    from edgequal.agent.measure.latency import measure_latency
    from edgequal.contract.preemption import decode_tags

    slow: list[int] = []
    switches, call = _switch_every(10, slow_ns=2_000_000, slow=slow)
    settings = LatencySettings(
        warmup_min_runs=10, warmup_min_s=0.0, warmup_max_s=0.05, min_runs=200, min_s=0.0,
        max_runs=100_000,
    )  # fmt: skip
    out = measure_latency(call, settings, switches=switches)
    pre = out["preemption"]
    calls = pre["calls"]
    tags = decode_tags(out["preempted_b64"], calls)
    assert int(tags.sum()) == pre["excluded"]
    # Every 10th call was tagged (the slow ones; the timed loop's call i is call number
    # warm-up runs + i + 1); others only where this process was really preempted.
    timed_slow = [n - out["warmup"]["runs"] - 1 for n in slow if n > out["warmup"]["runs"]]
    assert len(timed_slow) == calls // 10 or len(timed_slow) == calls // 10 + 1
    assert all(tags[i] for i in timed_slow)
    assert out["clean"]["count"] == calls - pre["excluded"] >= 200
    assert pre["clean_enough"] and pre["needed"] == 200
    assert out["clean"]["max_ms"] < 1.0 < out["summary"]["max_ms"]  # the 2 ms calls are out


def test_the_loop_runs_on_until_clean_calls_reach_the_p99_floor():
    """200 clean calls come with about 400 in all, past p99's 368-sample floor as measured:
    the clean figures need 368 too, so with half the calls tagged the loop runs on to ~736."""
    from edgequal.agent.measure.latency import measure_latency

    switches, call = _switch_every(2)
    settings = LatencySettings(
        warmup_min_runs=10, warmup_min_s=0.0, warmup_max_s=0.05, min_runs=200, min_s=0.0,
        max_runs=100_000, max_s=5.0,
    )  # fmt: skip
    out = measure_latency(call, settings, switches=switches)
    pre = out["preemption"]
    assert pre["needed"] == 368 and pre["clean_enough"]
    assert out["clean"]["count"] >= 368 and out["clean"]["p99_ms"] is not None
    assert pre["calls"] >= 700


def test_a_loop_that_cannot_get_enough_clean_calls_says_so_at_its_limit():
    from edgequal.agent.measure.latency import measure_latency

    settings = LatencySettings(
        warmup_min_runs=10, warmup_min_s=0.0, warmup_max_s=0.05, min_runs=50, min_s=0.05,
        max_runs=20_000_000,
    )  # fmt: skip
    reads = iter(range(10**9))
    out = measure_latency(lambda: None, settings, switches=lambda: next(reads))  # all tagged
    pre = out["preemption"]
    assert out["clean"] is None and not pre["clean_enough"]
    assert pre["excluded"] == pre["calls"] > 0
    # Without the plan's max seconds the loop ran on to its limit (0.05 s + 0.5 s), no longer.
    assert 0.55 <= out["loop_s"] < 1.0


def test_the_loop_limit_is_the_plans_extension_factor_of_its_time():
    from edgequal.contract.plan import loop_limit_s

    assert loop_limit_s(3.0, None) == 9.0  # default: 3 x the plan's time
    assert loop_limit_s(60.0, None, 2.0) == 120.0
    assert loop_limit_s(0.05, None) == 0.55  # at least 0.5 s past the plan's time
    assert loop_limit_s(3.0, 4.0, 10.0) == 4.0  # the plan's max seconds win


def test_a_loop_short_of_clean_calls_extends_to_its_bound_and_says_how_long():
    """Every call tagged: the loop runs on past its 0.1 s to 6 x (0.6 s), records the
    bound and how long it ran past the plan, and stays short of clean calls."""
    from edgequal.agent.measure.latency import measure_latency
    from edgequal.contract.preemption import excluded_text

    settings = LatencySettings(
        warmup_min_runs=10, warmup_min_s=0.0, warmup_max_s=0.05, min_runs=50, min_s=0.1,
        max_runs=20_000_000, max_extension=6.0,
    )  # fmt: skip
    reads = iter(range(10**9))
    out = measure_latency(lambda: None, settings, switches=lambda: next(reads))
    pre = out["preemption"]
    assert pre["limit_s"] == 0.6 and not pre["clean_enough"]
    assert out["loop_s"] >= 0.6 and pre["extended_s"] >= 0.5
    text = excluded_text({**out, "preemption": pre})
    assert f"timed {out['loop_s']:.1f} s, {pre['extended_s']:.1f} s past the plan's time" in text
    assert "(bound 0.6 s)" in text and f"0 clean, {pre['needed']} needed" in text


def test_the_closed_loop_runs_one_window_more_for_each_window_asked_for():
    from edgequal.agent.measure.sustained import closed_loop

    seen = []
    out = closed_loop(
        lambda: None, 0.3, 0.1, seen.append, lambda: False,
        windows_added=lambda: 1 if len(seen) >= 1 else 0,
    )  # fmt: skip
    windows = out["windows"]
    # 0.3 s and one window more: the loop ends at 0.4 s or later (four windows of 0.1 s on
    # a quiet machine; a window that closes late, the process stalled beside other suites,
    # makes fewer, longer ones).
    assert windows[-1]["t1"] - windows[0]["t0"] >= 0.4
    assert [w["index"] for w in windows] == list(range(len(windows))) and len(windows) >= 2
    assert not any(w["partial"] for w in windows)
