"""Gate checks on a run under real conditions: declared co-load and edge shapes
(docs/gating.md).

Co-load percentiles are judged like the plain ones, on the upper end of their 95 %
confidence interval; the ratios are the agent's co-load / plain figures of the same
run. An edge shape that did not run fails every limit on it with its cause: a shape
that ran out of memory does not fit in any limit. A limit on a feature the report
lacks fails as not measured and says how to measure it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import (
    BOOL,
    NUMBER,
    Check,
    GateSection,
    NamedTables,
    fmt_value,
    limit_check,
    not_measured,
    percentile_upper_ci,
    section_absent,
)
from .conditions import coload_labels, coload_shapes, edge_failure, edge_shapes, mb, shapes_text

if TYPE_CHECKING:
    from .policy import Policy

# Limits on each edge shape (results.edge_shapes[]), for every label or one
# (edge_shapes.labels.LABEL, which overrides the section's value).
EDGE_SHAPE_LIMITS: dict[str, str] = {
    "max_p50_ms": NUMBER,
    "max_p99_ms": NUMBER,
    "max_peak_rss_mb": NUMBER,
    "max_rss_added_by_inference_mb": NUMBER,
}

_PERCENTILE_LIMITS = ("max_p50_ms", "max_p99_ms")
_RATIOS = {
    "max_p50_ratio": ("p50_ratio", "co-load p50 / plain p50"),
    "max_p99_ratio": ("p99_ratio", "co-load p99 / plain p99"),
}
_EDGE_MEMORY = {
    "max_peak_rss_mb": ("peak_rss_bytes", "peak RSS"),
    "max_rss_added_by_inference_mb": ("rss_added_by_inference_bytes", "RSS added by inference"),
}


def coload_checks(results: dict, policy: Policy) -> list[Check]:
    """One check per co-load limit and latency shape measured beside the co-load."""
    limits = dict(policy.coload)
    required = limits.pop("required", False)
    if not limits and not required:
        return []
    entries = coload_shapes(results)
    if not results.get("coload") or not entries:
        return [
            section_absent(
                "coload",
                "declared co-load",
                "qualify with --coload, or declare coload in the plan",
            )
        ]
    labels = coload_labels(results)
    checks = []
    if required:
        checks.append(
            Check(
                "coload.required",
                "coload",
                True,
                "a declared co-load",
                ", ".join(labels) or "declared",
                "measured beside " + (", ".join(labels) or "a declared co-load"),
            )
        )
    beside = ", ".join(labels)
    per_shape = (results.get("latency") or {}).get("per_shape") or []
    for entry in per_shape:
        if entry not in entries:
            shape = entry.get("shape", "?")
            checks.append(
                not_measured(
                    "coload",
                    f"coload.measured[{shape}]",
                    "measured beside the co-load",
                    f"{shape}: not measured beside the co-load (the report has it for "
                    f"{', '.join(e.get('shape', '?') for e in entries)})",
                )
            )
    for entry in entries:
        shape = entry.get("shape", "?")
        co = entry["coload"]
        retry = co.get("cause") == "interference"
        for key, limit in limits.items():
            name = f"coload.{key}[{shape}]"
            if key in _PERCENTILE_LIMITS:
                label = key.removeprefix("max_").removesuffix("_ms")
                upper, detail, missing = percentile_upper_ci(co, key)
                checks.append(
                    limit_check(
                        "coload",
                        name,
                        f"{shape}: {label} beside {beside} (upper end of its 95 % CI)",
                        upper,
                        limit,
                        "max",
                        "ms",
                        detail=detail,
                        retry=retry,
                        missing=missing or "not measured",
                    )
                )
            elif key in _RATIOS:
                figure, what = _RATIOS[key]
                plain = (entry.get("summary") or {}).get(figure.replace("ratio", "ms"))
                loaded = (co.get("summary") or {}).get(figure.replace("ratio", "ms"))
                detail = ""
                if plain is not None and loaded is not None:
                    detail = f"{loaded:.4g} ms beside the co-load, {plain:.4g} ms without"
                checks.append(
                    limit_check(
                        "coload",
                        name,
                        f"{shape}: {what}",
                        co.get(figure),
                        limit,
                        "max",
                        detail=detail,
                        retry=retry,
                    )
                )
    return checks


def _edge_check(entry: dict, key: str, limit: float) -> Check:
    label = entry.get("label", "?")
    name = f"edge_shapes.{key}[{label}]"
    where = f"{label} ({shapes_text(entry.get('shapes'))})"
    if key in _PERCENTILE_LIMITS:
        what = key.removeprefix("max_").removesuffix("_ms")
        unit = "ms"
    else:
        what = _EDGE_MEMORY[key][1]
        unit = "MB"
    if not entry.get("ok"):
        return Check(
            name,
            "edge_shapes",
            False,
            f"≤ {fmt_value(limit, unit)}",
            "did not run",
            f"{where}: {what} not measured: the shape did not run ({edge_failure(entry)})",
        )
    if key in _PERCENTILE_LIMITS:
        upper, detail, missing = percentile_upper_ci(entry, key)
        return limit_check(
            "edge_shapes",
            name,
            f"{where}: {what} (upper end of its 95 % CI)",
            upper,
            limit,
            "max",
            unit,
            detail=detail,
            missing=missing or "not measured",
        )
    figure = _EDGE_MEMORY[key][0]
    return limit_check(
        "edge_shapes",
        name,
        f"{where}: {what}",
        mb(entry.get(figure)),
        limit,
        "max",
        unit,
        detail=f"{entry.get('runs')} runs" if entry.get("runs") is not None else "",
    )


def edge_shape_checks(results: dict, policy: Policy) -> list[Check]:
    """``require_all_ran``, then each limit on each edge shape (a label's own value wins)."""
    limits = dict(policy.edge_shapes)
    require = limits.pop("require_all_ran", False)
    per_label = policy.edge_shape_labels
    if not limits and not require and not per_label:
        return []
    entries = edge_shapes(results)
    if not entries:
        return [
            section_absent(
                "edge_shapes",
                "edge shapes",
                "name them in the plan's edge_shapes, or record them in the golden set",
            )
        ]
    checks = []
    if require:
        failed = [e for e in entries if not e.get("ok")]
        ran = len(entries) - len(failed)
        message = (
            f"all {len(entries)} edge shapes ran"
            if not failed
            else "edge shapes that did not run: "
            + "; ".join(
                f"{e.get('label')} ({shapes_text(e.get('shapes'))}): {edge_failure(e)}"
                for e in failed
            )
        )
        checks.append(
            Check(
                "edge_shapes.require_all_ran",
                "edge_shapes",
                not failed,
                "every edge shape ran",
                f"{ran} of {len(entries)} ran",
                message,
            )
        )
    labels = [str(e.get("label")) for e in entries]
    for label in per_label:
        if label not in labels:
            checks.append(
                Check(
                    f"edge_shapes.labels.{label}",
                    "edge_shapes",
                    False,
                    "present",
                    "absent",
                    f"edge_shapes: {label} is not in the report (edge shapes: {', '.join(labels)})",
                )
            )
    for entry in entries:
        own = per_label.get(str(entry.get("label")), {})
        for key in EDGE_SHAPE_LIMITS:
            limit = own.get(key, limits.get(key))
            if limit is not None:
                checks.append(_edge_check(entry, key, limit))
    return checks


COLOAD = GateSection(
    "coload",
    keys={
        "required": BOOL,
        "max_p50_ms": NUMBER,
        "max_p99_ms": NUMBER,
        "max_p50_ratio": NUMBER,
        "max_p99_ratio": NUMBER,
    },
    checks=coload_checks,
)
EDGE_SHAPES = GateSection(
    "edge_shapes",
    keys={"require_all_ran": BOOL, **EDGE_SHAPE_LIMITS},
    checks=edge_shape_checks,
    named=NamedTables("labels", "edge_shape_labels", EDGE_SHAPE_LIMITS, "edge shapes", "LABEL"),
)
