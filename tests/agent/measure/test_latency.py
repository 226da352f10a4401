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
