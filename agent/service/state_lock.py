"""One agent per state directory: a lock file held for the agent's whole life.

``serve`` and ``run-plan`` take ``<state>/agent.lock`` (an exclusive ``flock``)
before they touch runs, so a second agent on the same state directory cannot sign
the first one's live run ``incomplete`` or measure beside it. The lock file
holds JSON naming its holder (pid, command, and for ``serve`` its listen address
and port) and the lease of the run in progress, which ``info`` reads to say who
is busy and a second local host can use to reach the agent already running; the kernel drops the lock when
the process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from edgequal.contract.errors import DeviceBusy
from edgequal.contract.lease import Lease

LOCK_FILE_NAME = "agent.lock"


def _read_holder(fd: int) -> dict:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "{}")
        if isinstance(data, dict):
            return data
    return {}


class StateLock:
    """The held lock on one state directory; :meth:`release` (or process exit) frees it."""

    def __init__(self, state_dir: Path, fd: int, command: str):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_FILE_NAME
        self._fd: int | None = fd
        self._command = command
        self._endpoint: dict = {}
        self._lease: Lease | None = None
        self._write()

    @classmethod
    def acquire(cls, state_dir: Path, command: str) -> StateLock:
        """Take the lock or raise DeviceBusy naming the agent that holds it (exit code 3)."""
        state_dir = Path(state_dir)
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_CLOEXEC: worker children must not inherit (and outlive us holding) the lock.
        fd = os.open(state_dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DeviceBusy(
                f"another agent ({describe_holder(holder)}) is using the state directory "
                f"{state_dir}",
                hint="stop it or let its run end, or give this agent its own --state-dir",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(state_dir, fd, command)

    def set_lease(self, lease: Lease | None) -> None:
        """Record the run in progress (or none) for ``info`` in other processes to read."""
        self._lease = lease
        self._write()

    def set_endpoint(self, listen: str, port: int, **how) -> None:
        """Record where ``serve`` listens, so a second local host (and ``run-plan``) can reach
        this agent; ``how`` adds how to talk to it (``token_file``, ``tls``), never a secret."""
        self._endpoint = {"listen": listen, "port": int(port), **how}
        self._write()

    def _write(self) -> None:
        if self._fd is None:
            return
        body = {
            "pid": os.getpid(),
            "command": self._command,
            **self._endpoint,
            "lease": self._lease.to_json() if self._lease is not None else None,
        }
        data = json.dumps(body).encode()
        with contextlib.suppress(OSError):  # only informative: a full disk must not stop a run
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Free the lock (idempotent)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None


def describe_holder(holder: dict) -> str:
    """``pid 123, edgequal-agent serve`` from the lock file's JSON (what is known of it)."""
    parts = []
    if holder.get("pid"):
        parts.append(f"pid {holder['pid']}")
    if holder.get("command"):
        parts.append(f"edgequal-agent {holder['command']}")
    return ", ".join(parts) or "pid unknown"


def peek(state_dir: Path) -> dict | None:
    """The holder's JSON when another process holds the lock, else None (the lock is free)."""
    try:
        fd = os.open(Path(state_dir) / LOCK_FILE_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
