"""Gate checks on the whole path from raw files (``results.pipeline``; docs/gating.md), and
the reading of its figures the summary, the page and ``compare`` share.

``[pipeline]`` limits the end-to-end time and each stage's (p50, p99; judged like warm
latency, on the upper end of the 95 % confidence interval), and ``max_preprocessing_abs``
the largest difference between the device's preprocessed tensor and a reference tensor.
A limit on a report without a pipeline fails as not measured, saying how to measure it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import NUMBER, Check, GateSection, limit_check, not_measured, percentile_upper_ci

if TYPE_CHECKING:
    from .policy import Policy

# The whole path's stages, then the path (results.pipeline): [pipeline] max_PART_p50_ms, ..._p99_ms.
PATH_PARTS = ("decode", "preprocess", "inference", "decision", "end_to_end")

PART_LABELS = {
    "decode": "decode",
    "preprocess": "preprocess",
    "inference": "inference",
    "decision": "decision",
    "end_to_end": "end to end",
}


def part_summary(pipeline: dict, part: str) -> dict | None:
    """The latency summary of one stage (``None`` for a stage that did not run: no
    decision rule) or of ``end_to_end``."""
    if part == "end_to_end":
        return pipeline.get("end_to_end")
    return (pipeline.get("stages") or {}).get(part)


def worst_preprocessing_abs(pipeline: dict) -> tuple[str | None, float | None]:
    """``(input, max abs)`` of the input whose preprocessed tensors are furthest from their
    references; ``(None, None)`` without reference tensors."""
    worst = (None, None)
    for name, figures in (pipeline.get("reference_inputs") or {}).items():
        value = figures.get("max_abs")
        if value is None and figures.get("shape_mismatch"):
            value = float("inf")
        if value is not None and (worst[1] is None or value > worst[1]):
            worst = (name, value)
    return worst


def pipeline_checks(results: dict, policy: Policy) -> list[Check]:
    """One check per ``[pipeline]`` limit."""
    limits = policy.pipeline
    if not limits:
        return []
    pipeline = results.get("pipeline")
    if not pipeline or not pipeline.get("end_to_end"):
        return [
            not_measured(
                "pipeline",
                "pipeline.measured",
                "the whole path from raw files",
                "pipeline: no whole path measured in the report (make the golden set from raw "
                "files: edgequal golden make MODEL --raw DIR --pipeline pipeline.toml)",
            )
        ]
    checks = []
    for key, limit in limits.items():
        name = f"pipeline.{key}"
        if key == "max_preprocessing_abs":
            worst_input, value = worst_preprocessing_abs(pipeline)
            checks.append(
                limit_check(
                    "pipeline",
                    name,
                    f"preprocessing vs the reference tensors (input {worst_input})",
                    value,
                    limit,
                    "max",
                    missing="no reference tensors (golden make --reference-inputs)",
                )
            )
            continue
        part, _, percentile = key.removeprefix("max_").removesuffix("_ms").rpartition("_")
        summary = part_summary(pipeline, part)
        if summary is None:
            checks.append(
                limit_check("pipeline", name, PART_LABELS[part], None, limit, "max", "ms",
                            missing="did not run (no decision rule in the golden set)")
            )  # fmt: skip
            continue
        upper, detail, missing = percentile_upper_ci({"summary": summary}, f"max_{percentile}_ms")
        checks.append(
            limit_check(
                "pipeline",
                name,
                f"{PART_LABELS[part]}: {percentile} (upper end of its 95 % CI)",
                upper,
                limit,
                "max",
                "ms",
                detail=detail,
                missing=missing or "not measured",
            )
        )
    return checks


SECTION = GateSection(
    "pipeline",
    keys={
        **{f"max_{part}_{p}_ms": NUMBER for part in PATH_PARTS for p in ("p50", "p99")},
        "max_preprocessing_abs": NUMBER,
    },
    checks=pipeline_checks,
)

__all__ = [
    "PART_LABELS",
    "PATH_PARTS",
    "SECTION",
    "part_summary",
    "pipeline_checks",
    "worst_preprocessing_abs",
]
