#!/usr/bin/env python3
"""Benchmark: whole-process wall time of ``edgequal qualify --plan quick`` on the classifier example.

Builds the demo's classifier model and golden set once, then runs the README's command
``edgequal qualify classifier.onnx --golden classifier.golden.npz --plan quick -o R``
``--runs`` times as a fresh process (local agent, a fresh state directory each time,
so the agent's key generation and the model push are in every run). For each run it
records the process's wall time and, from the signed report, the time the phases
themselves took (``results.elapsed_s``), the warm-up's seconds and whether it reached a
steady state. The baseline measured in the same run is the phases' own time: what
the CLI, the local agent's start-up and the push add on top is the difference.

Target (issue 8): median wall time under 8 s on a quiet machine. Prints one JSON object.

    python scripts/bench/qualify_quick.py [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 8.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="qualifications to time (default 5)")
    args = parser.parse_args(argv)
    from edgequal.cli.demo import GOLDEN_CASES
    from edgequal.host.examples.catalog import EXAMPLES, build_example, example_inputs
    from edgequal.host.golden import make_golden

    work = Path(tempfile.mkdtemp(prefix="edgequal-bench-"))
    # The demo's classifier and golden set, built as cli/demo.py's prepare() does.
    model = build_example("classifier", work / "models")
    cases = {f"case{i:02d}": f for i, f in enumerate(example_inputs("classifier", GOLDEN_CASES))}
    golden = work / "classifier.golden.npz"
    make_golden(model, cases, golden, decision=EXAMPLES["classifier"].decision_rule)
    edgequal = [
        sys.executable,
        "-c",
        "from edgequal.cli.main import main; raise SystemExit(main())",
    ]
    runs = []
    for i in range(args.runs):
        state = work / f"state{i}"
        env = {
            **os.environ,
            "XDG_STATE_HOME": str(state / "state"),
            "XDG_CONFIG_HOME": str(state / "config"),
            "EDGEQUAL_AGENT_STATE": str(state / "agent"),
        }
        report = work / f"r{i}.report.json"
        cmd = [*edgequal, "qualify", str(model), "--golden", str(golden), "--plan", "quick"]
        t0 = time.monotonic()
        proc = subprocess.run(
            [*cmd, "-o", str(report)], env=env, capture_output=True, text=True, timeout=300
        )
        wall = time.monotonic() - t0
        predicate = json.loads(base64.b64decode(json.loads(report.read_text())["payload"]))[
            "predicate"
        ]
        results = predicate["results"]
        warm = results["latency"]["per_shape"][0]["warmup"]
        runs.append(
            {
                "exit": proc.returncode,
                "status": predicate["status"],
                "wall_s": round(wall, 3),
                "phases_s": results["elapsed_s"],
                "warmup_s": warm["seconds"],
                "warmup_steady": warm["steady"],
                "latency_loop_s": results["latency"]["per_shape"][0].get("loop_s"),
            }
        )
        print(f"run {i + 1}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    wall = statistics.median(r["wall_s"] for r in runs)
    phases = statistics.median(r["phases_s"] for r in runs)
    figures = {
        "benchmark": "qualify_quick",
        "command": "edgequal qualify classifier.onnx --golden classifier.golden.npz --plan quick",
        "runs": runs,
        "median_wall_s": round(wall, 3),
        "median_phases_s": round(phases, 3),
        "median_outside_phases_s": round(wall - phases, 3),
        "median_warmup_s": round(statistics.median(r["warmup_s"] for r in runs), 3),
        "steady_runs": sum(r["warmup_steady"] for r in runs),
        "target": f"median wall time < {TARGET_S:g} s on a quiet machine",
        "within_target": wall < TARGET_S,
    }
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
