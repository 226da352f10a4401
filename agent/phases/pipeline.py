"""The whole path on the device: a golden set of raw files through its declared pipeline.

One worker (``worker/pipeline.py``) runs every case from its raw files through decode,
preprocess, inference and the decision, then times the path stage by stage. This
module turns what it found into findings (a raw file a stage refused, preprocessing
that differs from the reference tensors) and the ``results.pipeline`` section
(docs/report-schema.md); the path's drift becomes ``results.drift``.
"""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.plan import Plan

from ..worker.jobs import WorkerJob, latency_settings
from ..worker.supervisor import run_job
from .workers import EventSink, finding_from


def golden_has_pipeline(golden: Path | None) -> bool:
    """Whether a golden set holds raw files and a declared pipeline (its manifest only)."""
    if golden is None:
        return False
    from edgequal.contract.golden import read_manifest

    return read_manifest(Path(golden)).get("pipeline") is not None


def measure_pipeline(
    model, golden, plan: Plan, runtime, emit: EventSink, cancel, findings
) -> dict | None:
    """``results.pipeline`` (its ``drift`` popped by the caller), findings appended."""

    def forward(event: dict) -> None:
        if event.get("event") == "phase":
            emit({"type": "progress", "phase": "pipeline", "message": event["phase"]})

    settings = latency_settings(plan)
    ended = run_job(
        WorkerJob.for_phase("pipeline", model, golden, plan, runtime, latency=settings).to_json(),
        phase_timeout_s=plan.phase_timeout_s
        + plan.warmup_max_s
        + (plan.latency_max_s or plan.latency_min_s),
        memory_limit_mb=plan.memory_limit_mb,
        on_event=forward,
        cancel=cancel,
    )
    if not ended.ok:
        findings.append(finding_from(ended, "pipeline", runtime))
        return None
    result = ended.result
    for failure in result["failures"]:
        findings.append(
            {
                "phase": "pipeline",
                "cause": "inputs",
                "kind": "raw_input",
                "case": failure["case"],
                "stage": failure["stage"],
                "message": f"case '{failure['case']}' {failure['message']}",
                "hint": "fix or drop the raw file; the other cases were measured",
                "runtime": runtime,
            }
        )
    for name, figures in (result.get("reference_inputs") or {}).items():
        if figures.get("message"):
            findings.append(
                {
                    "phase": "pipeline",
                    "cause": "preprocessing",
                    "kind": "preprocessing_mismatch",
                    "input": name,
                    "stage": "preprocess",
                    "max_abs": figures["max_abs"],
                    "likely": (figures.get("cause") or {}).get("key"),
                    "message": figures.pop("message"),
                    "hint": "make the device's pipeline.toml match the training pipeline",
                    "runtime": runtime,
                }
            )
    return result
