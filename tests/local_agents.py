"""Real ``edgequal-agent serve`` processes on 127.0.0.1, each with its own state directory.

Loaded with ``load_test_helper("local_agents")`` by the lease and fleet tests.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_RUN_LINE = re.compile(r"^(\S+ \S+) INFO edgequal\.agent\.server: run (\S+) (started|ended)")


@dataclass
class LocalAgent:
    """One started agent: its process, address, state directory."""

    proc: subprocess.Popen
    address: str
    state_dir: Path

    def stop(self) -> None:
        """Terminate it (kill when it does not stop) and wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    log_path: Path | None = None

    def run_records(self) -> list[Path]:
        """The signed reports the agent stored (one per qualification it ran)."""
        reports = self.state_dir / "reports"
        return sorted(reports.glob("*.dsse.json")) if reports.exists() else []

    def run_intervals(self) -> list[tuple[datetime.datetime, datetime.datetime]]:
        """(start, end) of every run, from the agent's own log ("run R started" / "ended")."""
        starts, ends = {}, {}
        for line in self.log_path.read_text().splitlines():
            m = _RUN_LINE.match(line)
            if m:
                when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                (starts if m.group(3) == "started" else ends)[m.group(2)] = when
        return sorted((starts[r], ends[r]) for r in starts if r in ends)


def start_agent(base: Path, name: str) -> LocalAgent:
    """Start ``edgequal-agent serve --listen 127.0.0.1:0`` with state under ``base/name``."""
    state = base / name / "state"
    port_file = base / name / "port"
    port_file.parent.mkdir(parents=True, exist_ok=True)
    log = open(base / name / "agent.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgequal.agent.cli",
            "--state-dir",
            str(state),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None:
            raise RuntimeError((base / name / "agent.log").read_text())
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"agent {name} did not start in 60 s")
        time.sleep(0.05)
    return LocalAgent(
        proc, f"grpc://127.0.0.1:{port_file.read_text().strip()}", state, base / name / "agent.log"
    )
