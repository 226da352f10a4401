"""One qualification, phase by phase: cold load, warm latency, drift, memory, sustained.

Every phase runs in fresh worker processes; this module only orchestrates them and
assembles the results object (schema ``edgequal.results/v1``, docs/report-schema.md).
It never raises for trouble with the model or the runtime: that becomes a finding
and a status. It raises AgentError only for a request that cannot start at all.
"""

from __future__ import annotations

import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import __version__
from .errors import BadInput, GoldenMismatch
from .plan import sustain_window_s, validate_plan
from .probes.fingerprint import fingerprint as probe_fingerprint
from .probes.thermal import read_thermal
from .runtimes import runtime_for
from .supervisor import Worker, WorkerOutcome, run_job

RESULTS_SCHEMA = "edgequal.results/v1"

EventSink = Callable[[dict], None]


def _job(kind: str, model: Path, golden: Path | None, plan: dict, runtime: str, **extra) -> dict:
    return {
        "kind": kind,
        "model": str(model),
        "golden": str(golden) if golden else None,
        "runtime": runtime,
        "options": {
            "threads": plan["threads"],
            "providers": plan["providers"],
            "graph_optimization": plan["graph_optimization"],
            "xnnpack": plan["xnnpack"],
        },
        "shapes": plan["shapes"],
        "seed": plan["seed"],
        **extra,
    }


_BAD_INPUT_ERRORS = {"BadInput": BadInput, "GoldenMismatch": GoldenMismatch}


def _finding_from(outcome: WorkerOutcome, phase: str, runtime: str) -> dict:
    """A finding for a worker that failed; a bad request (golden mismatch, missing --shape) raises instead."""
    error = outcome.error or {}
    if error.get("type") in _BAD_INPUT_ERRORS:
        raise _BAD_INPUT_ERRORS[error["type"]](error["message"], hint=error.get("hint"))
    finding = {
        "phase": phase,
        "cause": outcome.cause,
        "kind": {
            "ModelRejected": "model_rejected",
            "GoldenMismatch": "golden_mismatch",
            "RuntimeUnavailable": "runtime_unavailable",
        }.get(error.get("type"), "worker_failure"),
        "message": error.get("message", outcome.describe()),
        "worker_phase": outcome.phase,
        "runtime": runtime,
    }
    for key in ("operator", "hint", "signal"):
        if error.get(key):
            finding[key] = error[key]
    if outcome.stderr_tail and outcome.cause in ("signal", "exit"):
        finding["stderr_tail"] = outcome.stderr_tail[-5:]
    return finding


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_cold_load(
    model, golden, plan, runtime, emit: EventSink, cancel, findings
) -> dict | None:
    """N fresh worker processes, each timing import, load, first inference and the total."""
    runs = []
    total = plan["cold_runs"]
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
        outcome = run_job(
            _job("cold", model, golden, plan, runtime, evict=plan["evict_page_cache"]),
            phase_timeout_s=plan["phase_timeout_s"],
            memory_limit_mb=plan["memory_limit_mb"],
            cancel=cancel,
        )
        if not outcome.ok:
            findings.append(_finding_from(outcome, "cold_load", runtime))
            return None
        r = outcome.result
        r["process_to_result_ms"] = outcome.wall_ms
        runs.append(r)
    keys = ("import_ms", "load_ms", "first_inference_ms", "total_ms", "process_to_result_ms")
    return {
        "runs": [{k: r[k] for k in (*keys, "page_cache", "rss_added_by_load_bytes")} for r in runs],
        **{k: _summary([r[k] for r in runs]) for k in keys},
        "page_cache_evicted": all(r["page_cache"].get("evicted") for r in runs),
        "runtime": runs[0]["runtime"],
    }


def measure_warm(model, golden, plan, runtime, emit: EventSink, cancel, findings) -> dict | None:
    """One worker: warm-up, latency per input shape, drift over the golden set, memory."""
    latency_plan = {
        "warmup_min_runs": plan["warmup_min_runs"],
        "warmup_min_s": plan["warmup_min_s"],
        "warmup_max_s": plan["warmup_max_s"],
        "min_runs": plan["latency_min_runs"],
        "min_s": plan["latency_min_s"],
        "max_runs": plan["latency_max_runs"],
        "max_s": plan["latency_max_s"],
    }

    def forward(event: dict) -> None:
        if event.get("event") == "phase":
            emit({"type": "progress", "phase": "latency", "message": event["phase"]})

    outcome = run_job(
        _job("measure", model, golden, plan, runtime, latency=latency_plan),
        phase_timeout_s=plan["phase_timeout_s"] + plan["latency_min_s"] + plan["warmup_max_s"],
        memory_limit_mb=plan["memory_limit_mb"],
        on_event=forward,
        cancel=cancel,
    )
    if not outcome.ok:
        findings.append(_finding_from(outcome, "latency", runtime))
        return None
    return outcome.result


