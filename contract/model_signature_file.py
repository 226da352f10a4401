"""The model signature file as both sides check it before anything verifies it: its size
bound, and whether it is an OMS signature at all (UTF-8 JSON, a Sigstore bundle). The host
refuses such a file before it is sent (exit 2); the agent's verifier
(``agent/model_signature.py``) says the same in a signed ``failed`` report."""

from __future__ import annotations

import json
from pathlib import Path

MAX_SIGNATURE_BYTES = 4 * 2**20
"""Largest signature file read: an OMS bundle is a few KiB (a certificate chain and a
Rekor entry at most tens), so 4 MiB is plenty, and a larger file is refused before it is
read rather than read whole (a 300 MiB one took 6 s)."""


def signature_problem(signature: Path) -> str | None:
    """Why ``signature`` is not an OMS signature to verify, in the user's words, or None:
    larger than :data:`MAX_SIGNATURE_BYTES` (not read), not UTF-8, not JSON, or not a
    Sigstore bundle (``verificationMaterial`` and ``dsseEnvelope``)."""
    try:
        signature = Path(signature)
        size = signature.stat().st_size
        if size > MAX_SIGNATURE_BYTES:
            return (
                f"{size / 2**20:.0f} MiB, more than the {MAX_SIGNATURE_BYTES // 2**20} MiB a "
                "model signature may hold (an OMS bundle is a few KiB): not a model signature"
            )
        data = signature.read_bytes()
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return (
            f"not UTF-8 JSON (byte {e.start} is 0x{data[e.start]:02x}): an OMS signature is "
            "the JSON Sigstore bundle the model-signing tool writes"
        )
    try:
        bundle = json.loads(text)
    except (ValueError, RecursionError):
        return (
            "not JSON: an OMS signature is the JSON Sigstore bundle the model-signing tool writes"
        )
    missing = [
        k
        for k in ("verificationMaterial", "dsseEnvelope")
        if not isinstance(bundle, dict) or not isinstance(bundle.get(k), dict)
    ]
    if missing:
        return (
            f"JSON, but not an OMS signature (a Sigstore bundle): it has no {' or '.join(missing)}"
        )
    return None
