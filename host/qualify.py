"""One qualification from the host's side: push, run, verify, save.

The host makes a fresh nonce (which carries its clock, see agent/clock.py), pushes the model and golden set by digest (skipped
when the agent holds them), streams progress, and verifies the signed envelope
against the device's pinned key before it reads a single result from it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgequal.agent.clock import new_nonce
from edgequal.agent.errors import ModelRejected
from edgequal.agent.golden import file_sha256
from edgequal.agent.plan import Plan
from edgequal.agent.runtimes.onnx_external_data import check_external_data

from .errors import UntrustedDevice, UsageError
from .transport import QualifyRequest, Transport
from .trust import KnownDevices
from .verify import VerifiedReport, verify_envelope


@dataclass
class QualifyOutcome:
    """The verified report and where its bytes were written."""

    report: VerifiedReport
    envelope: bytes
    path: Path | None
    bytes_sent: int


def pin_device_key(transport: Transport, known: KnownDevices, name: str, address: str) -> None:
    """Trust on first use, for the local agent only; a changed key stays a hard failure."""
    raw = base64.b64decode(transport.info()["public_key_b64"])
    entry = known.get(name)
    if entry is None:
        known.trust(name, address, raw)
    elif entry.public_key_raw != raw:
        raise UntrustedDevice(
            f"the key of device '{name}' changed (pinned {entry.fingerprint})",
            hint=f"if the device was reset on purpose: edgequal devices forget {name}",
        )


def external_data_files(model: Path) -> list[dict]:
    """The files an ONNX model keeps its external data in, ``{"name", "sha256"}`` each.

    The same checks the agent applies (agent/runtimes/onnx_external_data.py), here
    before anything is sent: a location outside the model's directory, through a
    symlink, missing, or too short for its offset and length is a UsageError.
    """
    try:
        refs = check_external_data(model)
    except ModelRejected as e:
        raise UsageError(f"{model}: {e}", hint=e.hint) from None
    except OSError as e:
        raise UsageError(f"cannot read model {model}: {e.strerror or e}") from e
    names = sorted({r.location for r in refs})
    return [{"name": n, "sha256": file_sha256(model.parent / n)} for n in names]


def qualify(
    transport: Transport,
    model: Path,
    golden: Path | None,
    plan: Plan | dict,
    *,
    known: KnownDevices,
    device_name: str,
    on_event: Callable[[dict], None] = lambda e: None,
    out: Path | None = None,
    holder: str = "",
) -> QualifyOutcome:
    """Push, qualify, verify against the pinned key and write the envelope to ``out``.

    ``plan`` is a :class:`Plan` or its JSON, checked here before anything is sent.
    """
    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    model, golden = Path(model), Path(golden) if golden else None
    model_digest = file_sha256(model)
    golden_digest = file_sha256(golden) if golden else None
    extra = external_data_files(model)
    on_event({"type": "phase", "phase": "upload", "state": "started"})
    sent = transport.push(model, model_digest).bytes_sent
    for f in extra:
        sent += transport.push(model.parent / f["name"], f["sha256"]).bytes_sent
    if golden:
        sent += transport.push(golden, golden_digest).bytes_sent
    on_event(
        {
            "type": "progress",
            "phase": "upload",
            "message": f"{sent} bytes sent" if sent else "already on the device",
        }
    )
    on_event({"type": "phase", "phase": "upload", "state": "done"})
    # Fresh random bits plus this host's clock, which the agent checks its own against.
    nonce = new_nonce()
    request = QualifyRequest(
        model_digest=model_digest,
        golden_digest=golden_digest,
        plan=plan.to_json(),
        nonce=nonce,
        model_name=model.name,
        golden_name=golden.name if golden else None,
        holder=holder,
        extra_files=extra,
    )
    envelope = transport.qualify(request, on_event)
    on_event({"type": "phase", "phase": "signing", "state": "done"})
    artifacts = [model, *(model.parent / f["name"] for f in extra)] + ([golden] if golden else [])
    report = verify_envelope(
        envelope, known=known, device=device_name, expected_nonce=nonce, artifacts=artifacts
    )
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(envelope)
    return QualifyOutcome(report, envelope, out, sent)
