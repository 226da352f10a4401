"""The warm latency phase: one worker (the cold load's last, kept with its model loaded,
where there is one) times each input shape, checks the timed outputs, measures drift over
the golden set and memory; the agent samples the competition for CPU over the same span
and, with a declared co-load, runs it in alternating segments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgequal.contract.plan import Plan, loop_limit_s
from edgequal.contract.preemption import decided_on_clean, decisive_summary, preemption_evidence

from ..measure.attribution import (
    contention_between,
    contention_over,
    declared_cpus,
    interference_present,
)
from ..measure.coload import coload_cause
from ..measure.timed_outputs import phase_timed_outputs, place_mismatches
from ..worker.jobs import WorkerJob, latency_settings
from .coload import coload_finding, start_for_phase
from .workers import EventSink, finding_from, run_sampled

# A latency phase whose p99 (p95 with too few samples for p99) is above this many
# times its median has a heavy tail worth explaining.
HEAVY_TAIL_RATIO = 3.0


def latency_cause(entry: dict) -> str:
    """The cause behind a latency shape's figures: ``none``, ``interference`` or ``unexplained``.

    ``interference`` whenever the worker waited for a CPU, time was stolen or other
    processes took the CPU in the loop's span, steady or not, so a busy neighbour is
    never ``none``; else ``none`` when steady with a light tail, else ``unexplained``.
    A tagged shape (``preemption``) is judged on its decisive figures (the clean calls
    when they were enough); an untagged one (the plain segments of a co-load run, whose
    evidence covers those segments only) on all its calls.
    """
    summary = decisive_summary(entry)
    tail = summary.get("p99_ms") or summary.get("p95_ms")
    heavy = bool(tail and summary.get("p50_ms") and tail > HEAVY_TAIL_RATIO * summary["p50_ms"])
    entry["heavy_tail"] = heavy
    present = bool(interference_present(entry.get("interference")))
    if "preemption" in entry:
        entry["decided_on"] = "clean" if decided_on_clean(entry) else "all"
        entry["preemption"]["evidence"] = preemption_evidence(entry.get("interference"))
    if present:
        return "interference"
    return "none" if entry["warmup"]["steady"] and not heavy else "unexplained"


def _with_coload_evidence(result: dict, run, samples, sampler, findings, runtime) -> dict:
    """Contention per condition for each shape, the co-load's achieved rate, its causes.

    The plain segments are judged as any latency loop (the co-load was paused); the
    co-load segments only on what was not declared: other processes' CPU and steal,
    since waiting behind the declared co-load is what the run set out to measure.
    """
    ticks, cpus = sampler.clock_ticks_per_s, sampler.cpu_count
    loaded_spans = []
    for entry in result["latency"]:
        segments = entry.pop("segments")
        by = {c: [s for s in segments if s["coload"] is c] for c in (False, True)}
        entry["interference"] = contention_over(samples, by[False], cpus, ticks)
        entry["cause"] = latency_cause(entry)
        loaded = entry["coload"]
        loaded["interference"] = contention_over(samples, by[True], cpus, ticks)
        loaded["cause"] = coload_cause(loaded)
        loaded["segments"] = [
            {k: s[k] for k in ("round", "coload", "runs", "p50_ms")} for s in segments
        ]
        # The co-load ran from its resume (settle included) to the segment's end.
        loaded_spans += [(s["switched"], s["t1"]) for s in by[True]]
    loaded_s = sum(t1 - t0 for t0, t1 in loaded_spans)
    result["coload_latency"] = run.achieved(
        loaded_spans, declared_cpus(samples, run.pgids, ticks, loaded_s)
    )
    ended = run.ended_early()
    if ended:
        findings.append(coload_finding("latency", ended, runtime))
    return result


def measure_warm(
    model,
    golden,
    plan: Plan,
    runtime,
    emit: EventSink,
    cancel,
    findings,
    coload=None,
    root: Path = Path("/"),
    kept=None,
) -> dict | None:
    """One worker: warm-up, latency per input shape, drift over the golden set, memory;
    ``kept``: the cold load's last worker, its model loaded (``measure_cold_load``).

    Each shape's latency loop gets the contention measured over the same span
    (``interference``) and a ``cause`` when it was unsteady or heavy-tailed. With a
    declared co-load (``coload``: ``coload.Load`` s) the loop alternates plain and
    co-load segments (``measure.coload``), the worker pausing and resuming the co-load.
    With a golden set the board's temperature is sampled at 1 Hz from ``root`` (this
    process, never the worker; sysfs files only, no command) so a timed output that
    changed is placed with the temperature at that moment (``timed_outputs``).
    """
    from ..probes.telemetry import BoardTelemetry

    settings = latency_settings(plan)

    def forward(event: dict) -> None:
        if event.get("event") == "phase":
            emit({"type": "progress", "phase": "latency", "message": event["phase"]})

    job = WorkerJob.for_phase("warm", model, golden, plan, runtime, latency=settings)
    job = replace(job, probe_root=str(root))
    checking = golden is not None and not coload  # the worker checks timed outputs
    telemetry = BoardTelemetry.open(root, commands=False) if checking else None
    # The timed loop may run on to its limit while clean calls are short (measure/latency.py).
    timeout_s = (
        plan.phase_timeout_s
        + loop_limit_s(plan.latency_min_s, plan.latency_max_s, plan.latency_max_extension)
        + plan.warmup_max_s
    )
    run = None
    if coload:
        run = start_for_phase(coload, plan, cancel, emit, findings, runtime, "latency", paused=True)
        if run is None:
            return None
        job = replace(job, coload_pgids=tuple(run.pgids), coload_rounds=plan.coload_rounds)
        timeout_s += plan.latency_min_s
    if telemetry is not None:
        telemetry.start()
    try:
        ended, samples, sampler = run_sampled(
            job,
            declared_pgids=run.pgids if run else (),
            kept=kept,
            phase_timeout_s=timeout_s,
            memory_limit_mb=plan.memory_limit_mb,
            on_event=forward,
            cancel=cancel,
        )
    finally:
        temps = telemetry.stop() if telemetry is not None else []
        if run is not None:
            run.stop()
    if not ended.ok:
        findings.append(finding_from(ended, "latency", runtime))
        return None
    if run is not None:
        return _with_coload_evidence(ended.result, run, samples, sampler, findings, runtime)
    for entry in ended.result["latency"]:
        t0, t1 = entry.pop("loop_monotonic_s")
        entry["interference"] = contention_between(
            samples,
            t0,
            t1,
            sampler.cpu_count,
            sampler.clock_ticks_per_s,
            entry.pop("sched_ns"),
        )
        entry["cause"] = latency_cause(entry)
    checked = [
        {"shape": e["shape"], **e.pop("timed_outputs")}
        for e in ended.result["latency"]
        if "timed_outputs" in e
    ]
    if checked:
        sensor = telemetry.has_temperature
        ended.result["timed_outputs"] = phase_timed_outputs(
            [place_mismatches(c, temps, sensor=sensor) for c in checked]
        )
    return ended.result
