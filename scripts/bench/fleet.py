#!/usr/bin/env python3
"""Benchmark: what the host adds to a fleet run over N local agents, and what it costs per device.

Starts ``--agents`` real agents (``edgequal-agent serve`` on 127.0.0.1, each its own
state directory), trusts them in a throw-away config directory, and runs the trivial
``micro`` example model (y = x + c) on all of them as one fleet run (``FleetRunner``:
a thread per device, leases, report verification, the report pages unless
``--no-pages``, index.json, junit.xml, the matrix page). Before it, one run alone on
one agent (the same runner, one device) for comparison.

Figures:

- ``wall_s``: the fleet run, start to the last output written;
- ``slowest_run_s``: the longest single run inside it, timed by the host from taking
  the lease to the verified report and its page (``RunRecord.duration_s``);
- ``host_overhead_s = wall_s - slowest_run_s`` and its share of ``wall_s``: what the
  fleet machinery adds around the runs (opening devices, Info and key checks,
  thread start, index, JUnit and matrix page). **Target** (issue 12): under 5 %;
- ``host_cpu_s``: this process's user + system CPU during the fleet run (the agents
  are other processes), and per device;
- ``host_peak_rss_mb``: this process's peak resident memory; ``rss_before_mb`` before
  the fleet run, and the growth per device.

The agents share the machine's cores with the host, so on a small machine the runs
themselves are slowed by each other; that moves ``slowest_run_s`` and ``wall_s``
together and leaves the overhead figure meaningful. Prints one JSON object.

    python scripts/bench/fleet.py [--agents 16] [--no-pages]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_PCT = 5.0
PLAN = {
    "cold_runs": 1,
    "latency_min_runs": 20,
    "latency_min_s": 0.2,
    "warmup_min_s": 0.2,
    "sustain_s": 0.0,
}
"""The shortest plan with every phase but the sustained one: the fleet machinery dominates."""


def start_agent(base: Path, name: str) -> tuple[subprocess.Popen, str]:
    """``edgequal-agent serve --listen 127.0.0.1:0`` with state under ``base/name``."""
    port_file = base / name / "port"
    port_file.parent.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgequal.agent.cli", "--state-dir", str(base / name / "state")]
        + ["serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=open(base / name / "agent.log", "wb"),
    )
    return proc, str(port_file)


def wait_for_ports(procs: list[tuple[subprocess.Popen, str]], timeout_s: float = 300) -> list[str]:
    """The agents' addresses, once every one wrote its port."""
    deadline = time.monotonic() + timeout_s
    addresses = []
    for proc, port_file in procs:
        while not Path(port_file).exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agent did not start: {port_file}")
            time.sleep(0.05)
        addresses.append(f"grpc://127.0.0.1:{Path(port_file).read_text().strip()}")
    return addresses


def rss_mb() -> float:
    """This process's peak RSS so far, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """This process's user + system CPU seconds so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=16, help="local agents (default 16)")
    ap.add_argument("--no-pages", action="store_true", help="skip each report's HTML page")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="edgequal-fleet-bench-"))
    os.environ["EDGEQUAL_CONFIG_DIR"] = str(work / "config")  # trust pins, not the user's
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    procs = []
    try:
        from edgequal.host.devices.resolve import trust_device
        from edgequal.host.devices.trust import KnownDevices
        from edgequal.host.examples.catalog import build_example
        from edgequal.host.lab.fleet import FleetOptions, FleetRunner
        from edgequal.host.lab.inventory import FleetModel, load_lab

        t0 = time.perf_counter()
        procs = [start_agent(work / "agents", f"dev-{i}") for i in range(args.agents)]
        addresses = wait_for_ports(procs)
        agents_start_s = time.perf_counter() - t0
        known = KnownDevices()
        lines = ['[lab]\nname = "bench"\n']
        for i, address in enumerate(addresses):
            trust_device(known, f"dev-{i}", address)
            tags = '["all", "alone"]' if i == 0 else '["all"]'
            lines.append(f'[devices.dev-{i}]\naddress = "{address}"\ntags = {tags}\n')
        (work / "lab.toml").write_text("\n".join(lines))
        lab = load_lab(work / "lab.toml")
        models = [FleetModel("micro", build_example("micro", work / "models"))]

        def fleet(tag: str, out: str):
            options = FleetOptions(
                out_dir=work / out,
                tags=frozenset({tag}),
                plan_overrides=PLAN,
                retries=0,
                html_pages=not args.no_pages,
            )
            return FleetRunner(lab, models, options, known=KnownDevices()).run()

        t = time.perf_counter()
        alone = fleet("alone", "alone")
        alone_wall_s = time.perf_counter() - t

        rss_before = rss_mb()
        cpu_before = cpu_s()
        t = time.perf_counter()
        result = fleet("all", "fleet")
        wall_s = time.perf_counter() - t
        host_cpu = cpu_s() - cpu_before
        peak = rss_mb()

        slowest = max(r.duration_s for r in result.runs)
        n = len(result.runs)
        overhead = wall_s - slowest
        out = {
            "agents": args.agents,
            "pages": not args.no_pages,
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "agents_start_s": round(agents_start_s, 2),
            "alone_run_s": round(alone.runs[0].duration_s, 3),
            "alone_wall_s": round(alone_wall_s, 3),
            "states": {
                s: sum(1 for r in result.runs if r.state == s)
                for s in sorted({r.state for r in result.runs})
            },
            "wall_s": round(wall_s, 3),
            "slowest_run_s": round(slowest, 3),
            "median_run_s": round(sorted(r.duration_s for r in result.runs)[n // 2], 3),
            "host_overhead_s": round(overhead, 3),
            "host_overhead_pct": round(100 * overhead / wall_s, 2),
            "target_pct": TARGET_PCT,
            "met": 100 * overhead / wall_s < TARGET_PCT,
            "host_cpu_s": round(host_cpu, 3),
            "host_cpu_s_per_device": round(host_cpu / n, 3),
            "rss_before_mb": round(rss_before, 1),
            "host_peak_rss_mb": round(peak, 1),
            "rss_growth_per_device_mb": round((peak - rss_before) / n, 2),
        }
        print(json.dumps(out, indent=1))
        return 0
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
