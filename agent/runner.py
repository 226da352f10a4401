"""A qualification run on the device, from request to signed, stored report.

``execute_run`` records the run as in progress, measures (``qualification``),
signs the report with the device key and writes it under ``reports/`` before it
returns, so a host that went away can fetch it later by run id. An agent that
restarts finds runs still marked in progress and signs them ``incomplete``.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import AgentError, BadInput
from .keys import DeviceKey
from .report.signing import build_statement, json_clean, sign_envelope

_RUN_ID_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyzTZ-")


@dataclass
class RunRequest:
    """What the host asked for: artifacts by digest, the plan, and its fresh nonce."""

    run_id: str
    model_digest: str
    golden_digest: str | None
    plan: dict
    nonce: str
    model_name: str = "model"
    golden_name: str | None = None


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 8 random hex characters."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def _check_run_id(run_id: str) -> None:
    if not run_id or len(run_id) > 64 or not set(run_id) <= _RUN_ID_CHARS:
        raise BadInput(f"malformed run id '{run_id[:70]}'")


def report_path(state_dir: Path, run_id: str) -> Path:
    """Where a run's signed envelope is kept."""
    _check_run_id(run_id)
    return Path(state_dir) / "reports" / f"{run_id}.dsse.json"


def read_report(state_dir: Path, run_id: str) -> bytes:
    """The stored envelope of a run; BadInput when there is none."""
    path = report_path(state_dir, run_id)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        running = Path(state_dir) / "runs" / run_id / "request.json"
        if running.exists():
            raise BadInput(f"run {run_id} is still in progress; its report is not ready") from None
        raise BadInput(f"no report for run {run_id} on this device") from None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def sign_report(key: DeviceKey, request: RunRequest, outcome: dict) -> bytes:
    """Build the in-toto statement for a run and sign it into DSSE envelope bytes."""
    subjects = [{"name": request.model_name, "sha256": request.model_digest}]
    if request.golden_digest:
        subjects.append(
            {"name": request.golden_name or "golden.npz", "sha256": request.golden_digest}
        )
    predicate = json_clean(
        {
            "run_id": request.run_id,
            "nonce": request.nonce,
            "status": outcome["status"],
            "reason": outcome.get("reason"),
            "plan": outcome.get("plan", request.plan),
            "fingerprint": outcome.get("fingerprint", {}),
            "results": outcome.get("results", {}),
            "findings": outcome.get("findings", []),
            "device_key": key.fingerprint(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    return sign_envelope(key, build_statement(subjects, predicate))


def execute_run(
    *,
    state_dir: Path,
    key: DeviceKey,
    store,
    request: RunRequest,
    root: Path = Path("/"),
    on_event: Callable[[dict], None] | None = None,
    cancel: threading.Event | None = None,
) -> bytes:
    """Measure, sign and store one run; returns the envelope bytes.

    Trouble with the model or runtime yields a signed ``failed`` report; only a request
    that cannot start (unknown digest, bad plan) raises.
    """
    from .qualification import run_measurement

    _check_run_id(request.run_id)
    model_path = store.path(request.model_digest)
    golden_path = store.path(request.golden_digest) if request.golden_digest else None
    run_dir = Path(state_dir) / "runs" / request.run_id
    _write_atomic(run_dir / "request.json", json.dumps(asdict(request)).encode())
    try:
        outcome = run_measurement(
            model_path,
            golden_path,
            request.plan,
            root=root,
            on_event=on_event,
            cancel=cancel,
            model_name=request.model_name,
        )
    except AgentError as e:
        if isinstance(e, BadInput):
            _forget_run(run_dir)
            raise
        outcome = {
            "status": "failed",
            "reason": str(e),
            "findings": [{"kind": "agent_error", "message": str(e)}],
        }
    except Exception as e:  # the report must still be signed; the agent keeps serving
        outcome = {
            "status": "failed",
            "reason": f"internal error: {type(e).__name__}: {e}",
            "findings": [{"kind": "internal_error", "message": f"{type(e).__name__}: {e}"}],
        }
    envelope = sign_report(key, request, outcome)
    _write_atomic(report_path(state_dir, request.run_id), envelope)
    _forget_run(run_dir)
    return envelope


def _forget_run(run_dir: Path) -> None:
    for p in run_dir.glob("*"):
        p.unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass


def recover_interrupted_runs(state_dir: Path, key: DeviceKey) -> list[str]:
    """Sign an ``incomplete`` report for every run the agent was in the middle of when it stopped."""
    recovered = []
    for request_file in sorted((Path(state_dir) / "runs").glob("*/request.json")):
        try:
            request = RunRequest(**json.loads(request_file.read_text()))
        except (ValueError, TypeError):
            continue
        if not report_path(state_dir, request.run_id).exists():
            outcome = {
                "status": "incomplete",
                "reason": "the agent stopped during the run",
                "findings": [
                    {"kind": "interrupted", "message": "the agent stopped during the run"}
                ],
            }
            _write_atomic(
                report_path(state_dir, request.run_id), sign_report(key, request, outcome)
            )
            recovered.append(request.run_id)
        _forget_run(request_file.parent)
    return recovered
