"""The host's ledger of nonces it issued and the report each was answered with.

A report whose nonce this host already accepted for a different report is a replay.
One line per nonce: ``NONCE RUN_ID REPORT_SHA256``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import VerificationFailed
from ..paths import config_dir


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
        """Remember that ``nonce`` was answered by this envelope."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(f"{nonce} {run_id} {hashlib.sha256(envelope).hexdigest()}\n")

    def check(self, nonce: str, run_id: str, envelope: bytes) -> bool:
        """Raise on a replay; return whether this host issued the nonce at all."""
        known = self._entries().get(nonce)
        if known is None:
            return False
        if known != (run_id, hashlib.sha256(envelope).hexdigest()):
            raise VerificationFailed(
                f"replayed nonce: {nonce} was already answered by run {known[0]}, not by this report"
            )
        return True
