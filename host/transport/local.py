"""The ``local`` device: an agent started on 127.0.0.1 with an ephemeral port.

It keeps a persistent state dir (so its device key, artifacts and reports survive
between runs) and speaks gRPC like any other device, so the report bytes are the
same as from a real board.

One agent serves one state directory (``<state>/agent.lock``). When another host
process already runs the local agent, this one connects to that agent (the lock
file names its port) instead of starting a second: the device is one device, and
a run in progress there makes this host's run "device busy", never a second
measurement beside it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgequal.agent.service.state_lock import describe_holder, peek
from edgequal.contract.state_dirs import local_agent_state_dir

from ..errors import TransportError
from .base import OpenOptions
from .grpc import GrpcTransport

AGENT_EXIT_STATE_IN_USE = 3
"""``edgequal-agent serve`` exits 3 when another agent holds the state directory."""


class LocalTransport(GrpcTransport):
    """Starts ``edgequal-agent serve`` on loopback and talks to it over gRPC; stops it on close.

    When an agent already serves the state directory, connects to it instead
    (and leaves it running on close).
    """

    @classmethod
    def open_address(cls, address: str, options: OpenOptions) -> LocalTransport:
        """``local``: the agent this host starts (or finds serving) on 127.0.0.1."""
        return cls(root=options.local_root, pinned_key=options.pinned_key)

    def __init__(
        self,
        state_dir: Path | None = None,
        root: str | None = None,
        start_timeout_s: float = 30.0,
        pinned_key: bytes | None = None,
    ):
        self.state_dir = Path(state_dir or local_agent_state_dir())
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._proc: subprocess.Popen | None = None
        self._log = None
        deadline = time.monotonic() + start_timeout_s
        port = None
        while port is None:
            port = self._running_agent_port(deadline)
            if port is None:
                port = self._start(root, deadline)
        self.target = f"127.0.0.1:{port}"
        super().__init__(self.target, pinned_key=pinned_key)
        self.address = "local"

    @property
    def agent_pid(self) -> int | None:
        """The pid of the agent this transport started (None when it reached a running one)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def started_here(self) -> bool:
        """True when this transport started the agent (and stops it on close)."""
        return self._proc is not None

    def _running_agent_port(self, deadline: float) -> int | None:
        """The port of the agent already serving the state directory; None when there is none."""
        while True:
            holder = peek(self.state_dir)
            if holder is None:
                return None
            if holder.get("port"):
                return int(holder["port"])
            if holder.get("command") not in (None, "serve") or time.monotonic() > deadline:
                # A one-shot run-plan (SSH mode on this machine) holds it: no port to reach.
                raise TransportError(
                    f"device busy: another agent ({describe_holder(holder)}) is using the "
                    f"local state directory {self.state_dir}",
                    hint="wait for its run to end, then try again",
                )
            time.sleep(0.05)  # a serve that has not bound its port yet

    def _start(self, root: str | None, deadline: float) -> int | None:
        """Start an agent; its port, or None when another agent took the state directory first."""
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
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
        try:
            while not (port_file.exists() and port_file.read_text().strip()):
                if proc.poll() is not None:
                    if proc.returncode == AGENT_EXIT_STATE_IN_USE and peek(self.state_dir):
                        log.close()
                        return None  # another host's agent won the race: use it
                    raise TransportError(
                        f"the local agent exited with code {proc.returncode}",
                        hint=f"see {log_path}",
                    )
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    raise TransportError(
                        "the local agent did not start in time", hint=f"see {log_path}"
                    )
                time.sleep(0.05)
            port = int(port_file.read_text().strip())
        except BaseException:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            raise
        finally:
            port_file.unlink(missing_ok=True)
            port_file.parent.rmdir()
        self._proc, self._log = proc, log
        return port

    def close(self) -> None:
        """Close the channel and stop the agent if this transport started it."""
        try:
            super().close()
        finally:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            if self._log is not None:
                self._log.close()
