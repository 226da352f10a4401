#!/usr/bin/env python3
"""Benchmark: false alarms of ``history changes`` on unchanged series (issue 45 item 3:
"history changes on 100 unchanged 30-night series finds no change in ≥ 99").

Measures ``--runs`` real short qualifications of one unchanged model (the agent's own
measurement, ``run_measurement``: quick plan shortened, one thread, one cold load), one
after another on this machine: the nights of an unchanged export on one board. Each
run's results (the figures ``history changes`` follows and the machine's readings: other
processes' CPU use, the clean-call share, the runtime's import) are kept (``--save``,
raw samples left out), so the same runs can be analysed again (``--load``).

Then ``--series`` series of ``--nights`` nights, each drawn from those runs without
replacement, in two ways:

- ``recorded order``: each series keeps the runs in the order they were measured (the
  machine's own drift and its neighbours' load changes stay in it: a step there is real,
  of the machine, not of the model);
- ``shuffled``: each series in a random order (exchangeable: any change is the
  detector's false alarm).

Each series goes through ``host/lab/changes.py`` ``series_changes`` with the default
sensitivity (every figure: clean p50 and p99, cold load, first inference, drift, peak
memory), each change classified (recorded / machine / unexplained). Prints one JSON
object: per ordering, how many series had no change at all, how many had no change that
would fail a fleet run (``Change.fails``: worse and not the machine's), and the changes by
figure and cause.

    python scripts/bench/change_false_alarms.py [--runs 60] [--series 100] [--nights 30]
        [--save runs.json | --load runs.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def _pick(d, keys) -> dict:
    return {k: d[k] for k in keys if isinstance(d, dict) and k in d}


def trim(run: dict) -> dict:
    """What ``history changes`` reads of a run: its status and time, the plan's and the
    fingerprint's fields a culprit could name, the figures it follows and the machine's
    readings (raw samples and everything else left out)."""
    results = run.get("results") or {}
    shapes = (results.get("latency") or {}).get("per_shape") or []
    figures = ("p50_ms", "p99_ms", "count")
    latency = []
    for entry in shapes[:1]:
        latency.append(
            {
                "shape": entry.get("shape"),
                "summary": _pick(entry.get("summary") or {}, figures),
                "clean": _pick(entry["clean"], figures) if entry.get("clean") else None,
                "preemption": _pick(
                    entry.get("preemption") or {},
                    ("calls", "excluded", "share", "needed", "clean_enough"),
                ),
                "interference": _pick(entry.get("interference") or {}, ("other_cpus",)),
            }
        )
    cold = results.get("cold_load") or {}
    drift = (results.get("drift") or {}).get("outputs") or {}
    return {
        "status": run["status"],
        "finished_at": run["finished_at"],
        "plan": _pick(run.get("plan") or {}, ("preset", "profile", "threads")),
        "fingerprint": _pick(
            run.get("fingerprint") or {}, ("kernel", "os_release", "architecture")
        ),
        "results": {
            "latency": {"per_shape": latency},
            "cold_load": {
                k: _pick(cold.get(k) or {}, ("median",))
                for k in ("total_ms", "first_inference_ms", "import_ms")
            },
            "memory": _pick(results.get("memory") or {}, ("peak_rss_bytes",)),
            "drift": {"outputs": {k: _pick(v, ("max_abs",)) for k, v in drift.items()}},
            "runtime": _pick(results.get("runtime") or {}, ("runtime", "version")),
        },
    }


def measure(runs: int) -> list[dict]:
    """``runs`` real short qualifications of the mid example model with its golden set:
    each its trimmed results, fingerprint and when it finished."""
    from edgequal.agent.phases.qualification import run_measurement
    from edgequal.contract.plan import make_plan
    from edgequal.host.examples.catalog import build_example, example_inputs
    from edgequal.host.golden import make_golden

    base = Path(tempfile.mkdtemp(prefix="edgequal-bench-"))
    model = build_example("mid", base)
    cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs("mid", 4))}
    golden = base / "golden.npz"
    make_golden(model, cases, golden)
    plan = make_plan(
        "quick",
        threads=1,
        cold_runs=1,
        latency_min_runs=100,
        latency_min_s=0.3,
        latency_max_s=3.0,  # on a loaded machine, room for clean calls (else inconclusive)
        warmup_min_s=0.1,
        warmup_max_s=0.5,
        sustain_s=0.0,
        cooldown=False,
    )
    out = []
    for i in range(runs):
        result = run_measurement(model, golden, plan)
        out.append(
            trim(
                {
                    **result,
                    "finished_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "plan": plan.to_json(),
                }
            )
        )
        shape = out[-1]["results"]["latency"]["per_shape"][0]
        p50 = (shape.get("clean") or shape.get("summary") or {}).get("p50_ms")
        print(f"run {i + 1}/{runs}: {result['status']}, p50 {p50}", file=sys.stderr)
    return out


def _series(runs: list[dict]):
    """A ``series.Series`` of ``runs`` (each a predicate) as nightly points."""
    from edgequal.host.lab.series import Point, Series

    s = Series("bench", "mid", "quick")
    start = dt.datetime(2026, 11, 1, 2, 0)
    for n, pred in enumerate(runs):
        report = SimpleNamespace(predicate=pred, subjects=[])
        s.points.append(Point(f"run-{n}", start + dt.timedelta(days=n), None, f"{n:064x}", report))
    return s


def analyse(runs: list[dict], series: int, nights: int, seed: int) -> dict:
    """The false alarms over ``series`` series of ``nights`` drawn from ``runs``."""
    from edgequal.host.lab.changes import ChangeSettings, series_changes

    settings = ChangeSettings()
    points = [r for r in runs if r["status"] in ("passed", "degraded")]
    rng = np.random.default_rng(seed)
    out = {"runs": len(runs), "points": len(points), "series": series, "nights": nights}
    for order in ("recorded order", "shuffled"):
        quiet = not_failing = 0
        by_figure: dict[str, dict[str, int]] = {}
        for _ in range(series):
            pick = rng.choice(len(points), size=nights, replace=False)
            pick = np.sort(pick) if order == "recorded order" else pick
            changes = series_changes(_series([points[i] for i in pick]), settings)
            quiet += not changes
            not_failing += not any(c.fails(settings) for c in changes)
            for c in changes:
                entry = by_figure.setdefault(c.figure, {})
                key = f"{c.cause}{'' if c.worse else ' (better)'}"
                entry[key] = entry.get(key, 0) + 1
        out[order] = {
            "series_with_no_change": quiet,
            "series_with_no_failing_change": not_failing,
            "changes_by_figure_and_cause": by_figure,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--series", type=int, default=100)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--save", type=Path, help="write the measured runs here")
    ap.add_argument("--load", type=Path, help="analyse these runs instead of measuring")
    args = ap.parse_args()
    runs = json.loads(args.load.read_text()) if args.load else measure(args.runs)
    if args.save:
        args.save.write_text(json.dumps(runs, separators=(",", ":")) + "\n")
    if len([r for r in runs if r["status"] in ("passed", "degraded")]) < args.nights:
        print("fewer measured points than --nights", file=sys.stderr)
        return 2
    print(json.dumps(analyse(runs, args.series, args.nights, args.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
