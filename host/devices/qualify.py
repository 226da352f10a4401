"""One qualification from the host's side: push, run, verify, save.

The host makes a fresh nonce (which carries its clock, see agent/clock.py), pushes the model and golden set by digest (skipped
when the agent holds them), streams progress, and verifies the signed envelope
against the device's pinned key before it reads a single result from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.errors import ModelRejected
from edgequal.contract.nonce import new_nonce
from edgequal.contract.onnx_external_data import check_external_data
from edgequal.contract.plan import Plan

from ..errors import UsageError, printable
from ..transport import QualifyRequest, Transport
from .nonces import NonceLedger
from .reproduce import write_sidecar
from .runs import RunLedger, StartedRun, cancel_and_fetch, write_report
from .trust import KnownDevices
from .verify import VerifiedReport, check_answers_request, verify_envelope


@dataclass
class Qualification:
    """The verified report and where its bytes were written."""

    report: VerifiedReport
    envelope: bytes
    path: Path | None
    bytes_sent: int
    notes: list[str] = field(default_factory=list)
    """Things the user should know (e.g. a golden set let through for another model)."""
    interrupted: bool = False
    """Ctrl-C cancelled the run; the report is its signed ``incomplete: cancelled`` one."""
    artifacts: list[dict] = field(default_factory=list)
    """What was pushed, ``{"role", "name", "sha256", "path"}`` each: the sidecar's list
    (``reproduce.write_sidecar``) for a report written under another name later."""


def pin_device_key(transport: Transport, known: KnownDevices, name: str, address: str) -> None:
    """Trust on first use, for the local agent only; a changed key stays a hard failure.

    The agent proves it holds the key (a fresh challenge) before it is pinned or
    compared; UntrustedDevice when it holds another key than the pinned one.
    """
    entry = known.get(name)
    raw = transport.prove_identity(entry.public_key_raw if entry else None)
    if entry is None:
        known.trust(name, address, raw)


def check_runtime_envs(transport: Transport, plan: Plan) -> None:
    """Refuse a plan naming a runtime environment the device does not hold, from its Info,
    before the model is uploaded (UsageError, exit 2, as the agent words it). An agent
    whose Info lists no environments field (older) is left to refuse it itself."""
    from edgequal.contract.runtimes import unknown_env_message

    if not plan.runtime_envs:
        return
    listed = (transport.info().get("fingerprint") or {}).get("runtime_envs")
    if listed is None:
        return
    installed = [e.get("name") for e in listed if isinstance(e, dict)]
    for name in plan.runtime_envs:
        if name != "default" and name not in installed:
            raise UsageError(*unknown_env_message(name, installed))


def external_data_files(model: Path) -> list[dict]:
    """The files an ONNX model keeps its external data in, ``{"name", "sha256"}`` each.

    The same checks the agent applies (contract/onnx_external_data.py), here
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
    fresh_out: bool = False,
    holder: str = "",
    allow_golden_mismatch: bool = False,
    on_notice: Callable[[str], None] = lambda message: None,
    ledger: RunLedger | None = None,
    coload_models: Mapping[str, Path] | None = None,
    model_signature: Path | None = None,
    command: Sequence[str] | None = None,
    sidecar: bool = True,
) -> Qualification:
    """Push, qualify, verify against the pinned key and write the envelope to ``out``
    (with ``fresh_out``, a default name that never replaces a report: ``runs.write_report``).

    ``plan`` is a :class:`Plan` or its JSON, checked here before anything is sent;
    so is the golden set: one made for another model file is a UsageError unless
    ``allow_golden_mismatch`` (see :func:`~edgequal.host.golden.check_golden_for_model`).

    The run is recorded in ``ledger`` (default: this host's :class:`RunLedger`) as
    soon as the device accepts it. Ctrl-C (KeyboardInterrupt) during the run
    cancels it and waits for its signed report, which is verified and written as
    any other (``interrupted`` is set); a second Ctrl-C leaves it to the device
    and raises :class:`~edgequal.host.devices.runs.Interrupted` naming the run.

    ``coload_models`` (``{sha256: path}``) are the plan's co-load models: pushed like
    the model, and checked against the report's subjects. ``model_signature`` is the
    model's OMS signature file: pushed like the model and named in the plan, so the device
    verifies it before loading (agent/model_signature.py).

    Beside the report written to ``out`` goes its sidecar (``devices/reproduce.py``): the
    command line ``command`` (argv without the program; None from the library), where
    each artifact is, and ``edgequal rerun``'s command; not with ``sidecar=False`` (a
    fleet run writes its reports to a temporary name first).
    """
    from ..golden import check_golden_for_model

    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    signature_digest = file_sha256(model_signature) if model_signature else None
    if plan.model_signature_sha256 and plan.model_signature_sha256 != signature_digest:
        raise UsageError(
            f"the plan names model signature sha256:{plan.model_signature_sha256[:16]}…, "
            + ("which was not given" if signature_digest is None else "not the one given"),
            hint="give the signature file the plan was made with (--model-signature)",
        )
    if signature_digest is not None:
        plan = Plan.from_json(
            {
                **plan.to_json(),
                "model_signature_sha256": signature_digest,
                "sources": {**plan.sources, "model_signature_sha256": "flag"},
            }
        )
    model, golden = Path(model), Path(golden) if golden else None
    model_digest = file_sha256(model)
    golden_digest = file_sha256(golden) if golden else None
    notes = []
    if golden:
        note = check_golden_for_model(golden, model_digest, allow_mismatch=allow_golden_mismatch)
        notes += [note] if note else []
    extra = external_data_files(model)
    check_runtime_envs(transport, plan)  # before anything is uploaded
    on_event({"type": "phase", "phase": "upload", "state": "started"})
    sent = transport.push(model, model_digest).bytes_sent
    for f in extra:
        sent += transport.push(model.parent / f["name"], f["sha256"]).bytes_sent
    if golden:
        sent += transport.push(golden, golden_digest).bytes_sent
    coload_models = dict(coload_models or {})
    for digest, path in coload_models.items():
        sent += transport.push(Path(path), digest).bytes_sent
    if signature_digest is not None:
        sent += transport.push(Path(model_signature), signature_digest).bytes_sent
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
        model_name=printable(model.name),
        golden_name=printable(golden.name) if golden else None,
        holder=holder,
        extra_files=extra,
    )
    ledger = ledger or RunLedger()

    def recording(event: dict) -> None:
        if event.get("type") == "run" and event.get("run_id"):
            ledger.record(
                StartedRun(
                    device_name, transport.address, event["run_id"], nonce,
                    printable(model.name), time.time(),
                )
            )  # fmt: skip
        on_event(event)

    interrupted = False
    try:
        envelope = transport.qualify(request, recording)
    except KeyboardInterrupt:
        if not transport.last_run_id:
            raise
        envelope = cancel_and_fetch(transport, transport.last_run_id, device_name, on_notice)
        interrupted = True
    on_event({"type": "phase", "phase": "signing", "state": "done"})
    artifacts = [model, *(model.parent / f["name"] for f in extra)] + ([golden] if golden else [])
    artifacts += [Path(p) for p in coload_models.values()]
    artifacts += [Path(model_signature)] if signature_digest else []
    report = verify_envelope(
        envelope, known=known, device=device_name, expected_nonce=nonce, artifacts=artifacts
    )
    pushed = [{"sha256": model_digest, "role": "model"}]
    pushed += [{"sha256": f["sha256"], "role": "external_data"} for f in extra]
    pushed += [{"sha256": d, "role": "coload"} for d in coload_models]
    pushed += [{"sha256": golden_digest, "role": "golden"}] if golden else []
    pushed += [{"sha256": signature_digest, "role": "model_signature"}] if signature_digest else []
    check_answers_request(report, request.plan, pushed)
    # This host issued the nonce: `verify` says so later, whoever ran it (qualify, fleet).
    NonceLedger().record(report.nonce, report.run_id, envelope)
    if out is not None:
        out = write_report(out, envelope, fresh=fresh_out)
    names = {model_digest: model.name, golden_digest: golden.name if golden else None}
    paths = {model_digest: model, golden_digest: golden}
    paths.update({f["sha256"]: model.parent / f["name"] for f in extra})
    paths.update({d: Path(p) for d, p in coload_models.items()})
    paths.update({signature_digest: model_signature} if signature_digest else {})
    # Where each artifact is on this host, for the sidecar (the same file may serve twice,
    # e.g. a model co-loaded beside itself: one digest, one file).
    where = [
        {
            "role": p["role"],
            "name": printable(names.get(p["sha256"]) or paths[p["sha256"]].name),
            "sha256": p["sha256"],
            "path": paths[p["sha256"]],
        }
        for p in pushed
    ]
    if out is not None and sidecar:
        write_sidecar(out, envelope, device_name, where, command)
    return Qualification(report, envelope, out, sent, notes, interrupted, where)
