"""Divergence at the preprocessing stage: the device's tensor against the reference tensor
the training pipeline fed the model, and the likely cause of a difference.

Pure: the worker hands this module the device's tensor, the reference, and the tensors
the same stage made with one declared setting changed (``pipeline.variants``: channels
swapped, range 0–255 against 0–1, another resize method, the crop, no mean/std). The
cause named is the change under which the device's tensor matches the reference (within
the tolerance), else the one that brings it closest, by at least half; a reference whose
shape is the device's with the channel axis moved is a transposed layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# A variant that does not match counts as the likely cause only when it at least halves
# the difference.
CLOSER_FACTOR = 0.5


def tensor_difference(device, reference) -> dict:
    """``{max_abs, mean_abs}`` between two tensors of one shape (float64 arithmetic)."""
    d = np.asarray(device, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    a = np.abs(d)
    return {
        "max_abs": float(a.max()) if a.size else 0.0,
        "mean_abs": float(a.mean()) if a.size else 0.0,
    }


def _transposed_layouts(shape: tuple) -> list[tuple[str, tuple]]:
    """The NCHW↔NHWC transposes of a rank-4 shape: ``(label, axes)``."""
    if len(shape) != 4:
        return []
    return [
        ("layout NHWC (channels last)", (0, 2, 3, 1)),
        ("layout NCHW (channels first)", (0, 3, 1, 2)),
    ]


def likely_cause(
    device: np.ndarray,
    reference: np.ndarray,
    variants: Sequence[tuple[str, str, np.ndarray]],
    tolerance: float,
) -> dict | None:
    """The change under which the device's tensor best explains the reference:
    ``{label, key, max_abs, matches}``; None when nothing comes within CLOSER_FACTOR.

    ``variants`` are ``(label, key, tensor)``: the label says what changed ("channels
    swapped"), the key the pipeline setting to check (``color_order``).
    """
    device, reference = np.asarray(device), np.asarray(reference)
    candidates = []
    for label, axes in _transposed_layouts(device.shape):
        moved = np.transpose(device, axes)
        if moved.shape == reference.shape and moved.shape != device.shape:
            candidates.append((label, "layout", moved))
    candidates += [v for v in variants if np.shape(v[2]) == reference.shape]
    base = (
        tensor_difference(device, reference)["max_abs"] if device.shape == reference.shape else None
    )
    best = None
    for label, key, tensor in candidates:
        diff = tensor_difference(tensor, reference)["max_abs"]
        if best is None or diff < best["max_abs"]:
            best = {"label": label, "key": key, "max_abs": diff, "matches": diff <= tolerance}
    if best is None:
        return None
    if best["matches"] or (base is not None and best["max_abs"] <= CLOSER_FACTOR * base):
        return best
    if base is None and best["key"] == "layout":  # the shapes alone say the axes moved
        return best
    return None


def compare_inputs(
    per_case: Sequence[tuple[str, np.ndarray, np.ndarray]], tolerance: float
) -> dict:
    """One input over the cases that have a reference (``(case, device, reference)``):
    ``{cases, cases_over, max_abs, mean_abs, worst_case, tolerance, shape_mismatch}``.

    A case whose shapes differ counts as over the tolerance, its max_abs None
    (``shape_mismatch`` names the two shapes).
    """
    worst, worst_case, over, means, mismatch = 0.0, None, 0, [], None
    for case, device, reference in per_case:
        if np.shape(device) != np.shape(reference):
            over += 1
            mismatch = mismatch or {
                "case": case,
                "device": list(np.shape(device)),
                "reference": list(np.shape(reference)),
            }
            worst_case = worst_case or case
            continue
        d = tensor_difference(device, reference)
        means.append(d["mean_abs"])
        if d["max_abs"] > tolerance:
            over += 1
        if worst_case is None or d["max_abs"] > worst:
            worst, worst_case = d["max_abs"], case
    return {
        "cases": len(per_case),
        "cases_over": over,
        "max_abs": worst if means else None,
        "mean_abs": float(np.mean(means)) if means else None,
        "worst_case": worst_case,
        "tolerance": tolerance,
        "shape_mismatch": mismatch,
    }


def divergence_message(name: str, figures: Mapping, cause: Mapping | None) -> str:
    """One line naming the input, the measured difference and the likely cause, e.g.
    ``input x: device preprocessing differs from the reference (max abs 0.52; matches the
    reference with channels swapped: color_order?)``."""
    if figures.get("max_abs") is not None:
        measured = f"max abs {figures['max_abs']:.3g}"
    else:
        m = figures["shape_mismatch"]
        measured = f"shape {'x'.join(map(str, m['device']))} vs reference {'x'.join(map(str, m['reference']))}"
    measured += f" in {figures['cases_over']} of {figures['cases']} case(s)"
    if cause is None:
        why = "no single setting explains it: compare the training pipeline's stages"
    elif cause["matches"]:
        why = f"matches the reference with {cause['label']}: {cause['key']}?"
    else:
        why = f"closest with {cause['label']} (max abs {cause['max_abs']:.3g}): {cause['key']}?"
    return f"input {name}: device preprocessing differs from the reference ({measured}; {why})"
