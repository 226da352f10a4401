"""The ``local`` device: an agent started on 127.0.0.1 with an ephemeral port.

It keeps a persistent state dir (so its device key, artifacts and reports survive
between runs) and speaks gRPC like any other device, so the report bytes are the
same as from a real board.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import TransportError
from ..paths import local_agent_state_dir
from .grpc import GrpcTransport


class LocalTransport(GrpcTransport):
    """Starts ``edgequal-agent serve`` on loopback and talks to it over gRPC; stops it on close."""

    def __init__(
        self, state_dir: Path | None = None, root: str | None = None, start_timeout_s: float = 30.0
    ):
        self.state_dir = Path(state_dir or local_agent_state_dir())
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        port_file = Path(tempfile.mkdtemp(prefix="edgequal-local-")) / "port"
        cmd = [
            sys.executable,
            "-m",
            "edgequal.agent.cli",
            "--state-dir",
            str(self.state_dir),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            str(port_file),
        ]
        if root:
            cmd += ["--root", root]
        log_path = self.state_dir / "agent.log"
        self._log = open(log_path, "ab")
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        deadline = time.monotonic() + start_timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None:
                raise TransportError(
                    f"the local agent exited with code {self._proc.returncode}",
                    hint=f"see {log_path}",
                )
            if time.monotonic() > deadline:
                self._proc.kill()
                raise TransportError(
                    f"the local agent did not start within {start_timeout_s:g} s",
                    hint=f"see {log_path}",
                )
            time.sleep(0.05)
        port = int(port_file.read_text().strip())
        port_file.unlink()
        port_file.parent.rmdir()
        self.target = f"127.0.0.1:{port}"
        super().__init__(self.target)
        self.address = "local"

    def close(self) -> None:
        """Close the channel and stop the agent."""
        try:
            super().close()
        finally:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._log.close()
