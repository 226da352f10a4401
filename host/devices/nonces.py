"""The host's ledger of nonces it issued and the report each was answered with.

A report whose nonce this host already accepted for a different report is a replay.
"Different" is judged on what was signed: the run id and the sha256 of the DSSE
payload (the signed statement), never the envelope's bytes, so the same report
re-encoded (another keyid hint, an added signature, URL-safe base64) is still the
report this host accepted. One line per nonce: ``NONCE RUN_ID payload:SHA256``; lines
an older host wrote (``NONCE RUN_ID ENVELOPE_SHA256``) are still honoured, on the
envelope's bytes as then.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import VerificationFailed
from ..paths import config_dir
from .verify import payload_sha256

_PAYLOAD = "payload:"


class NonceLedger:
    """Nonces accepted by this host, in ``<config>/nonces``."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else config_dir() / "nonces"

    def _entries(self) -> dict[str, tuple[str, str]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return {}
        entries = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 3:
                entries[parts[0]] = (parts[1], parts[2])
        return entries

    def record(self, nonce: str, run_id: str, envelope: bytes) -> None:
        """Remember that ``nonce`` was answered by this (verified) envelope's statement."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(f"{nonce} {run_id} {_PAYLOAD}{payload_sha256(envelope)}\n")

    def check(self, nonce: str, run_id: str, envelope: bytes) -> bool:
        """Raise on a replay; return whether this host issued the nonce at all."""
        known = self._entries().get(nonce)
        if known is None:
            return False
        known_run, digest = known
        if digest.startswith(_PAYLOAD):
            same = digest.removeprefix(_PAYLOAD) == payload_sha256(envelope)
        else:  # written by an older host: the envelope's bytes
            same = digest == hashlib.sha256(envelope).hexdigest()
        if known_run != run_id or not same:
            raise VerificationFailed(
                f"replayed nonce: {nonce} was already answered by run {known_run}, not by this report"
            )
        return True
