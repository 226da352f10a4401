"""The one-setting changes divergence attribution tries: what the device's preprocessing
would have made had one declared setting been otherwise (``measure/preprocessing.py``
compares each with the reference tensor). Pure: new :class:`~.spec.InputPipeline` s."""

from __future__ import annotations

from edgequal.contract.pipeline_spec import INTERPOLATIONS, InputPipeline


def variants(p: InputPipeline) -> list[tuple[str, str, InputPipeline]]:
    """``(label, key, pipeline)`` for each single change worth trying on ``p``: the colour
    order swapped, the range ×255 and ÷255, each other resize method, the other crop, no
    mean/std. Text has none: token ids match or not."""
    if p.decode == "text":
        return []
    out = []
    if p.color_order in ("RGB", "BGR"):
        other = "BGR" if p.color_order == "RGB" else "RGB"
        out.append(("channels swapped", "color_order", p.with_changes(color_order=other)))
    scale = p.effective_scale()
    if p.decode == "image":
        factor, wide, narrow = (
            255.0,
            "range 0–255 vs 0–1 (no ÷255)",
            "range 0–1 vs 0–255 (÷255 twice)",
        )
    else:
        factor, wide, narrow = 32768.0, "raw samples vs ±1 (no ÷32768)", "÷32768 twice"
    out.append((wide, "scale", p.with_changes(scale=scale * factor)))
    out.append((narrow, "scale", p.with_changes(scale=scale / factor)))
    if p.decode == "image":
        for method in INTERPOLATIONS:
            if method != p.interpolation:
                out.append(
                    (f"resize {method}", "interpolation", p.with_changes(interpolation=method))
                )
        other_crop = "none" if p.crop == "center" else "center"
        out.append((f"crop {other_crop}", "crop", p.with_changes(crop=other_crop)))
    if p.mean is not None:
        out.append(
            (
                "no mean/std normalization",
                "mean/std",
                p.with_changes(mean=None, std=None, scale=scale),
            )
        )
    return out
