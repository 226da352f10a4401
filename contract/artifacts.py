"""How an artifact is named on both sides: its sha256 digest, and the names of the files of a
model bundle (the model and its external data)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .errors import BadInput

_DIGEST_RE = re.compile(r"[0-9a-f]{64}")


def validate_digest(digest: object) -> str:
    """Return ``digest`` if it is 64 lowercase hex characters, else raise BadInput."""
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        shown = repr(digest) if not isinstance(digest, str) else repr(digest[:80])
        raise BadInput(
            f"not a sha256 digest: {shown}",
            hint="a digest is 64 lowercase hex characters, without a 'sha256:' prefix",
        )
    return digest


MAX_BUNDLE_FILES = 4096
"""Most files one model bundle (the model plus its external data) may name."""

_BUNDLE_PART = re.compile(r"[^/\\\x00-\x1f\x7f]{1,255}")


def check_bundle_name(name: object) -> str:
    """Return ``name`` if it can name a file inside a bundle directory, else raise BadInput.

    A bundle name is a relative POSIX path of at most 8 parts, each 1 to 255
    characters without control characters or backslash, and none ``.`` or ``..``:
    it can only name a place below the bundle directory. The same rule is applied
    to a host's pushed file names and to the locations a model's external data names.
    """
    if not isinstance(name, str) or not name or len(name) > 1024:
        raise BadInput(f"not a file name for a bundle: {str(name)[:80]!r}")
    parts = name.split("/")
    if name.startswith("/"):
        raise BadInput(f"{name[:120]!r} is an absolute path")
    if len(parts) > 8 or not all(_BUNDLE_PART.fullmatch(p) for p in parts):
        raise BadInput(f"{name[:120]!r} is not a plain relative file name")
    if any(p in (".", "..") for p in parts):
        raise BadInput(f"{name[:120]!r} leaves its directory ('..' or '.')")
    if "_ORT_MEM_ADDR_" in name:  # onnxruntime reads process memory for this location
        raise BadInput(f"{name[:120]!r} is onnxruntime's in-memory location, not a file")
    return name


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
