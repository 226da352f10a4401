"""Runs on a device from the host's side: the ones this host started, cancelling, fetching.

A run outlives the host that started it: the device keeps its signed report,
fetched by run id. This host remembers the runs it started (device, run id,
nonce, model) in ``<state dir>/runs.jsonl`` as soon as the device accepts each,
so ``edgequal runs list|show|fetch|cancel`` can find them again after a
Ctrl-C, a crash or a lost connection, and a fetched report is checked against
the nonce this host issued for it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import HostError, TransportError
from ..paths import reports_dir, state_dir
from ..transport import Transport

REPORT_WAIT_S = 120.0
"""How long the host waits for a cancelled run's signed report before leaving it to fetch later."""
_POLL_S = 0.25
_STILL_RUNNING = "still in progress"
"""What the agent says (over gRPC and SSH) when a run's report is not written yet."""


class Interrupted(HostError):
    """The user interrupted the host (Ctrl-C); the device keeps the run and its report."""

    exit_code = 130


@dataclass(frozen=True)
class StartedRun:
    """A run this host started: where, when, with which nonce and model."""

    device: str
    address: str
    run_id: str
    nonce: str
    model: str
    started_unix: float

    def to_json(self) -> dict:
        """One line of the ledger."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> StartedRun:
        """The inverse of :meth:`to_json`; KeyError or TypeError for a line that is not one."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


class RunLedger:
    """Runs this host started, one JSON object a line, appended as each is accepted."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else state_dir() / "runs.jsonl"

    def record(self, run: StartedRun) -> None:
        """Append ``run`` (best effort: a full disk must not stop a qualification)."""
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(run.to_json()) + "\n")

    def runs(self, device: str | None = None) -> list[StartedRun]:
        """The runs recorded (for ``device`` only, when given), oldest first; bad lines skipped."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return []
        found = []
        for line in lines:
            try:
                run = StartedRun.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
            if device is None or run.device == device:
                found.append(run)
        return found

    def get(self, run_id: str) -> StartedRun | None:
        """The run with this id, if this host started it."""
        return next((r for r in reversed(self.runs()) if r.run_id == run_id), None)


def wait_for_report(transport: Transport, run_id: str, timeout_s: float = REPORT_WAIT_S) -> bytes:
    """The signed envelope of ``run_id``, waiting while the device still runs it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return transport.get_report(run_id)
        except HostError as e:
            if _STILL_RUNNING not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(_POLL_S)


def cancel_and_fetch(
    transport: Transport,
    run_id: str,
    device: str,
    on_notice: Callable[[str], None],
    timeout_s: float = REPORT_WAIT_S,
) -> bytes:
    """After the first Ctrl-C: cancel ``run_id`` and wait for its signed report.

    A second Ctrl-C stops waiting: the device goes on winding the run down and
    keeps its report, and :class:`Interrupted` says how to fetch it.
    """
    fetch = f"edgequal runs fetch {run_id} --device {device}"
    on_notice(f"interrupted: cancelling run {run_id} on {device} (Ctrl-C again: stop waiting)")
    try:
        with contextlib.suppress(HostError):  # over SSH the closed channel already cancelled it
            transport.cancel(run_id)
        return wait_for_report(transport, run_id, timeout_s)
    except KeyboardInterrupt:
        raise Interrupted(
            f"run {run_id} was left to the device, which keeps its signed report",
            hint=f"fetch it with `{fetch}`",
        ) from None
    except TransportError as e:
        raise Interrupted(
            f"run {run_id} was cancelled, but its report could not be fetched: {e}",
            hint=f"fetch it later with `{fetch}`",
        ) from None


def report_path_for(run_id: str) -> Path:
    """Where ``runs fetch`` writes a report given no ``-o``: the host's reports dir."""
    return reports_dir() / f"{run_id}.report.json"


def write_report(path: Path, envelope: bytes, *, fresh: bool = False) -> Path:
    """Write the envelope bytes unchanged (atomically) and return the path written.

    ``fresh``: ``path`` is a default name (``MODEL-TIME.report.json``), never one the user
    chose: an existing report there is kept and this one takes the first free name of
    ``NAME-2.report.json``, ``NAME-3…``. Two runs of one model within a second (two
    boards at once, or a quick run that fails in preflight) each keep their report. The
    name is claimed with a hard link, which fails where the name exists, so concurrent
    hosts never take the same one and no reader sees a half-written file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Private to this thread (a fleet run qualifies several boards at once).
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(envelope)
    if not fresh:
        tmp.replace(path)
        return path
    stem = path.name.removesuffix(".report.json")
    try:
        for k in itertools.count(1):
            candidate = path if k == 1 else path.with_name(f"{stem}-{k}.report.json")
            try:
                os.link(tmp, candidate)
            except FileExistsError:
                continue
            return candidate
    finally:
        tmp.unlink()
