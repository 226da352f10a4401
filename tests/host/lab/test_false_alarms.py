"""False alarms of ``history changes`` on 100 unchanged 30-night series drawn from 80 real
qualifications of one unchanged model (tests/fixtures/history/unchanged-nights.json,
recorded by scripts/bench/change_false_alarms.py, whose analysis this runs): every
figure, the default sensitivity, each change classified."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    path = ROOT / "scripts" / "bench" / "change_false_alarms.py"
    spec = importlib.util.spec_from_file_location("_edgequal_bench_change_false_alarms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 200 series through the detector: about 10 CPU-seconds
def test_unchanged_series_of_real_runs_raise_no_failing_change():
    runs = json.loads((ROOT / "tests/fixtures/history/unchanged-nights.json").read_text())
    assert len(runs) == 80 and all(r["status"] in ("passed", "degraded") for r in runs)
    found = _bench().analyse(runs, series=100, nights=30, seed=45)
    shuffled, recorded = found["shuffled"], found["recorded order"]
    print(json.dumps(found, indent=1))
    # Shuffled (exchangeable: every change is a false alarm of the detector): measured 96 of
    # 100 series with no change at all over their six figures, 98 with no change that would
    # fail a fleet run (the target, 99 with no change, is not met by the detector).
    assert shuffled["series_with_no_change"] >= 96
    assert shuffled["series_with_no_failing_change"] >= 98
    # In recorded order the machine's own drift stays in (it got quieter while the runs were
    # measured: other processes' CPU use 1.27 → 0.13 CPUs, the median cold load 152 → 116
    # ms from the first 20 runs to the last): 74 series with no change, nearly every change
    # found the machine's; 99 with none that fails.
    assert recorded["series_with_no_failing_change"] >= 99
    machine = sum(
        n
        for figure in recorded["changes_by_figure_and_cause"].values()
        for cause, n in figure.items()
        if cause.startswith("machine")
    )
    every = sum(n for f in recorded["changes_by_figure_and_cause"].values() for n in f.values())
    assert machine >= 0.9 * every, recorded
