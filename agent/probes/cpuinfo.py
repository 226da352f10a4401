"""The CPU's model name and the instruction-set flags that decide a runtime's kernels.

``/proc/cpuinfo`` under the probe root, handed to the pure :func:`parse_cpuinfo`. x86
prints a ``flags`` line per processor, arm64 a ``Features`` line. Only the flags that
select onnxruntime's and LiteRT's numeric kernels are kept (:data:`KERNEL_FLAGS`), so
the fingerprint stays short; they decide, for one, whether int8 products are summed
exactly (VNNI, arm64 dot product) or in saturating 16-bit pairs (x86 without VNNI).
"""

from __future__ import annotations

import os
from pathlib import Path

from .sysfs import read_text, under

CPUINFO = "/proc/cpuinfo"

KERNEL_FLAGS = frozenset(
    {
        # x86: the SIMD levels and the int8 / bf16 / fp16 dot products
        "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
        "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
        "avx512_bf16", "avx512_fp16", "amx_int8", "amx_bf16",
        # arm64: NEON, half precision, the int8 dot product and matrix multiply, SVE
        "asimd", "fphp", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2",
    }
)  # fmt: skip


def parse_cpuinfo(text: str | None) -> dict:
    """``{"model_name", "isa", "flags"}`` from ``/proc/cpuinfo`` text.

    ``isa`` is ``"x86"`` (a ``flags`` line), ``"arm"`` (a ``Features`` line) or None;
    ``flags`` the sorted :data:`KERNEL_FLAGS` of the first processor (all cores of the
    boards edgequal knows share one instruction set), None when the text has no such line.
    """
    model = isa = None
    flags: set[str] | None = None
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip() or None
        elif key in ("flags", "Features") and flags is None:
            isa = "x86" if key == "flags" else "arm"
            flags = set(value.split()) & KERNEL_FLAGS
    return {"model_name": model, "isa": isa, "flags": sorted(flags) if flags is not None else None}


def read_cpuinfo(root: str | os.PathLike) -> dict:
    """:func:`parse_cpuinfo` of ``/proc/cpuinfo`` under ``root``; ``reason`` says why flags are None."""
    out = parse_cpuinfo(read_text(under(Path(root), CPUINFO)))
    if out["flags"] is None:
        out["reason"] = f"no flags or Features line in {CPUINFO}"
    return out
