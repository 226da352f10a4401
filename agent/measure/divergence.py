"""Where two runs of one model part: every intermediate tensor compared, the first node past
tolerance named (docs/divergence.md). Pure: arrays and node lists in, JSON-ready dicts out.

A node's error is the largest absolute difference over its outputs; its tolerance is
scaled to the reference tensor's magnitude, ``atol + rtol * max|ref|`` (one quantization
step more for an integer tensor, whose kernels may round a value either way), so a
large activation and a small one are judged alike. The first node in topological order
whose error exceeds its tolerance is the divergent one; the error of the tensors it read
says whether it started there (its inputs agree) or carried it on. Tensors that only one
side has (fused away, delegated, renamed) are skipped, and counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

# fp32 kernels that agree round alike to about 1e-6 of the magnitude; 1e-3 leaves room for
# reassociation (a different kernel path) and still sees a 1 % change in one layer.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-6
# The share of an integer tensor pinned at its type's limits that makes it "saturated".
SATURATION_SHARE = 0.01
# The error curve the report carries: at most this many nodes (the first divergent one,
# and the worst, always among them).
CURVE_LIMIT = 400


def tensor_error(reference, actual, atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL) -> dict:
    """One tensor's difference: ``max_abs``, ``mean_abs``, ``scale`` (max |ref|), the
    ``tolerance`` scaled to it, ``ratio`` (max_abs / tolerance: above 1 is divergent),
    ``nonfinite`` (positions finite on one side only) and ``shape_differs``."""
    ref = np.asarray(reference)
    got = np.asarray(actual)
    if ref.shape != got.shape:
        return {
            "max_abs": None,
            "mean_abs": None,
            "scale": None,
            "tolerance": None,
            "ratio": math.inf,
            "nonfinite": 0,
            "shape_differs": [list(ref.shape), list(got.shape)],
        }
    r = ref.astype(np.float64, copy=False).ravel()
    a = got.astype(np.float64, copy=False).ravel()
    finite = np.isfinite(r) & np.isfinite(a)
    nonfinite = int(np.count_nonzero(np.isfinite(r) != np.isfinite(a)))
    diff = np.abs(a[finite] - r[finite])
    scale = float(np.abs(r[finite]).max()) if diff.size else 0.0
    step = 1.0 if ref.dtype.kind in "iu" or got.dtype.kind in "iu" else 0.0
    tolerance = atol + step + rtol * scale
    max_abs = float(diff.max()) if diff.size else 0.0
    ratio = math.inf if nonfinite else max_abs / tolerance
    return {
        "max_abs": max_abs,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "scale": scale,
        "tolerance": tolerance,
        "ratio": ratio,
        "nonfinite": nonfinite,
        "shape_differs": None,
    }


def saturation(array, reference=None) -> dict | None:
    """For an integer tensor: the share of its values at its type's minimum and maximum
    (``{"dtype", "low", "high", "saturated"}``); None for a float tensor. With the
    ``reference`` tensor, ``saturated`` means at least SATURATION_SHARE more values sit at
    the limits than in the reference (a ReLU's zeros at a uint8 zero point of 0 are not
    saturation); without it, that share of all values does."""
    a = np.asarray(array)
    if a.dtype.kind not in "iu" or a.size == 0:
        return None
    info = np.iinfo(a.dtype)
    low = float(np.count_nonzero(a == info.min)) / a.size
    high = float(np.count_nonzero(a == info.max)) / a.size
    out = {"dtype": a.dtype.name, "low": low, "high": high}
    pinned = low + high
    if reference is not None and np.asarray(reference).shape == a.shape:
        r = np.asarray(reference)
        pinned -= float(np.count_nonzero((r == info.min) | (r == info.max))) / r.size
        out["more_than_reference"] = pinned
    out["saturated"] = pinned >= SATURATION_SHARE
    return out


def value_range(array) -> list[float] | None:
    """``[min, max]`` of a tensor's finite values (None when it has none)."""
    a = np.asarray(array, dtype=np.float64).ravel()
    a = a[np.isfinite(a)]
    return [float(a.min()), float(a.max())] if a.size else None


