#!/usr/bin/env python3
"""Benchmark: what keeping the last cold-load worker for the warm phase saves a qualification.

A qualification's cold load starts N fresh workers; the last now stays, its model
loaded, and runs the warm latency phase (``measure_cold_load(keep_last=True)``,
``measure_warm(kept=...)``). The baseline, measured in the same run, is the same two
phases with the warm phase in a worker of its own (``keep_last=False``), as before.
Rounds alternate the two, on the demo's classifier and golden set with the quick plan's
cold loads (3) and a shortened latency loop. For each, the CPU seconds of the worker
processes (``RUSAGE_CHILDREN``: every worker is this process's child) and the wall time of
the two phases; the medians and the saving; and the warm p50 either way, which must agree
(the phase measures the same session type in both). On a small board the saving is one
runtime import and one model load a run.

    python scripts/bench/kept_worker.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each (default 10)")
    parser.add_argument("--latency", type=float, default=0.5, help="timed seconds a run")
    args = parser.parse_args(argv)
    from edgequal.agent.phases.cold_load import measure_cold_load
    from edgequal.agent.phases.warm import measure_warm
    from edgequal.cli.demo import prepare
    from edgequal.contract.plan import make_plan
    from edgequal.contract.runtimes import runtime_for

    work = Path(tempfile.mkdtemp(prefix="edgequal-bench-"))
    model, golden = prepare(work)["classifier"]  # the demo's, as the demo builds them
    plan = make_plan("quick", latency_min_s=args.latency, sustain_s=0.0)
    runtime = runtime_for(model, plan.runtime, None)
    cancel = threading.Event()

    def one(keep: bool) -> dict:
        findings: list = []
        cpu0, t0 = _children_cpu_s(), time.monotonic()
        cold, kept = measure_cold_load(
            model, golden, plan, runtime, lambda e: None, cancel, findings, keep_last=keep
        )
        warm = measure_warm(
            model, golden, plan, runtime, lambda e: None, cancel, findings, kept=kept
        )
        if kept is not None:
            kept.end()
        if cold is None or warm is None:
            raise SystemExit(f"a phase failed: {findings}")
        return {
            "workers_cpu_s": _children_cpu_s() - cpu0,
            "wall_s": time.monotonic() - t0,
            "p50_ms": warm["latency"][0]["summary"]["p50_ms"],
        }

    kept_runs, fresh_runs = [], []
    for i in range(args.rounds):
        for keep in (True, False) if i % 2 == 0 else (False, True):
            (kept_runs if keep else fresh_runs).append(one(keep))

    def medians(runs: list[dict]) -> dict:
        return {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}

    kept, fresh = medians(kept_runs), medians(fresh_runs)
    out = {
        "model": "classifier",
        "plan": {"preset": "quick", "cold_runs": plan.cold_runs, "latency_min_s": args.latency},
        "rounds": args.rounds,
        "kept_worker": kept,
        "baseline_fresh_warm_worker": fresh,
        "saved_cpu_s_per_run": round(fresh["workers_cpu_s"] - kept["workers_cpu_s"], 4),
        "saved_cpu_share": round(1 - kept["workers_cpu_s"] / fresh["workers_cpu_s"], 4),
        "saved_wall_s_per_run": round(fresh["wall_s"] - kept["wall_s"], 4),
        # The warm figures must not move with where they were measured.
        "p50_ratio_kept_over_fresh": round(kept["p50_ms"] / fresh["p50_ms"], 4),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
