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