def error_curve(
    nodes: Sequence[Mapping],
    reference: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> list[dict]:
    """Per node in the given (topological) order, the worst of its outputs both sides hold:
    ``{index, node, op_type, output, max_abs, scale, ratio, divergent}``. A node none of
    whose outputs both sides hold is left out."""
    curve = []
    for index, node in enumerate(nodes):
        worst = None
        for name in node["outputs"]:
            if name not in reference or name not in actual:
                continue
            if not (_numeric(reference[name]) and _numeric(actual[name])):
                continue  # strings and other non-numbers have no error to measure
            err = tensor_error(reference[name], actual[name], atol, rtol)
            if worst is None or err["ratio"] > worst[1]["ratio"]:
                worst = (name, err)
        if worst is None:
            continue
        name, err = worst
        curve.append(
            {
                "index": index,
                "node": node_label(node, index),
                "op_type": node["op_type"],
                "output": name,
                "max_abs": err["max_abs"],
                "scale": err["scale"],
                "ratio": _finite(err["ratio"]),
                "divergent": err["ratio"] > 1.0,
            }
        )
    return curve


def _numeric(array) -> bool:
    return np.asarray(array).dtype.kind in "biuf"


def node_label(node: Mapping, index: int) -> str:
    """A node's name, else its first output's name, else ``#index``."""
    return node.get("name") or (node["outputs"][0] if node["outputs"] else f"#{index}")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def localize(
    nodes: Sequence[Mapping],
    reference: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    final_outputs: Sequence[str] = (),
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> dict:
    """The first divergent node of ``actual`` against ``reference`` (tensors by name).

    Returns ``{"found", "compared", "skipped", "curve"}`` and, when found, ``node``,
    ``op_type``, ``index``, ``output``, ``error`` (its max abs), ``ratio``,
    ``error_before`` (the largest max abs of the tensors it read; 0 when they agree
    exactly), ``inputs`` (each input's name, range on the divergent side and on the
    reference, saturation), ``saturation`` (of its own output, for integer tensors),
    ``growth`` (the worst ratio after it and at the final outputs, over its own).
    """
    curve = error_curve(nodes, reference, actual, atol, rtol)
    compared = len(curve)
    out: dict = {
        "found": False,
        "compared": compared,
        "skipped": len(nodes) - compared,
        "atol": atol,
        "rtol": rtol,
    }
    first = next((c for c in curve if c["divergent"]), None)
    out["curve"] = _trimmed(curve, first)
    if first is None:
        return out
    node = nodes[first["index"]]
    inputs = []
    before = 0.0
    for name in node.get("inputs", ()):
        if not name or name not in actual or not _numeric(actual[name]):
            continue
        entry = {"name": name, "range": value_range(actual[name])}
        if name in reference and _numeric(reference[name]):
            entry["reference_range"] = value_range(reference[name])
            err = tensor_error(reference[name], actual[name], atol, rtol)
            entry["max_abs"] = err["max_abs"]
            before = max(before, err["max_abs"] or 0.0)
        sat = saturation(actual[name], reference.get(name))
        if sat is not None:
            entry["saturation"] = sat
        inputs.append(entry)
    after = [c["ratio"] for c in curve if c["index"] > first["index"] and c["ratio"] is not None]
    finals = [
        c["ratio"] for c in curve if c["output"] in set(final_outputs) and c["ratio"] is not None
    ]
    own = first["ratio"] or math.inf
    out.update(
        {
            "found": True,
            "node": first["node"],
            "op_type": first["op_type"],
            "index": first["index"],
            "output": first["output"],
            "error": first["max_abs"],
            "ratio": first["ratio"],
            "error_before": before,
            "inputs": inputs,
            "saturation": saturation(actual[first["output"]], reference.get(first["output"])),
            "growth": {
                "worst_after": max(after) / own if after and math.isfinite(own) else None,
                "at_outputs": max(finals) / own if finals and math.isfinite(own) else None,
            },
        }
    )
    return out


def _trimmed(curve: list[dict], first: dict | None) -> list[dict]:
    """The curve, evenly thinned to CURVE_LIMIT nodes, keeping the first divergent and the worst."""
    if len(curve) <= CURVE_LIMIT:
        return curve
    keep = {round(i * (len(curve) - 1) / (CURVE_LIMIT - 3)) for i in range(CURVE_LIMIT - 2)}
    worst = max(range(len(curve)), key=lambda i: curve[i]["ratio"] or math.inf)
    keep.add(worst)
    if first is not None:
        keep.add(curve.index(first))
    return [curve[i] for i in sorted(keep)]


def node_ranges(sizes_bytes: Sequence[int], budget_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` ranges of nodes whose kept outputs (``sizes_bytes``, per
    node, on both sides together) fit ``budget_bytes`` each; a node larger than the budget
    alone is a range of its own (it must be compared, and its outputs are needed anyway)."""
    ranges: list[tuple[int, int]] = []
    start, used = 0, 0
    for i, size in enumerate(sizes_bytes):
        if i > start and used + size > budget_bytes:
            ranges.append((start, i))
            start, used = i, 0
        used += size
    if start < len(sizes_bytes):
        ranges.append((start, len(sizes_bytes)))
    return ranges


def merge_localizations(parts: Sequence[dict]) -> dict:
    """Localisations of consecutive node ranges (in order) as one: the first range that
    found a divergent node names it; curves and counts add up."""
    if not parts:
        return {"found": False, "compared": 0, "skipped": 0, "curve": []}
    found = next((p for p in parts if p["found"]), None)
    merged = dict(found if found is not None else parts[-1])
    merged["compared"] = sum(p["compared"] for p in parts)
    merged["skipped"] = sum(p["skipped"] for p in parts)
    merged["curve"] = [c for p in parts for c in p["curve"]]
    return merged


def divergence_message(located: Mapping, against: str) -> str:
    """The one line a finding shows, e.g. ``first divergent node: conv_12 (QLinearConv),
    error 3.1e-1 from 2e-6 before it; inputs saturate int8``."""
    if not located.get("found"):
        return (
            f"no node's output differs from {against} beyond tolerance "
            f"({located.get('compared', 0)} nodes compared)"
        )
    text = (
        f"first divergent node: {located['node']} ({located['op_type']}), "
        f"error {located['error']:.2g} from {located['error_before']:.2g} before it"
    )
    saturated = [
        i["saturation"]["dtype"]
        for i in located.get("inputs", ())
        if (i.get("saturation") or {}).get("saturated")
    ]
    own = located.get("saturation") or {}
    if saturated:
        text += f"; inputs saturate {saturated[0]}"
    elif own.get("saturated"):
        text += f"; its output saturates {own['dtype']}"
    growth = (located.get("growth") or {}).get("at_outputs")
    if growth is not None:
        text += f"; at the outputs {growth:.2g}x its own error ratio"
    return text + f" (against {against})"


def worst_case(drift: Mapping) -> str | None:
    """The golden case to localise: the failed case with the lowest PSNR (the largest
    max abs on a tie), else the lowest PSNR of all; None without cases."""
    rows = list(drift.get("cases") or ())
    if not rows:
        return None
    flipped = set((drift.get("decisions") or {}).get("flips") or ())
    failed = (
        [r for r in rows if r["case"] in flipped]
        or [r for r in rows if not r.get("passed", True)]
        or rows
    )

    def key(row):
        m = row["metrics"]
        return (m.get("psnr_db", math.inf), -(m.get("max_abs") or 0.0))

    return min(failed, key=key)["case"]
