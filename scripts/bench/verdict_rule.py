"""The verdict rule's error rates on simulated runs (docs/gating.md "Expected error rates").

For each number of runs a side and run-to-run spread, 1,000 comparisons per cell of
log-normal runs (one run a side assumes the board's history CV, known from 19 degrees of
freedom), and the same on runs in two modes (a quarter of the runs 38 % slower, 1 % CV
within a mode: what a chain model's runs did on the project's 2-core VM). Prints one JSON
object per cell, then the markdown table docs/gating.md shows; ``--no-split`` leaves out
the runs' split test, the baseline it is compared against.

    python scripts/bench/verdict_rule.py [--trials 1000] [--seed 7] [--no-split]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from edgequal.host.judge.verdict import DIFFERENT, SAME, Spread, decide


def _runs(rng, n: int, cv: float, shift: float, modes: bool) -> np.ndarray:
    x = shift * np.exp(rng.normal(0, cv, n))
    return x * np.where(rng.random(n) < 0.25, 1.38, 1.0) if modes else x


def cell(rng, n: int, cv: float, modes: bool, trials: int, split: bool) -> dict:
    """Rates of one cell: A/A DIFFERENT and SAME, 5 % and 10 % slower DIFFERENT, 10 % SAME."""
    prior = Spread.from_cv(cv if not modes else 0.15, df=19) if n == 1 else None

    def verdicts(shift: float) -> list[str]:
        return [
            decide(
                _runs(rng, n, cv, 1.0, modes),
                _runs(rng, n, cv, shift, modes),
                0.03,
                prior=prior,
                split=split,
            ).verdict
            for _ in range(trials)
        ]

    aa, five, ten = verdicts(1.0), verdicts(1.05), verdicts(1.10)
    return {
        "runs_a_side": n,
        "cv": cv,
        "modes": modes,
        "aa_false_different": aa.count(DIFFERENT) / trials,
        "aa_same": aa.count(SAME) / trials,
        "slower_5_different": five.count(DIFFERENT) / trials,
        "slower_10_different": ten.count(DIFFERENT) / trials,
        "slower_10_false_same": ten.count(SAME) / trials,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-split", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for modes, cvs in ((False, (0.01, 0.02, 0.05)), (True, (0.01,))):
        for cv in cvs:
            for n in (1, 3, 5, 10):
                rows.append(cell(rng, n, cv, modes, args.trials, not args.no_split))
                print(json.dumps(rows[-1]), flush=True)
    print()
    print("| runs a side | CV | A/A false DIFFERENT | A/A SAME | 5 % slower DIFFERENT "
          "| 10 % slower DIFFERENT | 10 % slower false SAME |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        n = f"{r['runs_a_side']} (history)" if r["runs_a_side"] == 1 else str(r["runs_a_side"])
        cv = f"{r['cv']:.0%}" + (" in two modes" if r["modes"] else "")
        rates = [
            r[k]
            for k in (
                "aa_false_different",
                "aa_same",
                "slower_5_different",
                "slower_10_different",
                "slower_10_false_same",
            )
        ]
        print(f"| {n} | {cv} | " + " | ".join(f"{100 * v:.1f} %" for v in rates) + " |")


if __name__ == "__main__":
    main()
