"""The worker: a child process that loads and runs one model (crash isolation).

Started with exec (``python -m edgequal.agent.worker``) by the supervisor, in its
own process group. It is plumbing only: it reads one job (``jobs.WorkerJob``, JSON)
on stdin, loads the runtime, calls the measurement code in ``measure/`` and writes JSON-lines events
to the stdout it was given; the runtime's own prints go to stderr, so they cannot
corrupt the event stream. A model is hostile input: it is parsed and run only here.

Events: ``{"event": "phase", "phase": P, "state": "started"}``,
``{"event": "progress", ...}``, ``{"event": "window", ...}`` (sustained runs),
``{"event": "result", "result": {...}}`` or ``{"event": "error", "error": {...}}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
from edgequal.contract.runtimes import runtime_kind

from .divergence import run_divergence, run_kernel_path
from .io import (
    emit,
    first_feeds,
    involuntary_switches,
    keep_runtime,
    load_runtime,
    open_event_stream,
    own_schedstat,
    peak_rss_bytes,
    phase,
    read_golden_for,
    rss_bytes,
    synthesize_inputs,
    timed_output_check,
    warmed,
)
from .jobs import WorkerJob
from .pipeline import run_pipeline
from .scenarios import (
    run_batch_sweep,
    run_operators,
    run_providers,
    run_server,
    run_thread_scaling,
    with_own_contention,
)

_stop_requested = False


def evict_page_cache(path: Path) -> dict:
    """Drop the model file's pages from the page cache so the load reads from storage.

    POSIX_FADV_DONTNEED is advisory: pages mapped by another process stay cached.
    The result says what was done, not a guess at what the kernel did.
    """
    if not hasattr(os, "posix_fadvise"):
        return {"evicted": False, "method": None, "reason": "posix_fadvise not available"}
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError as e:
        return {"evicted": False, "method": "posix_fadvise", "reason": str(e)}
    return {"evicted": True, "method": "posix_fadvise(DONTNEED)"}


def _input_contract_mismatches(job: WorkerJob, rt) -> list[dict]:
    """The golden set's input contract against the model's declared inputs ([] without one)."""
    if not job.golden:
        return []
    from edgequal.contract.golden import read_golden
    from edgequal.contract.input_contract import contract_mismatches

    pre = read_golden(Path(job.golden)).preprocessing
    return contract_mismatches(pre, rt.inputs()) if pre is not None else []


def run_cold_load(job: WorkerJob) -> dict:
    """Cold load: runtime import, session creation, first inference, all in this fresh process."""
    from ..runtimes import runtime_class

    t_start = time.perf_counter_ns()
    model = Path(job.model)
    eviction = (
        evict_page_cache(model)
        if job.evict_page_cache
        else {"evicted": False, "reason": "not asked"}
    )
    phase("import")
    cls = runtime_class(job.runtime)
    t0 = time.perf_counter_ns()
    cls.import_module()
    t1 = time.perf_counter_ns()
    rss_before = rss_bytes()
    phase("load")
    rt = cls(job.runtime_options())
    rt.load(model)
    t2 = time.perf_counter_ns()
    rss_loaded = rss_bytes()
    if job.keep:
        keep_runtime(job, rt, rss_before, rss_loaded)
    mismatches = _input_contract_mismatches(job, rt)
    if mismatches:  # checked before the golden inputs are fed: they may not even fit
        return {"input_contract": mismatches}
    from .pipeline import cold_path

    path = cold_path(job, rt)  # with a pipeline, the first decode and preprocess come first
    feeds = path[0] if path is not None and path[0] is not None else first_feeds(job, rt)
    phase("first_inference")
    t3 = time.perf_counter_ns()
    outputs = rt.run(feeds)
    t4 = time.perf_counter_ns()
    from ..measure.drift import nonfinite_counts

    pipeline = {"pipeline": path[1]} if path is not None else {}
    return {
        **pipeline,
        "nonfinite_outputs": nonfinite_counts(outputs),
        "import_ms": (t1 - t0) / 1e6,
        "load_ms": (t2 - t1) / 1e6,
        "first_inference_ms": (t4 - t3) / 1e6,
        "total_ms": (t4 - t_start) / 1e6,
        "page_cache": eviction,
        "rss_before_load_bytes": rss_before,
        "rss_added_by_load_bytes": rss_loaded - rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
        "runtime": rt.describe(),
    }


def run_warm(job: WorkerJob) -> dict:
    """Warm latency per input shape (``measure.latency``), drift over the golden set, memory."""
    from edgequal.contract.tensors import shape_key

    from ..measure.drift import measure_drift
    from ..measure.latency import measure_latency

    rt, rss_before, rss_loaded = load_runtime(job)
    golden = read_golden_for(job, rt)
    if golden is not None:
        groups = {key: cases[0] for key, cases in golden.shape_groups().items()}
    else:
        feeds = synthesize_inputs(rt.inputs(), job.shapes or {}, job.seed)
        groups = {shape_key(feeds): None}

    def feeds_of(case) -> dict:
        return case.inputs if case is not None else feeds

    if job.coload_pgids:
        from ..measure.coload import interleaved_latency

        switch = coload_switch(job.coload_pgids)
        latency = [
            {
                "shape": key,
                **interleaved_latency(
                    rt.bind(feeds_of(case)),
                    job.latency,
                    job.coload_rounds,
                    switch,
                    on_phase=phase,
                    sched=own_schedstat,
                ),
            }
            for key, case in groups.items()
        ]
    else:
        latency = []
        for key, case in groups.items():
            call = rt.bind(feeds_of(case))
            sampler, finish = timed_output_check(rt, call, golden, case)
            entry = {
                "shape": key,
                **measure_latency(
                    call,
                    job.latency,
                    on_phase=phase,
                    sched=own_schedstat,
                    switches=involuntary_switches if job.latency.preemption_tags else None,
                    sampler=sampler,
                ),
            }
            if finish is not None:  # after the loop: the comparison is never timed
                entry["timed_outputs"] = finish(
                    entry["summary"]["count"], entry["loop_monotonic_s"][0]
                )
            latency.append(entry)
    result = {
        "runtime": rt.describe(),
        "inputs": [s.to_dict() for s in rt.inputs()],
        "outputs": [s.to_dict() for s in rt.outputs()],
        "latency": latency,
    }
    if golden is not None and golden.pipeline is None:  # with one, the whole path's drift
        phase("drift")
        kept: dict | None = {} if golden.labels is not None else None
        result["drift"] = measure_drift(rt, golden, keep=kept)
        if kept is not None:
            from ..measure.labelled import labelled_of_golden

            result["drift"]["labelled"] = labelled_of_golden(golden, kept)
    lister = runtime_kind(job.runtime).operator_types
    if lister is not None:
        result["int8_form"] = _int8_form(Path(job.model), lister)
    result["memory"] = {
        "rss_before_load_bytes": rss_before,
        "rss_added_by_load_bytes": rss_loaded - rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    return result


def _int8_form(model: Path, lister: str) -> str | None:
    """The model's int8 form (``measure.quantization``), from its graph's operator types as
    the runtime's ``operator_types`` lister (``module:function``) reads them."""
    import importlib

    from ..measure.quantization import quantization_form

    module, function = lister.split(":")
    model_op_types = getattr(importlib.import_module(f"edgequal.agent.runtimes.{module}"), function)
    ops = model_op_types(model)
    return quantization_form(ops) if ops is not None else None


