#!/usr/bin/env python3
"""Benchmark: host CLI start-up time and the agent's idle memory.

- ``edgequal --help``: wall time of the console script run as a subprocess, the
  median of ``--runs`` runs (target < 0.3 s), next to ``python -c pass`` on the same
  interpreter (the floor no CLI can beat). Then one ``python -X importtime`` run of
  the same command, summarised: the top-level imports by cumulative time and the
  third-party packages it loads.
- agent idle RSS: ``edgequal-agent --state-dir TMP serve --listen 127.0.0.1:0
  --port-file F``; once the port file appears and ``--settle`` seconds have passed,
  its RSS and USS (psutil) and whether a runtime library is mapped (target RSS <
  60 MB). Then it is stopped.

Prints one JSON object.

    python scripts/bench/startup.py [--runs 10] [--settle 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HELP_TARGET_S = 0.3
RSS_TARGET_MB = 60.0
# Shared libraries whose presence in the idle agent would mean a runtime was imported eagerly.
HEAVY_LIBRARIES = ("onnxruntime", "ai_edge_litert", "tflite_runtime", "_pywrap_tensorflow")


def console_script(name: str) -> str:
    """The console script next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name} not found: pip install -e . first")
    return found


def median_wall_s(argv: list[str], runs: int) -> tuple[float, list[float]]:
    """Median wall time of ``runs`` runs of ``argv`` (output discarded), and every time."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), [round(t, 4) for t in times]


def parse_importtime(text: str) -> list[tuple[int, int, int, str]]:
    """``-X importtime`` lines as (depth, self_us, cumulative_us, module); depth 0 is imported by the script."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        head, cumulative_us, name = line.split("|", 2)
        self_us = head.split(":", 1)[1]
        name = name[1:]  # one space after the bar, then two per nesting level
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append((depth, int(self_us), int(cumulative_us), name.strip()))
    return rows


def summarize_imports(rows: list[tuple[int, int, int, str]], top: int) -> dict:
    """Top-level imports by cumulative time, the slowest modules by self time, the third-party packages loaded."""
    top_level = sorted((r for r in rows if r[0] == 0), key=lambda r: -r[2])
    stdlib = set(sys.stdlib_module_names)
    packages: dict[str, int] = {}
    for _, self_us, _, name in rows:
        root = name.split(".")[0]
        if root not in stdlib and not root.startswith("_"):
            packages[root] = packages.get(root, 0) + self_us
    return {
        "modules_imported": len(rows),
        "total_ms": round(sum(r[1] for r in rows) / 1e3, 1),
        "top_level_by_cumulative_ms": [
            [name, round(cum / 1e3, 1)] for _, _, cum, name in top_level[:top]
        ],
        "top_by_self_ms": [
            [name, round(own / 1e3, 1)]
            for _, own, _, name in sorted(rows, key=lambda r: -r[1])[:top]
        ],
        "third_party_self_ms": {
            k: round(v / 1e3, 1) for k, v in sorted(packages.items(), key=lambda kv: -kv[1])
        },
    }


def agent_idle(settle_s: float) -> dict:
    """Start a loopback agent, wait for it to serve and settle, read its memory, stop it."""
    agent = console_script("edgequal-agent")
    with tempfile.TemporaryDirectory(prefix="edgequal-startup-") as tmp:
        port_file = Path(tmp) / "port"
        argv = [
            agent,
            "--state-dir",
            str(Path(tmp) / "state"),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            str(port_file),
        ]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60.0
            while not port_file.exists():
                if proc.poll() is not None:
                    raise SystemExit(
                        f"agent exited with {proc.returncode}: {proc.stderr.read().decode()[-500:]}"
                    )
                if time.monotonic() > deadline:
                    raise SystemExit("agent wrote no port file within 60 s")
                time.sleep(0.02)
            serving_s = time.perf_counter() - t0
            time.sleep(settle_s)
            p = psutil.Process(proc.pid)
            full = p.memory_full_info()
            with open(f"/proc/{proc.pid}/maps") as f:
                maps = f.read()
            children = p.children(recursive=True)
            return {
                "time_to_serving_s": round(serving_s, 3),
                "rss_mb": round(full.rss / 2**20, 1),
                "uss_mb": round(full.uss / 2**20, 1),
                "threads": p.num_threads(),
                "children": len(children),
                "runtime_libraries_mapped": sorted({lib for lib in HEAVY_LIBRARIES if lib in maps}),
                "port": int(port_file.read_text().strip()),
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Measure and print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=10, help="subprocess runs to take the median of (default 10)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="seconds to wait after the agent serves (default 2)",
    )
    parser.add_argument("--top", type=int, default=12, help="imports to list (default 12)")
    args = parser.parse_args(argv)

    edgequal = console_script("edgequal")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    subprocess.run(
        [edgequal, "--help"], stdout=subprocess.DEVNULL, check=True
    )  # warm the file cache
    help_s, help_runs = median_wall_s([edgequal, "--help"], args.runs)
    floor_s, floor_runs = median_wall_s([sys.executable, "-c", "pass"], args.runs)
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", edgequal, "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    figures = {
        "benchmark": "startup",
        "python": sys.version.split()[0],
        "help": {
            "command": "edgequal --help",
            "median_s": round(help_s, 4),
            "runs_s": help_runs,
            "python_floor_median_s": round(floor_s, 4),
            "python_floor_runs_s": floor_runs,
            "target_s": HELP_TARGET_S,
            "within_target": help_s < HELP_TARGET_S,
        },
        "help_imports": summarize_imports(parse_importtime(importtime.stderr), args.top),
        "agent_idle": agent_idle(args.settle),
    }
    figures["agent_idle"]["target_rss_mb"] = RSS_TARGET_MB
    figures["agent_idle"]["within_target"] = figures["agent_idle"]["rss_mb"] < RSS_TARGET_MB
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
