"""The model signature's line, the same on the terminal, the page and the gate:
"model signature: verified by KEY (manifest sha256:…)", "unsigned", or why it failed."""

from __future__ import annotations


def signature_text(results: dict) -> str | None:
    """One line for ``results.model_signature``; None for a report from before it."""
    sig = (results or {}).get("model_signature")
    if not isinstance(sig, dict):
        return None
    status = sig.get("status")
    if status == "verified":
        manifest = sig.get("manifest_sha256")
        where = f" (OMS manifest sha256:{manifest[:16]}…)" if manifest else ""
        return f"model signature: verified by {sig.get('key')}{where}"
    if status == "unsigned":
        return "model signature: unsigned"
    return f"model signature: {status}: {sig.get('reason')}"
