"""``edgequal.verify``, ``edgequal.gate``, ``edgequal.attest`` and ``edgequal.export``:
reading signed reports, judging them, signing the decision, and exporting the figures.

A report is a path to its envelope, the envelope's bytes, or a :class:`Report`. Nothing
here prints; errors are :class:`edgequal.Error` subclasses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from edgequal.host.errors import UsageError
from edgequal.host.judge.gate import GateResult

from .device import host_errors
from .report import Report

ReportLike = str | os.PathLike | bytes | Report


def _envelope(report: ReportLike) -> tuple[bytes, Path | None]:
    """The envelope's bytes and the file they came from (None for bytes)."""
    from edgequal.host.judge.report_file import read_report_bytes

    if isinstance(report, Report):
        return report.envelope, report.path
    if isinstance(report, bytes | bytearray):
        return bytes(report), None
    return read_report_bytes(report), Path(report)


def verify(
    report: ReportLike,
    *,
    device: str | None = None,
    artifacts: Iterable[str | os.PathLike] = (),
    known=None,
) -> Report:
    """Verify a report against the pinned key (of ``device`` when named, else the key
    its keyid names), that each of ``artifacts`` is one of its subjects, and that its
    nonce was not answered by another report this host saw (replay); the verified
    :class:`Report`, whose ``issued_here`` says whether this host issued its nonce.
    Raises VerificationFailed (UntrustedDevice for an unknown or changed key)."""
    from edgequal.host.devices.nonces import NonceLedger
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.devices.verify import verify_envelope

    envelope, path = _envelope(report)
    with host_errors():
        verified = verify_envelope(
            envelope,
            known=known if known is not None else KnownDevices(),
            device=device,
            artifacts=[Path(a) for a in artifacts],
        )
    issued = NonceLedger().check(verified.nonce, verified.run_id, envelope)
    return Report(verified, envelope, path, issued_here=issued)


def _policy(policy):
    from edgequal.host.judge.policy import Policy, load_policy

    return policy if isinstance(policy, Policy) else load_policy(policy)


def gate(
    report: ReportLike,
    *,
    policy,
    baseline: ReportLike | None = None,
    device: str | None = None,
    known=None,
    prior=None,
) -> GateResult:
    """Verify ``report``, then judge it on ``policy`` (a path or a parsed ``Policy``) and,
    when given, against ``baseline`` (``prior``: the board's run-to-run spread, a
    ``verdict.Spread``, e.g. from its history's noise score). The :class:`GateResult` is true when it passed; its
    ``checks`` are :class:`edgequal.Check` objects, ``failed_checks`` those that failed. A
    report that does not verify gives a failed result with no figure read from it."""
    from edgequal.host.judge.gate import run_gate

    policy = _policy(policy)
    envelope, path = _envelope(report)
    base, base_path = _envelope(baseline) if baseline is not None else (None, None)
    with host_errors():
        return run_gate(
            envelope,
            policy,
            name=str(path) if path is not None else "report",
            known=known,
            device=device,
            baseline=base,
            baseline_name=str(base_path) if base_path is not None else "baseline",
            prior=prior,
        )


def attest(
    result: GateResult,
    *,
    policy,
    report: ReportLike | None = None,
    out: str | os.PathLike | None = None,
    key=None,
) -> bytes:
    """The gate decision as a signed in-toto Test Result attestation (DSSE envelope bytes,
    host/judge/attestation.py), written atomically to ``out`` when given. Its subjects are
    the verified device report ``result`` judged (by digest) and that report's model;
    ``report`` is the report judged when ``result.report`` names no file (a report given to
    :func:`gate` as bytes); ``key`` defaults to this host's key, created on first use."""
    from edgequal.contract.files import write_atomic
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.devices.verify import verify_envelope
    from edgequal.host.judge.attestation import sign_gate_decision

    if not result.verified:
        raise UsageError(
            f"no gate decision is signed for {result.report}: the report did not verify"
        )
    envelope, path = _envelope(report if report is not None else result.report)
    with host_errors():
        verified = verify_envelope(envelope, known=KnownDevices(), device=result.device)
    if verified.run_id != result.run_id:
        raise UsageError(f"the report given is run {verified.run_id}, the result's {result.run_id}")
    name = path.name if path is not None else f"{verified.run_id}.report.json"
    signed = sign_gate_decision(
        result, _policy(policy), envelope, verified.subjects[0], name, key=key
    )
    if out is not None:
        write_atomic(Path(out), signed)
    return signed


def export(reports: Iterable[ReportLike], format: str, *, device: str | None = None, known=None):
    """The verified reports for dashboards and release pipelines: ``github-benchmark`` (a
    list of ``customSmallerIsBetter`` entries), ``prometheus`` (OpenMetrics text), see
    host/present/exports.py, or ``cyclonedx`` (a CycloneDX 1.6 ML-BOM as a JSON object,
    host/present/bom.py). A report that does not verify raises VerificationFailed."""
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.judge.report_file import ReportFile
    from edgequal.host.present.exports import EXPORTS, FORMATS

    if format not in FORMATS:
        raise UsageError(
            f"unknown export format '{format}'", hint=f"use one of: {', '.join(FORMATS)}"
        )
    known = known if known is not None else KnownDevices()
    files = []
    for r in reports:
        v = r if isinstance(r, Report) else verify(r, device=device, known=known)
        files.append(
            ReportFile(
                v.path or Path("report.json"),
                v.predicate,
                v.subjects,
                True,
                f"verified: signed by device '{v.device}' ({v.key_fingerprint})",
                v.device,
                v.key_fingerprint,
            )
        )
    return EXPORTS[format].render(files)
