"""Real ``edgequal-agent serve`` processes on 127.0.0.1, each with its own state directory.

Loaded with ``load_test_helper("local_agents")`` by the lease and fleet tests.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


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

    def run_records(self) -> list[Path]:
        """The agent's own run directories (one per qualification it ran)."""
        runs = self.state_dir / "runs"
        return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


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
    return LocalAgent(proc, f"grpc://127.0.0.1:{port_file.read_text().strip()}", state)
