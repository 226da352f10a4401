"""A report file read from disk and verified, for the commands that judge or show reports.

``gate`` refuses what does not verify; ``compare`` and ``report html`` show an
unverified report only under a banner that says so, decoded from its payload without
trusting it (the signature status travels with the figures).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..devices.trust import KnownDevices
from ..devices.verify import verify_envelope
from ..errors import UsageError, VerificationFailed


@dataclass(frozen=True)
class ReportFile:
    """One report: its predicate and subjects, and whether (and by whom) it verified."""

    path: Path
    predicate: dict
    subjects: list[dict] = field(default_factory=list)
    verified: bool = False
    signature: str = ""
    device_name: str | None = None
    key_fingerprint: str | None = None

    @property
    def label(self) -> str:
        """A short name for tables and plot legends: model file and run id."""
        model = self.model_name or self.path.name
        run = self.predicate.get("run_id") or "?"
        return f"{model} · {run}"

    @property
    def model_name(self) -> str | None:
        """The model subject's name (the first subject)."""
        return self.subjects[0]["name"] if self.subjects else None


def read_report_bytes(path: str | Path) -> bytes:
    """The envelope's bytes; UsageError (exit 2) when the file cannot be read."""
    path = Path(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read report {path}: {e.strerror}") from e


def _unverified_statement(envelope: bytes) -> dict | None:
    """The statement of an envelope whose signature did not verify, or None when undecodable."""
    try:
        payload = json.loads(envelope)["payload"]
        statement = json.loads(base64.b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    if not isinstance(statement, dict) or not isinstance(statement.get("predicate"), dict):
        return None
    return statement


def _role(subject: dict) -> str | None:
    """An unverified subject's ``annotations.role``, when it is a string."""
    annotations = subject.get("annotations")
    role = annotations.get("role") if isinstance(annotations, dict) else None
    return role if isinstance(role, str) else None


def decoded_report(envelope: bytes, path: str | Path, signature: str) -> ReportFile | None:
    """A report decoded from its payload without checking its signature (None when it cannot
    be decoded): for a report shown under a banner, or one verified when it was recorded
    (the history's rows, read on a host that may not pin the board's key)."""
    statement = _unverified_statement(envelope)
    if statement is None:
        return None
    subjects = [
        {
            "name": str(s.get("name")),
            "sha256": str((s.get("digest") or {}).get("sha256")),
            "role": _role(s),
        }
        for s in statement.get("subject") or []
        if isinstance(s, dict)
    ]
    return ReportFile(Path(path), statement["predicate"], subjects, False, signature)


def load_report(
    path: str | Path, *, known: KnownDevices, device: str | None = None, require: bool = False
) -> ReportFile:
    """Read and verify a report. ``require``: raise VerificationFailed instead of marking it.

    An unverified report that cannot even be decoded raises VerificationFailed either way.
    """
    path = Path(path)
    return report_of(read_report_bytes(path), path, known=known, device=device, require=require)


def report_of(
    envelope: bytes,
    path: str | Path,
    *,
    known: KnownDevices,
    device: str | None = None,
    require: bool = False,
) -> ReportFile:
    """Verify a report's envelope bytes; ``path`` is the file they came from, or a name for
    them. As :func:`load_report`, without reading a file."""
    path = Path(path)
    try:
        report = verify_envelope(envelope, known=known, device=device)
    except VerificationFailed as e:
        if require:
            raise
        unverified = decoded_report(envelope, path, f"NOT VERIFIED: {e}")
        if unverified is None:
            raise
        return unverified
    return ReportFile(
        path,
        report.predicate,
        report.subjects,
        True,
        f"verified: signed by device '{report.device_name}' ({report.fingerprint})",
        report.device_name,
        report.fingerprint,
    )
