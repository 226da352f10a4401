#!/usr/bin/env python3
"""Benchmark: edgequal's change points beside Apache Otava 0.8's on the same series (issue 47
item 2).

Draws ``--series`` series of ``--nights`` nights as scripts/bench/history_scale.py plants
them (CV 5 % and 18 %, steps of ×1.05 to ×1.5), then finds their change points three ways:

- ``edgequal_nightly``: the state kept night by night (``change_state.FigureState.advance``,
  one night at a time after the first 60, the nightly p 0.001);
- ``edgequal_full``: ``history changes``' detector on the whole series at once (E-Divisive,
  p 0.01, 5 % minimum effect);
- ``otava``: Otava 0.8's ``compute_change_points`` (its sliding-window E-Divisive with a
  t-test, Fleming et al. 2023) with its defaults (window 50, p 0.001) and a 5 % minimum
  magnitude, run by ``--otava-python`` (a Python with apache-otava 0.8 installed: it pins
  numpy 2.2.0, so it lives in a virtual environment of its own).

A change counts as found where it lies within ±1 night of a planted step. Prints one JSON
object: per method and CV, precision, recall for steps ≥ ×1.10, and how often the methods
name the same nights.

    python scripts/bench/otava_compare.py --otava-python /tmp/otava-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from history_scale import CVS, plant  # noqa: E402

OTAVA = """
import json, sys
from otava.analysis import compute_change_points
data = json.load(sys.stdin)
out = []
for values in data["series"]:
    cps, _ = compute_change_points(values, window_len=50, max_pvalue=0.001, min_magnitude=0.05)
    out.append([int(c.index) for c in cps])
json.dump(out, sys.stdout)
"""


def ours(values, nightly_from: int = 60) -> tuple[list[list[int]], list[list[int]]]:
    """Change points of every series: night by night (the state) and all at once."""
    from edgequal.host.judge.change_points import change_points
    from edgequal.host.lab.change_state import FigureState, nightly
    from edgequal.host.lab.changes import ChangeSettings

    settings = nightly(ChangeSettings())
    by_night, whole = [], []
    for s, row in enumerate(values):
        state = FigureState(("b", str(s), "", "p50_ms"))
        state.advance(row[:nightly_from], settings)
        for n in range(nightly_from, len(row)):
            state.advance(row[n : n + 1], settings)
        by_night.append([c["index"] for c in state.all_changes()])
        whole.append([c.index for c in change_points(row, min_effect=0.05)])
    return by_night, whole


def score(found: list[list[int]], planted: dict) -> dict:
    """Precision and recall (steps ≥ ×1.10) per CV, a change within ±1 night of a step."""
    out = {}
    for cv in CVS:
        tp = fp = hit = steps = 0
        for s, idx in enumerate(found):
            if planted["cv"][s] != cv:
                continue
            at = int(planted["step_at"][s])
            for i in idx:
                tp, fp = (tp + 1, fp) if at >= 0 and abs(i - at) <= 1 else (tp, fp + 1)
            if at >= 0 and planted["factor"][s] >= 1.10:
                steps += 1
                hit += any(abs(i - at) <= 1 for i in idx)
        out[f"cv_{cv:g}"] = {
            "changes": tp + fp,
            "precision": round(tp / (tp + fp), 3) if tp + fp else None,
            "recall_ge_1.10": f"{hit}/{steps}",
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--otava-python", required=True, help="a Python with apache-otava 0.8")
    ap.add_argument("--series", type=int, default=40)
    ap.add_argument("--nights", type=int, default=300)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seed", type=int, default=48)
    args = ap.parse_args(argv)
    planted = plant(args.series, args.nights, args.steps, args.seed)
    values = [[float(v) for v in row] for row in planted["values"]]
    run = subprocess.run(
        [args.otava_python, "-c", OTAVA],
        input=json.dumps({"series": values}),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if run.returncode != 0:
        print(f"otava failed: {run.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 3
    otava = json.loads(run.stdout)
    version = subprocess.run(
        [
            args.otava_python,
            "-c",
            "import importlib.metadata as m; print(m.version('apache-otava'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    by_night, whole = ours(values)
    same = sum(
        all(any(abs(i - j) <= 1 for j in b) for i in a)
        and all(any(abs(i - j) <= 1 for j in a) for i in b)
        for a, b in zip(by_night, otava)
    )
    print(
        json.dumps(
            {
                "series": args.series,
                "nights": args.nights,
                "planted_steps": args.steps,
                "otava_version": version,
                "edgequal_nightly": score(by_night, planted),
                "edgequal_full": score(whole, planted),
                "otava": score(otava, planted),
                "series_where_nightly_and_otava_name_the_same_nights": f"{same}/{args.series}",
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
