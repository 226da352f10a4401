"""A qualification where /proc is absent (a macOS host's local agent), tried on Linux by
pointing the worker's and the contention sampler's proc root at an empty directory."""

from __future__ import annotations

import pytest
from edgequal.agent.phases.qualification import run_measurement

# Starts real worker processes for a few seconds: the fast loop skips it.
pytestmark = pytest.mark.slow


def test_memory_from_psutil_and_contention_not_measurable(
    example_models, golden_sets, quick_plan, tmp_path, monkeypatch
):
    empty = tmp_path / "no-proc"
    empty.mkdir()
    # The agent's workers inherit it, as they inherit $EDGEQUAL_ROOT.
    monkeypatch.setenv("EDGEQUAL_PROC_ROOT", str(empty))
    plan = quick_plan(warmup_max_s=0.3, sustain_s=2.0, window_s=1.0, cooldown=False)
    out = run_measurement(
        example_models["classifier"], golden_sets["classifier"], plan, root=tmp_path / "board"
    )
    results = out["results"]
    assert not out["findings"], out["findings"]
    # Memory still measured (psutil in the worker): the model load adds to a real RSS.
    memory = results["memory"]
    assert memory["rss_before_load_bytes"] > 10 << 20
    assert memory["peak_rss_bytes"] >= memory["rss_before_load_bytes"]
    # Contention: said to be unmeasurable, and every figure of it absent, never zero.
    assert results["contention"]["measurable"] is False
    assert str(empty) in results["contention"]["reason"]
    entry = results["latency"]["per_shape"][0]
    for key in ("runq_wait_share", "other_cpus", "cpu_share"):
        assert entry["interference"][key] is None
    assert entry["preemption"]["evidence"]["runq_wait_share"] is None
    windows = results["sustained"]["windows_detail"]
    assert windows and all(w["interference"]["runq_wait_share"] is None for w in windows)
    assert all(w["cause"] != "interference" for w in windows)
    # The run is judged on what was measured: never inconclusive for want of /proc.
    assert out["status"] in ("passed", "degraded"), out["reason"]
    if results["sustained"]["verdict"] == "unexplained":
        assert "interference is not measurable" in results["sustained"]["reason"]
