"""Broken copies of model files, for tests that a bad file is refused cleanly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

KINDS = ("empty", "truncated", "random")


def corrupt_model_bytes(kind: str, src: str | Path, dst: str | Path) -> Path:
    """Write a broken copy of the model at src to dst; returns dst.

    "empty": zero bytes; "truncated": the first half of src; "random": as many
    bytes as src from a fixed-seed generator (so the file is reproducible).
    """
    data = Path(src).read_bytes()
    if kind == "empty":
        out = b""
    elif kind == "truncated":
        out = data[: len(data) // 2]
    elif kind == "random":
        out = np.random.default_rng(9001).integers(0, 256, size=len(data), dtype=np.uint8).tobytes()
    else:
        raise ValueError(f"unknown corruption {kind!r}: one of {', '.join(KINDS)}")
    dst = Path(dst)
    dst.write_bytes(out)
    return dst
