"""A stand-in for ``edgequal.agent.runs.Runs``, for plumbing tests of the gRPC Qualify path.

The lease, busy, cancel, disconnect and error paths of the server and the host's
gRPC transport are exercised with this in place of real measurements (which
tests/test_end_to_end.py runs for real). It is handed to the agent like the real
one (``build_server(..., runs=...)``) and keeps the real report storage, so only
``execute`` is stood in for: it records the request, emits a phase started/done
pair around a wait that the test releases (or a cancel ends), then stores
``{run_id, nonce, plan, status}`` as the "envelope".
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from edgequal.agent.runs import Runs


class StandInRuns:
    """The ``runs`` of an agent under test, with the methods the server calls."""

    def __init__(self, state_dir: Path):
        self.storage = Runs(state_dir, key=None, store=None)
        self.release = threading.Event()
        self.started = threading.Event()
        self.requests: list = []
        self.raise_error: BaseException | None = None
        self._count = 0

    def new_run_id(self) -> str:
        self._count += 1
        return f"run-{self._count}"

    def read_report(self, run_id: str) -> bytes:
        return self.storage.read_report(run_id)

    def recover_interrupted(self) -> list[str]:
        return []

    def ensure_reserve(self) -> None:
        pass

    def mark_delivered(self, run_id: str) -> None:
        pass

    def execute(self, request, *, on_event, cancel) -> bytes:
        self.requests.append(request)
        if self.raise_error is not None:
            raise self.raise_error
        on_event({"type": "phase", "phase": "load", "state": "started"})
        self.started.set()
        while not (self.release.is_set() or cancel.is_set()):
            time.sleep(0.01)
        on_event({"type": "phase", "phase": "load", "state": "done"})
        status = "incomplete" if cancel.is_set() else "passed"
        body = {
            "run_id": request.run_id,
            "nonce": request.nonce,
            "plan": request.plan.to_json(),
            "status": status,
        }
        envelope = json.dumps(body, sort_keys=True).encode()
        path = self.storage.report_path(request.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(envelope)
        return envelope