def run_drift(job: WorkerJob) -> dict:
    """Drift over the golden set alone, at the job's graph optimisation level (the
    optimisation check measures it once more with optimisation off)."""
    from ..measure.drift import measure_drift

    rt, _, _ = load_runtime(job)
    golden = read_golden_for(job, rt)
    phase("drift")
    return {"runtime": rt.describe(), "drift": measure_drift(rt, golden)}


def coload_switch(pgids):
    """Pause (SIGSTOP) or resume (SIGCONT) the declared co-load's process groups.

    A co-load that has gone cannot be resumed: the agent reports its end from its own
    side (its worker's outcome), so a missing group is not an error here.
    """

    def switch(on: bool) -> None:
        for pgid in pgids:
            try:
                os.killpg(pgid, signal.SIGCONT if on else signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass

    return switch


def run_coload(job: WorkerJob) -> dict:
    """A declared co-load (``loadgen``): report a running total until asked to stop (SIGTERM)."""
    from .loadgen import cpu_loop, membw_loop, model_loop

    signal.signal(signal.SIGTERM, _request_stop)
    settings = job.coload

    def report(count: float) -> None:
        emit({"event": "coload", "t": time.monotonic(), "count": count})

    def stop() -> bool:
        return _stop_requested

    every = settings.report_every_s
    if settings.load == "model":
        rt, _, _ = load_runtime(job)
        call = warmed(rt.bind(first_feeds(job, rt)))
        phase("ready")
        model_loop(call, settings.rate_per_s, report, stop, every)
        return {"load": "model", "runtime": rt.describe()}
    phase("ready")
    if settings.load == "cpu":
        cpu_loop(settings.share, report, stop, every)
    else:
        membw_loop(settings.share, settings.buffer_mb, report, stop, every)
    return {"load": settings.load}


# An edge shape's warm-up: a few runs, then rounds until steady for at most half its seconds.
EDGE_WARMUP_RUNS = 3
EDGE_MAX_RUNS = 100_000


def edge_feeds(job: WorkerJob, rt) -> dict:
    """The inputs of one edge shape: the inputs it names synthesized at its sizes (0 allowed),
    the others at the main shape (golden case 0's arrays, else synthesized at ``job.shapes``)."""
    edge = job.edge
    golden = read_golden_for(job, rt)
    base = golden.cases[0].inputs if golden is not None else {}
    specs = rt.inputs()
    feeds = {name: a for name, a in base.items() if name not in edge.shapes}
    others = [s for s in specs if s.name not in edge.shapes and s.name not in feeds]
    feeds.update(synthesize_inputs(others, job.shapes or {}, job.seed))
    named = [s for s in specs if s.name in edge.shapes]
    feeds.update(synthesize_inputs(named, edge.shapes, job.seed))
    return {s.name: feeds[s.name] for s in specs}


def run_edge_shape(job: WorkerJob) -> dict:
    """One edge of the input range in this fresh process: a successful run, then latency
    (``measure_latency``: a short warm-up, then ``seconds`` and ``min_runs``), peak RSS,
    RSS added since the load, and the output shapes.

    The runtime refusing the shape is a result (``ok: false``, ``cause: error``, naming
    the input), not a crash; a crash, hang or memory kill is the supervisor's to report.
    """
    from edgequal.contract.golden import edge_shape_misfit

    from ..measure.latency import LatencySettings, measure_latency

    edge = job.edge
    first = next(iter(edge.shapes))

    def failed(cause: str, message: str, name: str = first) -> dict:
        shape = edge.shapes.get(name)
        return {"ok": False, "cause": cause, "message": message, "input": name, "shape": shape}

    rt, _, rss_loaded = load_runtime(job)
    misfit = edge_shape_misfit(edge.shapes, rt.inputs())
    if misfit is not None:
        return failed("error", misfit["message"], misfit["input"])
    try:
        feeds = edge_feeds(job, rt)
        phase("first_run")
        outputs = rt.run(feeds)
        call = rt.bind(feeds)
        settings = LatencySettings(
            warmup_min_runs=EDGE_WARMUP_RUNS,
            warmup_min_s=0.0,
            warmup_max_s=edge.seconds / 2,
            min_runs=edge.min_runs,
            min_s=edge.seconds,
            max_runs=max(edge.min_runs, EDGE_MAX_RUNS),
        )
        timed = measure_latency(call, settings, on_phase=phase)
    except MemoryError:
        return failed("memory", "out of memory (MemoryError in the worker)")
    except Exception as e:  # the runtime's own error for this shape (any exception type)
        text = (str(e).strip().splitlines() or [type(e).__name__])[0][:400]
        return failed("error", f"{rt.name} failed: {text}")
    rss_after = rss_bytes()
    return {
        "ok": True,
        "runs": timed["summary"]["count"],
        "summary": timed["summary"],
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_added_by_inference_bytes": rss_after - rss_loaded,
        "outputs": {name: [int(d) for d in np.shape(a)] for name, a in outputs.items()},
    }


def run_env_segments(job: WorkerJob) -> dict:
    """One runtime environment's side of an interleaved comparison (``phases/runtime_envs.py``).

    Loads the model once and warms up, emits ``{"event": "ready"}``, then reads
    commands from stdin, one JSON line each: ``{"cmd": "segment", "index", "runs",
    "seconds", "max_runs", "settle_s"}`` runs ``settle_s`` of untimed calls (this
    worker sat idle while the others measured), then times one segment
    (``latency.time_loop_ns``) and emits ``{"event": "segment", ...}`` with its raw
    samples; ``{"cmd": "finish", "outputs_path"}`` runs every golden case once (drift
    against the reference outputs) and saves the outputs there, so the agent can compare
    environments with each other. Without a golden set the synthesized input is the one case.
    """
    from edgequal.contract.tensors import shape_key

    from ..measure.drift import measure_drift
    from ..measure.latency import encode_samples, time_loop_ns, warm_up

    rt, rss_before, rss_loaded = load_runtime(job)
    golden = read_golden_for(job, rt)
    if golden is not None:
        key, cases = next(iter(golden.shape_groups().items()))
        feeds = cases[0].inputs
    else:
        feeds = synthesize_inputs(rt.inputs(), job.shapes or {}, job.seed)
        key = shape_key(feeds)
    call = rt.bind(feeds)
    phase("warmup")
    warm = warm_up(call, job.latency)
    warm.pop("median_ns")
    emit({"event": "ready", "shape": key})
    finish = None
    while finish is None:
        line = sys.stdin.readline()
        if not line:
            from edgequal.contract.errors import WorkerFailed

            raise WorkerFailed("the agent closed the command stream before finishing")
        cmd = json.loads(line)
        if cmd.get("cmd") == "finish":
            finish = cmd
            break
        phase(f"segment {cmd['index']}")
        settle_until = time.monotonic() + float(cmd.get("settle_s", 0.0))
        while time.monotonic() < settle_until:
            call()
        samples = np.empty(int(cmd["max_runs"]), dtype=np.int64)
        before = own_schedstat()
        t0 = time.monotonic()
        n = time_loop_ns(call, samples, int(cmd["runs"]), float(cmd["seconds"]))
        t1 = time.monotonic()
        after = own_schedstat()
        emit(
            {
                "event": "segment",
                "index": cmd["index"],
                "runs": n,
                "t0": t0,
                "t1": t1,
                "sched_ns": (
                    [after[0] - before[0], after[1] - before[1]] if before and after else None
                ),
                "samples_ns_b64": encode_samples(samples[:n]),
            }
        )
    phase("drift")
    kept: dict = {}
    result = {
        "runtime": rt.describe(),
        "shape": key,
        "warmup": warm,
        "inputs": [s.to_dict() for s in rt.inputs()],
        "outputs": [s.to_dict() for s in rt.outputs()],
    }
    if golden is not None:
        result["drift"] = measure_drift(rt, golden, keep=kept)
    else:
        kept["synthetic"] = rt.run(feeds)
    names = list(kept)
    arrays = {
        f"c{i}_{j}": np.asarray(value)
        for i, case in enumerate(names)
        for j, value in enumerate(kept[case].values())
    }
    np.savez(finish["outputs_path"], **arrays)
    result["saved_outputs"] = [
        {"case": case, "outputs": {o: f"c{i}_{j}" for j, o in enumerate(kept[case])}}
        for i, case in enumerate(names)
    ]
    result["memory"] = {
        "rss_before_load_bytes": rss_before,
        "rss_added_by_load_bytes": rss_loaded - rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    return result


def _request_stop(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


_windows_added = 0


def _add_window(signum, frame) -> None:
    global _windows_added
    _windows_added += 1


def run_sustained(job: WorkerJob) -> dict:
    """The closed loop of ``measure.sustained``, each window emitted as it closes.

    SIGTERM ends the run early and cleanly: the window in progress is reported as partial.
    SIGUSR1 asks for one window more than planned (one that interference took is replaced).
    """
    from ..measure.sustained import closed_loop

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGUSR1, _add_window)
    rt, _, _ = load_runtime(job)
    golden = read_golden_for(job, rt)
    case = golden.cases[0] if golden is not None else None  # first_feeds' input, read once
    call = rt.bind(case.inputs if case is not None else first_feeds(job, rt))
    sampler, finish = timed_output_check(rt, call, golden, case)
    for _ in range(3):
        call()
    phase("sustain")
    result = closed_loop(
        call,
        job.sustain.duration_s,
        job.sustain.window_s,
        on_window=lambda window: emit({"event": "window", **window}),
        stop_requested=lambda: _stop_requested,
        sched=own_schedstat,
        windows_added=lambda: _windows_added,
        sampler=sampler,
    )
    if finish is not None:  # after the loop: the comparison is never timed
        result["timed_outputs"] = finish(result["calls"], result["started_at"])
    return result


JOBS = {
    "cold_load": run_cold_load,
    "warm": run_warm,
    "sustained": run_sustained,
    "batch_sweep": with_own_contention(run_batch_sweep),
    "thread_scaling": with_own_contention(run_thread_scaling),
    "server": with_own_contention(run_server),
    "operators": run_operators,
    "providers": run_providers,
    "coload": run_coload,
    "edge_shape": run_edge_shape,
    "env_segments": run_env_segments,
    "pipeline": run_pipeline,
    "drift": run_drift,
    "kernel_path": run_kernel_path,
    "divergence": run_divergence,
}


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when the agent dies (PR_SET_PDEATHSIG).

    The worker lives in its own session so the agent can kill its whole group; without
    this, a worker of a killed agent would run on and disturb the next measurement.
    The supervisor's thread waits for the worker, so the parent thread outlives it.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the supervisor's own kill is all there is


def main() -> int:
    """Read the job from stdin, run it, emit a result or a structured error."""
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the agent died before the request took effect
        return 1
    open_event_stream()
    line = sys.stdin.readline()
    while line.strip():  # a job that keeps the process is followed by one more, or EOF
        job = WorkerJob.from_json(json.loads(line))
        if not run_one(job) or not job.keep:
            break
        line = sys.stdin.readline()
    return 0


def run_one(job: WorkerJob) -> bool:
    """Run one job; emit its result (True) or a structured error (False)."""
    from edgequal.contract.errors import AgentError

    try:
        result = JOBS[job.kind](job)
    except AgentError as e:
        emit(
            {
                "event": "error",
                "error": {
                    "type": type(e).__name__,
                    "message": str(e),
                    "hint": e.hint,
                    "operator": getattr(e, "operator", None),
                },
            }
        )
        return False
    except MemoryError:
        emit(
            {
                "event": "error",
                "error": {"type": "MemoryError", "message": "out of memory (memory limit reached)"},
            }
        )
        return False
    emit({"event": "result", "result": result})
    return True