def measure_sustained(
    model, golden, plan, runtime, root: Path, emit: EventSink, cancel, findings, idle_c=None
) -> dict:
    """Closed-loop inference in windows, with telemetry sampled at 1 Hz by this process.

    ``idle_c`` is the temperature before the run loaded the board: the cooldown waits
    to get back within 5 °C of it.
    """
    from .measure.sustained import (
        AgentTelemetry,
        score_windows,
        wait_for_cooldown,
        window_telemetry,
    )

    telemetry = AgentTelemetry.open(root)
    cooldown = {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
    if telemetry.has_temperature and plan["cooldown"]:
        emit({"type": "progress", "phase": "sustained", "message": "waiting for cooldown"})
        cooldown = wait_for_cooldown(
            telemetry.read_temp_c, idle_c, plan["cooldown_timeout_s"], cancel=cancel
        )
    duration = plan["sustain_s"]
    # soak: keep going past the planned duration (up to sustain_extend_to_s) while the
    # temperature still rises faster than 0.5 °C/min; the worker runs until told to stop.
    hard_limit_s = max(duration, plan["sustain_extend_to_s"] or 0.0)
    extended = False
    window_s = sustain_window_s(plan)
    trip_c = telemetry.trip_c
    max_c = plan["max_temp_c"]
    windows: list[dict] = []
    stop_reason = None
    t_begin = time.monotonic()

    def on_event(event: dict) -> None:
        if event.get("event") != "window":
            return
        w = {
            k: event[k]
            for k in ("index", "t0", "t1", "count", "rate_per_s", "p50_ms", "p90_ms", "partial")
        }
        w.update(window_telemetry(w, telemetry.samples(), trip_c))
        windows.append(w)
        emit(
            {
                "type": "progress",
                "phase": "sustained",
                "done": round(w["t1"] - t_begin, 1),
                "total": duration,
                "rate_per_s": round(w["rate_per_s"], 2),
                "temp_c": w.get("max_temp_c"),
            }
        )

    telemetry.start()
    worker = Worker(
        _job(
            "sustain",
            model,
            golden,
            plan,
            runtime,
            sustain={"duration_s": hard_limit_s, "window_s": window_s},
        ),
        phase_timeout_s=plan["phase_timeout_s"] + hard_limit_s,
        memory_limit_mb=plan["memory_limit_mb"],
        on_event=on_event,
        cancel=cancel,
    )
    worker.start()
    watcher_done = threading.Event()

    def watch_temperature() -> None:
        nonlocal stop_reason, extended
        while not watcher_done.wait(1.0):
            temp = telemetry.latest_temp_c()
            if max_c is not None and temp is not None and temp >= max_c:
                stop_reason = f"stopped early: {temp:.1f} °C reached the maximum {max_c:g} °C"
                worker.request_stop()
                return
            if hard_limit_s > duration and time.monotonic() - t_begin >= duration:
                slope = telemetry.slope_c_per_min(last_s=60.0)
                if slope is None or slope <= 0.5:
                    worker.request_stop()
                    return
                extended = True

    threading.Thread(target=watch_temperature, daemon=True).start()
    try:
        outcome = worker.wait()
    finally:
        watcher_done.set()
        samples = telemetry.stop()
    result: dict = {
        "duration_s": duration,
        "window_s": window_s,
        "cooldown": cooldown,
        "trip_c": trip_c,
        "max_temp_c_limit": max_c,
        "telemetry": telemetry.describe(),
    }
    if not outcome.ok:
        findings.append(_finding_from(outcome, "sustained", runtime))
        result.update(
            {"windows_detail": windows, "verdict": "failed", "reason": outcome.describe()}
        )
        return result
    started_at = outcome.result["started_at"]
    score = score_windows(windows, started_at)
    if trip_c is not None and score.get("peak_temp_c") is not None:
        score["headroom_c"] = round(trip_c - score["peak_temp_c"], 2)
    result.update(score)
    result["windows_detail"] = windows
    result["loop_started_monotonic_s"] = (
        started_at  # CLOCK_MONOTONIC: aligns with the board's own logs
    )
    result["telemetry_samples"] = [{**s, "t": round(s["t"] - started_at, 3)} for s in samples]
    if stop_reason:
        result["stopped_early"] = stop_reason
    if extended:
        result["extended_to_s"] = round(windows[-1]["t1"] - started_at, 1) if windows else None
    return result


def decide_status(results: dict, findings: list[dict]) -> tuple[str, str | None]:
    """passed, degraded or failed, with the reason for anything but passed.

    failed: a phase could not complete (rejection, crash, timeout), drift out of
    tolerance, or a failed sustained verdict. degraded: latency never steadied or the
    sustained verdict is degraded.
    """
    if findings:
        return "failed", findings[0]["message"]
    drift = results.get("drift")
    if drift is not None and not drift.get("passed", True):
        return "failed", drift.get("reason") or "outputs drifted beyond tolerance"
    sustained = results.get("sustained")
    if sustained and sustained.get("verdict") == "failed":
        return (
            "failed",
            f"sustained verdict failed: {sustained.get('reason') or 'stability below 0.90'}",
        )
    reasons = []
    for entry in (results.get("latency") or {}).get("per_shape", []):
        if not entry["warmup"]["steady"]:
            reasons.append(f"latency for {entry['shape']} never reached a steady state")
    if sustained and sustained.get("verdict") == "degraded":
        reasons.append("sustained throughput degraded or throttled")
    if reasons:
        return "degraded", "; ".join(reasons)
    return "passed", None


def exit_code_for(status: str, findings: list[dict]) -> int:
    """The CLI exit code of a finished measurement.

    0 passed or degraded; 2 when the model file itself was rejected (a bad input
    file); 3 when the run could not finish (incomplete); 1 for any other failure.
    """
    if status in ("passed", "degraded"):
        return 0
    if status == "incomplete":
        return 3
    if findings and findings[0].get("kind") == "model_rejected":
        return 2
    return 1


def run_measurement(
    model_path: Path,
    golden_path: Path | None,
    plan: dict,
    *,
    root: Path = Path("/"),
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
    model_name: str | None = None,
) -> dict:
    """Run every planned phase and return ``{plan, fingerprint, results, findings, status, reason}``."""
    emit = on_event or (lambda e: None)
    cancel = cancel or threading.Event()
    plan = validate_plan(plan)
    model_path = Path(model_path)
    if not model_path.is_file():
        raise BadInput(f"model file not found: {model_path}")
    if golden_path is not None and not Path(golden_path).is_file():
        raise BadInput(f"golden set not found: {golden_path}")
    runtime = runtime_for(model_path, plan["runtime"], model_name)
    findings: list[dict] = []
    results: dict = {"schema": RESULTS_SCHEMA}
    t_start = time.time()

    emit({"type": "phase", "phase": "fingerprint", "state": "started"})
    fingerprint = probe_fingerprint(root)
    # The board's temperature before this run loaded it: the sustained phase's cooldown target.
    idle_c = read_thermal(root)["authoritative_temp_c"] if plan["sustain_s"] > 0 else None
    fingerprint.setdefault("agent_version", __version__)
    fingerprint.setdefault("python", platform.python_version())
    fingerprint.setdefault("python_executable", sys.executable)
    emit({"type": "phase", "phase": "fingerprint", "state": "done"})

    phases = [
        (
            "cold_load",
            lambda: measure_cold_load(
                model_path, golden_path, plan, runtime, emit, cancel, findings
            ),
        ),
        (
            "latency",
            lambda: measure_warm(model_path, golden_path, plan, runtime, emit, cancel, findings),
        ),
    ]
    if plan["sustain_s"] > 0:
        phases.append(
            (
                "sustained",
                lambda: measure_sustained(
                    model_path, golden_path, plan, runtime, root, emit, cancel, findings, idle_c
                ),
            )
        )
    for name, run in phases:
        if findings or cancel.is_set():
            break
        emit({"type": "phase", "phase": name, "state": "started"})
        value = run()
        emit({"type": "phase", "phase": name, "state": "done"})
        if value is None:
            continue
        if name == "latency":
            results["runtime"] = value["runtime"]
            results["model_io"] = {"inputs": value["inputs"], "outputs": value["outputs"]}
            results["latency"] = {"per_shape": value["latency"]}
            results["memory"] = value["memory"]
            if "drift" in value:
                results["drift"] = value["drift"]
        else:
            results[name] = value
    results["elapsed_s"] = round(time.time() - t_start, 3)
    if cancel.is_set():
        status, reason = "incomplete", "cancelled"
    else:
        status, reason = decide_status(results, findings)
    return {
        "plan": plan,
        "fingerprint": fingerprint,
        "results": results,
        "findings": findings,
        "status": status,
        "reason": reason,
    }
