"""A stand-in for ``edgequal.agent.runner``, for plumbing tests of the gRPC Qualify path.

The lease, busy, cancel, disconnect and error paths of the server and the host's
gRPC transport are exercised with this in place of real measurements (which
tests/test_end_to_end.py runs for real). It keeps the real module's request type
and report storage, so only ``execute_run`` is stood in for: it records the
request, emits a phase started/done pair around a wait that the test releases (or
a cancel ends), then stores ``{run_id, nonce, plan, status}`` as the "envelope".
"""

from __future__ import annotations

import json
import threading
import time
import types
from pathlib import Path

from edgequal.agent import runner as real_runner


class StandInRunner(types.ModuleType):
    """Installed as ``sys.modules["edgequal.agent.runner"]`` by the tests' ``runner`` fixture."""

    RunRequest = real_runner.RunRequest

    def __init__(self):
        super().__init__("edgequal.agent.runner")
        self.release = threading.Event()
        self.started = threading.Event()
        self.requests: list = []
        self.raise_error: BaseException | None = None
        self._count = 0

    def new_run_id(self) -> str:
        self._count += 1
        return f"run-{self._count}"

    def read_report(self, state_dir, run_id) -> bytes:
        return real_runner.read_report(state_dir, run_id)

    def execute_run(self, *, state_dir, key, store, request, root, on_event, cancel) -> bytes:
        self.requests.append(request)
        if self.raise_error is not None:
            raise self.raise_error
        store.path(request.model_digest)
        if request.golden_digest:
            store.path(request.golden_digest)
        on_event({"type": "phase", "phase": "load", "state": "started"})
        self.started.set()
        while not (self.release.is_set() or cancel.is_set()):
            time.sleep(0.01)
        on_event({"type": "phase", "phase": "load", "state": "done"})
        status = "incomplete" if cancel.is_set() else "passed"
        body = {
            "run_id": request.run_id,
            "nonce": request.nonce,
            "plan": request.plan,
            "status": status,
        }
        envelope = json.dumps(body, sort_keys=True).encode()
        path = real_runner.report_path(Path(state_dir), request.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(envelope)
        return envelope
