"""The cold-load phase: N fresh worker processes, each timing the runtime's import, the
model's load and the first inference; the runtime-environments phase runs the same worker
under each environment it compares."""

from __future__ import annotations

import statistics
from dataclasses import replace

from edgequal.contract.plan import Plan

from ..worker.jobs import WorkerJob
from ..worker.supervisor import Worker
from .workers import EventSink, finding_from


def _input_contract_findings(mismatches: list[dict], runtime: str) -> list[dict]:
    """A finding per input whose golden data the model does not take as recorded (input named)."""
    return [
        {
            "phase": "cold_load",
            "cause": "inputs",
            "kind": "input_contract",
            "input": m["input"],
            "mismatch": m["mismatch"],
            "message": m["message"],
            "hint": m["hint"],
            "runtime": runtime,
        }
        for m in mismatches
    ]


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def cold_load_once(
    model, golden, plan: Plan, runtime, cancel, findings, env=None, phase: str = "cold_load"
) -> dict | None:
    """One fresh worker timing import, load and first inference (None, with a finding, when
    it fails); ``env`` is a runtime environment (``runtimes/envs.py``) to run it in."""
    return _cold_run(model, golden, plan, runtime, cancel, findings, env, phase)[0]


def _cold_run(
    model, golden, plan: Plan, runtime, cancel, findings, env=None, phase="cold_load", keep=False
) -> tuple[dict | None, Worker | None]:
    """:func:`cold_load_once`, and with ``keep`` the worker, kept after a good result for
    the warm phase's job (``WorkerJob.keep``: the model stays loaded)."""
    job = WorkerJob.for_phase("cold_load", model, golden, plan, runtime)
    worker = Worker(
        replace(job, keep=keep).to_json(),
        phase_timeout_s=plan.phase_timeout_s,
        memory_limit_mb=plan.memory_limit_mb,
        cancel=cancel,
        python=env.worker_python() if env is not None else None,
        env=env.worker_env() if env is not None else None,
    )
    worker.start()
    ended = worker.wait(stay=keep)
    kept = worker if ended.returncode is None else None  # alive: kept after its result
    r = ended.result if ended.ok else None
    if not ended.ok:
        findings.append(finding_from(ended, phase, runtime))
    elif r.get("input_contract"):
        findings.extend(_input_contract_findings(r["input_contract"], runtime))
        r = None
    else:
        r["process_to_result_ms"] = ended.result_ms  # kept or not, not its exit
    if r is None and kept is not None:
        kept.end()
        kept = None
    return r, kept


COLD_LOAD_KEYS = ("import_ms", "load_ms", "first_inference_ms", "total_ms", "process_to_result_ms")


def summarize_cold_runs(runs: list[dict]) -> dict:
    """The cold-load result of a list of runs: each run, and median/min/max of each time."""
    keys = COLD_LOAD_KEYS
    # With a pipeline, the first decode and preprocess (in total_ms, before the inference).
    path_keys = tuple(
        k
        for k in ("first_decode_ms", "first_preprocess_ms")
        if all(k in (r.get("pipeline") or {}) for r in runs)
    )
    for r in runs:
        r.update({k: r["pipeline"][k] for k in path_keys})
    keys += path_keys
    return {
        "runs": [{k: r[k] for k in (*keys, "page_cache", "rss_added_by_load_bytes")} for r in runs],
        **{k: _summary([r[k] for r in runs]) for k in keys},
        "page_cache_evicted": all(r["page_cache"].get("evicted") for r in runs),
        "runtime": runs[0]["runtime"],
    }


def measure_cold_load(
    model, golden, plan: Plan, runtime, emit: EventSink, cancel, findings, keep_last=False
) -> tuple[dict | None, Worker | None]:
    """N fresh worker processes, each timing import, load, first inference and the total;
    with ``keep_last``, the last one kept with its model loaded for the warm phase (one
    process start less: a runtime's import is seconds on a small board), else None."""
    runs = []
    kept = None
    total = plan.cold_runs
    for i in range(total):
        emit(
            {
                "type": "progress",
                "phase": "cold_load",
                "done": i,
                "total": total,
                "message": f"cold start {i + 1}/{total}",
            }
        )
        keep = keep_last and i == total - 1
        r, kept = _cold_run(model, golden, plan, runtime, cancel, findings, keep=keep)
        if r is None:
            return None, None
        runs.append(r)
    if golden is None and runs[0].get("nonfinite_outputs"):
        # Without a golden set nothing else compares the outputs: non-finite values on
        # ordinary inputs are a finding, not a pass (with one, drift counts them).
        name, c = next(iter(runs[0]["nonfinite_outputs"].items()))
        findings.append(
            {
                "phase": "cold_load",
                "cause": "model",
                "kind": "nonfinite_output",
                "message": f"output '{name}' holds {c['nan']} NaN and {c['inf']} Inf of "
                f"{c['size']} values on the first inference",
                "runtime": runtime,
                "hint": "check the export and the input range; a golden set shows drift per case",
            }
        )
    return summarize_cold_runs(runs), kept
