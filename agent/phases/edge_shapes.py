"""Edges of the input range: each edge shape in a fresh worker (docs/measurement.md).

The plan's edge shapes and the golden set's (the plan wins on a label both name); one
worker per shape measures a successful run, latency and peak memory. A shape the
runtime refuses, or whose worker crashes, hangs or exceeds the memory limit, is an
``ok: false`` entry and an ``edge_shape_failed`` finding; the others are still measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from edgequal.contract.plan import Plan

from ..worker.jobs import EdgeSettings, WorkerJob
from ..worker.supervisor import run_job
from .workers import EventSink


def planned_edge_shapes(plan: Plan, golden: Path | None) -> list[dict]:
    """The edge shapes to measure: the plan's, then the golden set's (the plan wins on a
    label both name), each ``{"label", "shapes", "source": "plan" | "golden"}``.

    Only the golden set's manifest is read here (``golden.read_manifest``: zipfile and
    json, no array); a bad ``edge_shapes`` in it is BadInput before anything runs.
    """
    own = [{**_copy_edge(e), "source": "plan"} for e in plan.edge_shapes or ()]
    recorded = []
    if golden is not None:
        from edgequal.contract.golden import golden_edge_shapes

        labels = {e["label"] for e in own}
        recorded = [
            {**e, "source": "golden"}
            for e in golden_edge_shapes(golden)
            if e["label"] not in labels
        ]
    return own + recorded


def _copy_edge(edge: Mapping) -> dict:
    return {"label": edge["label"], "shapes": {k: list(v) for k, v in edge["shapes"].items()}}


# What a failed edge shape's worker outcome is called in the report: the spec's four causes.
_EDGE_CAUSES = {"signal": "signal", "timeout": "timeout", "memory": "memory"}


def measure_edge_shapes(
    model, golden, plan: Plan, runtime, edges: list[dict], emit: EventSink, cancel, findings
) -> list[dict]:
    """One fresh worker per edge shape (docs/measurement.md "Edges of the input range").

    A shape the runtime refuses, or whose worker crashes, hangs or exceeds the memory
    limit, is an ``ok: false`` entry and an ``edge_shape_failed`` finding naming the
    input and shape; the other shapes are still measured.
    """
    out: list[dict] = []
    for i, edge in enumerate(edges):
        if cancel.is_set():
            break
        label = edge["label"]
        emit(
            {
                "type": "progress",
                "phase": "edge_shapes",
                "done": i,
                "total": len(edges),
                "message": f"edge shape {label} ({i + 1}/{len(edges)})",
            }
        )

        def forward(event: dict, label=label) -> None:
            if event.get("event") == "phase":
                emit(
                    {
                        "type": "progress",
                        "phase": "edge_shapes",
                        "message": f"{label}: {event['phase']}",
                    }
                )

        settings = EdgeSettings(label, edge["shapes"], plan.edge_latency_s, plan.edge_min_runs)
        ended = run_job(
            WorkerJob.for_phase(
                "edge_shape", model, golden, plan, runtime, edge=settings
            ).to_json(),
            phase_timeout_s=plan.phase_timeout_s + plan.edge_latency_s,
            memory_limit_mb=plan.memory_limit_mb,
            on_event=forward,
            cancel=cancel,
        )
        if ended.cause == "cancelled":
            break
        entry = {"label": label, "shapes": edge["shapes"], "source": edge["source"]}
        result = ended.result or {}
        if ended.ok and result.get("ok"):
            entry = {**entry, "ok": True, **{k: v for k, v in result.items() if k != "ok"}}
            out.append(entry)
            continue
        if ended.ok:  # the runtime refused the shape: the worker says which input
            cause, message = result["cause"], result["message"]
            name, shape = result["input"], result["shape"]
        else:
            cause = _EDGE_CAUSES.get(ended.cause, "error")
            message = ended.describe()
            name = next(iter(edge["shapes"]))
            shape = edge["shapes"][name]
        out.append({**entry, "ok": False, "cause": cause, "message": message})
        message = f"edge shape '{label}' ({name}={_dims(shape)}): {message}"
        findings.append(
            {
                "phase": "edge_shapes",
                "kind": "edge_shape_failed",
                "label": label,
                "input": name,
                "shape": shape,
                "cause": cause,
                "message": message,
                "runtime": runtime,
            }
        )
    return out


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "?"


def stops_later_phases(findings: list[dict]) -> bool:
    """Whether a finding ends the run: any but a failed edge shape (the others, and the
    phases after them, are still measured; the status is failed all the same)."""
    return any(f.get("kind") != "edge_shape_failed" for f in findings)
