#!/usr/bin/env python3
"""Benchmark: how many repetitions SAME / DIFFERENT / UNKNOWN needs to decide a shift of 1×
and 2× the run-to-run inter-quartile range (issue 34, ``qualify --repeat-until-decided``).

Measures ``--runs`` real short qualifications of the ``mid`` example model (the agent's
own measurement, ``run_measurement``, quick plan shortened, one thread) and keeps each
run's clean p50: the run-to-run spread of a real board (this machine). Then, for each
shift (0, 1× and 2× the IQR of those p50s), ``--trials`` times: pairs are drawn from the
measured p50s (with replacement; the candidate's shifted), added one pair at a time as
``--repeat-until-decided`` adds them, and ``host/judge/verdict.py``'s ``decide`` runs
after each pair (with no minimum effect: the question is the statistics' power) until
the verdict is SAME or DIFFERENT or ``--max-pairs`` are spent. Prints one JSON object:
per shift, the median and 90th percentile of the pairs needed, and how often each
verdict was reached.

    python scripts/bench/verdict_repetitions.py [--runs 16] [--trials 400] [--max-pairs 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def measured_p50s(runs: int) -> list[float]:
    """Clean p50 (ms) of ``runs`` real short qualifications of the mid example model."""
    from edgequal.agent.phases.qualification import run_measurement
    from edgequal.contract.plan import make_plan
    from edgequal.contract.preemption import decisive_summary
    from edgequal.host.examples.catalog import build_example

    model = build_example("mid", Path(tempfile.mkdtemp(prefix="edgequal-bench-")))
    plan = make_plan(
        "quick",
        threads=1,
        cold_runs=1,
        latency_min_runs=100,
        latency_min_s=0.3,
        warmup_min_s=0.2,
        warmup_max_s=1.0,
        sustain_s=0.0,
    )
    out = []
    for i in range(runs):
        result = run_measurement(model, None, plan)
        shape = result["results"]["latency"]["per_shape"][0]
        out.append(float(decisive_summary(shape)["p50_ms"]))
        print(f"run {i + 1}/{runs}: p50 {out[-1]:.4f} ms", file=sys.stderr)
    return out


def pairs_to_decide(values, shift, trials, max_pairs, rng) -> dict:
    """Repeat-until-decided on draws from ``values``, the candidate shifted by ``shift``."""
    from edgequal.host.judge.verdict import DIFFERENT, SAME, UNKNOWN, decide

    needed, verdicts = [], {SAME: 0, DIFFERENT: 0, UNKNOWN: 0}
    values = np.asarray(values)
    for _ in range(trials):
        base = rng.choice(values, size=max_pairs)
        cand = rng.choice(values, size=max_pairs) + shift
        verdict, n = UNKNOWN, max_pairs
        for n in range(2, max_pairs + 1):
            verdict = decide(base[:n], cand[:n], 0.0).verdict
            if verdict != UNKNOWN:
                break
        verdicts[verdict] += 1
        if verdict != UNKNOWN:
            needed.append(n)
    return {
        "decided_share": round(1 - verdicts[UNKNOWN] / trials, 3),
        "verdicts": verdicts,
        "pairs_median": float(np.median(needed)) if needed else None,
        "pairs_p90": float(np.quantile(needed, 0.9)) if needed else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16, help="real qualifications (default 16)")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--max-pairs", type=int, default=30)
    args = parser.parse_args(argv)
    p50s = measured_p50s(args.runs)
    q1, q3 = np.quantile(p50s, [0.25, 0.75])
    iqr = float(q3 - q1)
    rng = np.random.default_rng(34)
    out = {
        "model": "mid",
        "runs": args.runs,
        "p50_ms": {"median": float(np.median(p50s)), "iqr": iqr, "values": p50s},
        "max_pairs": args.max_pairs,
        "trials": args.trials,
        "shifts": {
            label: pairs_to_decide(p50s, k * iqr, args.trials, args.max_pairs, rng)
            for label, k in (("0", 0.0), ("1x_iqr", 1.0), ("2x_iqr", 2.0))
        },
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
