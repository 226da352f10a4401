"""Reading the results of a run under real conditions: declared co-load and edge shapes.

Pure accessors shared by the summary, ``compare``, ``gate`` and the report page, so
each reads ``results.coload``, ``results.latency.per_shape[].coload`` and
``results.edge_shapes`` by the same rules (docs/report-schema.md).
"""

from __future__ import annotations

from typing import Any

MB = 1 << 20


def shapes_text(shapes: Any) -> str:
    """``{"x": [1, 3, 1024, 1024]}`` as ``x=1x3x1024x1024`` (inputs joined by ``;``)."""
    if not isinstance(shapes, dict):
        return str(shapes)
    parts = []
    for name, dims in shapes.items():
        dims_text = "x".join(str(d) for d in dims) if isinstance(dims, list) else str(dims)
        parts.append(f"{name}={dims_text}")
    return ";".join(parts)


def coload_shapes(results: dict) -> list[dict]:
    """The latency entries that were measured with the co-load beside them."""
    per_shape = (results.get("latency") or {}).get("per_shape") or []
    return [e for e in per_shape if isinstance(e, dict) and isinstance(e.get("coload"), dict)]


def coload_labels(results: dict) -> list[str]:
    """The declared loads' labels (``model:detector.onnx``, ``cpu:1.5``…), in plan order."""
    declared = (results.get("coload") or {}).get("declared") or []
    return [str(d.get("label")) for d in declared if isinstance(d, dict)]


def achieved_text(entry: dict) -> str:
    """One load's achieved rate in words: ``model:d.onnx 24.8/30 inferences/s``."""
    achieved = entry.get("achieved") or {}
    value, target, unit = achieved.get("value"), achieved.get("target"), achieved.get("unit")
    if value is None:
        text = "not measured"
    else:
        text = f"{value:.3g}" + (f"/{target:.3g}" if target is not None else "")
        text += f" {unit}" if unit else ""
    return f"{entry.get('label')} {text}"


def edge_shapes(results: dict) -> list[dict]:
    """``results.edge_shapes``, or an empty list when the run named none."""
    return [e for e in results.get("edge_shapes") or [] if isinstance(e, dict)]


def edge_failure(entry: dict) -> str:
    """Why an edge shape did not run, in words (``memory: …``)."""
    cause = entry.get("cause") or "error"
    message = entry.get("message")
    return f"{cause}: {message}" if message else str(cause)


def mb(value: Any) -> float | None:
    """Bytes as MiB (the unit every memory limit and row uses), None kept."""
    return None if value is None else value / MB
