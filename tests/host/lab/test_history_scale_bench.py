"""scripts/bench/history_scale.py runs end to end at a small scale (SQLite): ingest, the
state's catch-up and nightly updates, the full recompute, the detector's quality."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench" / "history_scale.py"


@pytest.mark.slow
def test_history_scale_bench_runs_and_reports_every_measurement(tmp_path):
    argv = [sys.executable, str(SCRIPT), "--series", "6", "--nights", "50", "--steps", "2"]
    argv += ["--new-nights", "2", "--block", "20", "--full-sample", "1", "--baseline-rows", "20"]
    run = subprocess.run(
        argv + ["--backends", "sqlite"], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["runs"] == 300
    sqlite = out["sqlite"]
    assert sqlite["ingest_runs_per_s"] > sqlite["ingest_row_by_row_runs_per_s"] > 0
    assert sqlite["one_night_update_s"]["nights"] == 2
    assert sqlite["full_recompute"]["series_measured"] == 1
    assert set(sqlite["quality"]) == {"cv_0.05", "cv_0.18"}
    assert 0 < out["peak_rss_mb"] < 500
