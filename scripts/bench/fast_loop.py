#!/usr/bin/env python3
"""Benchmark: the CPU seconds of the fast loop, ``python -m pytest -q -m "not slow"``.

Runs the fast loop once as a child process (``-p no:cacheprovider``, so it neither reads
nor writes .pytest_cache and can run beside other copies) and reports the CPU time of
everything it started: this script is made a child subreaper (Linux), so processes the
tests started and did not reap themselves are re-parented here and reaped, and their CPU
time is counted too; ``resource.getrusage(RUSAGE_CHILDREN)`` then holds the whole tree's
user and system seconds. CPU time, not wall time, is the figure: other people's processes
on the machine stretch the wall time, hardly the CPU time. Target: at most 60 CPU seconds.

With ``$EDGEQUAL_TEST_CPU_LOG`` (tests/conftest.py) set for the run, it also reports what
start-up and collection cost each pytest process (the controller and every xdist worker)
and the tests that cost the most, so a regression can be traced to a test.

Prints one JSON object (the pytest output goes to stderr).

    python scripts/bench/fast_loop.py [--top 25] [--keep-log cpu.jsonl] [-- extra pytest args]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_CPU_S = 60.0
PR_SET_CHILD_SUBREAPER = 36
ROOT = Path(__file__).resolve().parents[2]


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux ``prctl``); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(wait_s: float) -> list[int]:
    """Reap every exited descendant re-parented here; the pids still running after
    ``wait_s`` seconds (processes the tests leaked), which are left alone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid:
            continue
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid():
                alive.append(int(entry.name))
    return alive


def read_log(path: Path, top: int) -> dict:
    """Per-process collection cost and the costliest tests from $EDGEQUAL_TEST_CPU_LOG."""
    collect, tests = [], []
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            (tests if "test" in record else collect).append(record)
    tests.sort(key=lambda r: -r["cpu_s"])
    return {
        "collection_cpu_s": [r["cpu_s"] for r in collect],
        "tests_cpu_s": round(sum(r["cpu_s"] for r in tests), 2),
        "tests": len(tests),
        "top_tests": [[r["test"], r["cpu_s"]] for r in tests[:top]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="costliest tests to list")
    parser.add_argument("--keep-log", type=Path, help="also copy the per-test CPU log here")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args()

    subreaper = become_subreaper()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="edgequal-fast-loop-") as tmp:
        log = Path(tmp) / "cpu.jsonl"
        env = {**os.environ, "EDGEQUAL_TEST_CPU_LOG": str(log)}
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
        argv += args.pytest_args
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=sys.stderr, stderr=sys.stderr)
        wall = time.monotonic() - t0
        leaked = reap_orphans(2.0) if subreaper else []
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        details = read_log(log, args.top)
        if args.keep_log and log.exists():
            args.keep_log.write_bytes(log.read_bytes())
    cpu = usage.ru_utime + usage.ru_stime
    result = {
        "command": " ".join(argv[1:]),
        "returncode": proc.returncode,
        "cpu_s": round(cpu, 2),
        "user_s": round(usage.ru_utime, 2),
        "sys_s": round(usage.ru_stime, 2),
        "target_cpu_s": TARGET_CPU_S,
        "within": cpu <= TARGET_CPU_S,
        "wall_s": round(wall, 2),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "orphans_counted": subreaper,
        "leaked_pids": leaked,
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
        **details,
    }
    print(json.dumps(result, indent=1))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
