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
import resource
import signal
import sys
import time
from pathlib import Path

import numpy as np

from .jobs import WorkerJob

_out = None  # the event stream (the original stdout)
_stop_requested = False


def emit(event: dict) -> None:
    """Write one event line and flush it, so the supervisor sees progress as it happens."""
    _out.write(json.dumps(event, allow_nan=False, default=_json_default) + "\n")
    _out.flush()


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def phase(name: str) -> None:
    """Announce a phase: the supervisor's per-phase timeout restarts here."""
    emit({"event": "phase", "phase": name, "state": "started"})


def rss_bytes() -> int:
    """Resident set size of this process now, from /proc (no psutil needed in the worker)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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


def synthesize_inputs(specs, shapes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs made from the model's specs; dynamic dims must come from ``shapes``."""
    from .errors import BadInput

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        if spec.name in shapes:
            shape = [int(d) for d in shapes[spec.name]]
        elif spec.is_dynamic:
            fixed = [isinstance(d, int) and d >= 0 for d in spec.shape]
            marked = ", ".join(
                str(d) if ok else f"{d if isinstance(d, str) else ''}?"
                for d, ok in zip(spec.shape, fixed)
            )
            # An example to edit: 1 for a leading (batch) dim, 224 for other dynamic dims.
            example = "x".join(
                str(d) if ok else ("1" if i == 0 else "224")
                for i, (d, ok) in enumerate(zip(spec.shape, fixed))
            )
            raise BadInput(
                f"input '{spec.name}' has dynamic dimensions: {spec.dtype} [{marked}] "
                "(the dims marked ? need sizes)",
                hint=f"pass sizes, e.g. --shape {spec.name}={example}, or a golden set",
            )
        else:
            shape = [int(d) for d in spec.shape]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            a = rng.random(shape, dtype=np.float32).astype(dtype)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            lo, hi = (max(info.min, -128), min(info.max, 127)) if spec.quantization else (1, 4)
            a = rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
        elif dtype.kind == "b":
            a = rng.random(shape) < 0.5
        else:
            raise BadInput(
                f"cannot synthesize input '{spec.name}' of type {spec.dtype}",
                hint="use a golden set",
            )
        feeds[spec.name] = a
    return feeds


def own_schedstat() -> tuple[int, int] | None:
    """This worker's CPU time and run-queue wait (ns) over all its threads, from /proc."""
    from .probes.contention import read_worker_schedstat

    return read_worker_schedstat(Path("/proc"), os.getpid())


def load_runtime(job: WorkerJob):
    """Import the job's runtime and load its model: ``(runtime, rss_before_load, rss_after_load)``."""
    from .runtimes import runtime_class

    cls = runtime_class(job.runtime)
    cls.import_module()
    rss_before = rss_bytes()
    phase("load")
    rt = cls(job.runtime_options())
    rt.load(Path(job.model))
    return rt, rss_before, rss_bytes()


def _read_golden(job: WorkerJob, rt):
    if not job.golden:
        return None
    from .golden import read_golden

    golden = read_golden(Path(job.golden))
    golden.check_against(rt.inputs())
    return golden


def _input_contract_mismatches(job: WorkerJob, rt) -> list[dict]:
    """The golden set's input contract against the model's declared inputs ([] without one)."""
    if not job.golden:
        return []
    from .golden import read_golden
    from .input_contract import contract_mismatches

    pre = read_golden(Path(job.golden)).preprocessing
    return contract_mismatches(pre, rt.inputs()) if pre is not None else []


def _first_feeds(job: WorkerJob, rt) -> dict:
    golden = _read_golden(job, rt)
    if golden is not None:
        return golden.cases[0].inputs
    return synthesize_inputs(rt.inputs(), job.shapes or {}, job.seed)


def run_cold_load(job: WorkerJob) -> dict:
    """Cold load: runtime import, session creation, first inference, all in this fresh process."""
    from .runtimes import runtime_class

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
    mismatches = _input_contract_mismatches(job, rt)
    if mismatches:  # checked before the golden inputs are fed: they may not even fit
        return {"input_contract": mismatches}
    feeds = _first_feeds(job, rt)
    phase("first_inference")
    t3 = time.perf_counter_ns()
    outputs = rt.run(feeds)
    t4 = time.perf_counter_ns()
    from .measure.drift import nonfinite_counts

    return {
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
    from .measure.drift import measure_drift
    from .measure.latency import measure_latency
    from .runtimes.base import shape_key

    rt, rss_before, rss_loaded = load_runtime(job)
    golden = _read_golden(job, rt)
    if golden is not None:
        groups = {key: cases[0].inputs for key, cases in golden.shape_groups().items()}
    else:
        feeds = synthesize_inputs(rt.inputs(), job.shapes or {}, job.seed)
        groups = {shape_key(feeds): feeds}
    if job.coload_pgids:
        from .measure.coload import interleaved_latency

        switch = coload_switch(job.coload_pgids)
        latency = [
            {
                "shape": key,
                **interleaved_latency(
                    rt.bind(feeds),
                    job.latency,
                    job.coload_rounds,
                    switch,
                    on_phase=phase,
                    sched=own_schedstat,
                ),
            }
            for key, feeds in groups.items()
        ]
    else:
        latency = [
            {
                "shape": key,
                **measure_latency(rt.bind(feeds), job.latency, on_phase=phase, sched=own_schedstat),
            }
            for key, feeds in groups.items()
        ]
    result = {
        "runtime": rt.describe(),
        "inputs": [s.to_dict() for s in rt.inputs()],
        "outputs": [s.to_dict() for s in rt.outputs()],
        "latency": latency,
    }
    if golden is not None:
        phase("drift")
        result["drift"] = measure_drift(rt, golden)
    result["memory"] = {
        "rss_before_load_bytes": rss_before,
        "rss_added_by_load_bytes": rss_loaded - rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    return result


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
        call = _warmed(rt.bind(_first_feeds(job, rt)))
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
    golden = _read_golden(job, rt)
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
    from .golden import edge_shape_misfit
    from .measure.latency import LatencySettings, measure_latency

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


def _request_stop(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


def run_sustained(job: WorkerJob) -> dict:
    """The closed loop of ``measure.sustained``, each window emitted as it closes.

    SIGTERM ends the run early and cleanly: the window in progress is reported as partial.
    """
    from .measure.sustained import closed_loop

    signal.signal(signal.SIGTERM, _request_stop)
    rt, _, _ = load_runtime(job)
    call = rt.bind(_first_feeds(job, rt))
    for _ in range(3):
        call()
    phase("sustain")
    return closed_loop(
        call,
        job.sustain.duration_s,
        job.sustain.window_s,
        on_window=lambda window: emit({"event": "window", **window}),
        stop_requested=lambda: _stop_requested,
        sched=own_schedstat,
    )


def online_cores() -> int:
    """CPUs online now (thread scaling sweeps 1..this; per-core throughput divides by it)."""
    try:
        return max(1, int(os.sysconf("SC_NPROCESSORS_ONLN")))
    except (ValueError, OSError):
        return os.cpu_count() or 1


def _warmed(call, runs: int = 3):
    for _ in range(runs):
        call()
    return call


def run_batch_sweep(job: WorkerJob) -> dict:
    """Throughput and latency per batch size (``measure.throughput``); a fixed batch is a reason."""
    from .measure.throughput import (
        batch_feeds,
        batch_point,
        best_batch,
        fixed_batch_reason,
        time_point,
    )

    rt, _, _ = load_runtime(job)
    reason = fixed_batch_reason(rt.inputs())
    if reason:
        return {"skipped": reason}
    base = _first_feeds(job, rt)
    cores = job.threads or online_cores()
    points = []
    for batch in job.scenario.batch_sizes or (1,):
        phase(f"batch {batch}")
        feeds = batch_feeds(base, batch)
        try:
            outputs = rt.run(feeds)
        except Exception as e:  # a runtime's own error for one size ends the sweep there
            points.append({"batch": batch, "error": str(e).strip().splitlines()[0][:300]})
            break
        first = next(iter(outputs.values()))
        items = int(first.shape[0]) if getattr(first, "ndim", 0) else 1
        call = _warmed(rt.bind(feeds))
        points.append(batch_point(time_point(call, job.scenario.seconds), batch, items, cores))
    timed = [p for p in points if "error" not in p]
    return {"cores": cores, "points": points, "best": best_batch(timed, cores)}


def run_thread_scaling(job: WorkerJob) -> dict:
    """Latency and throughput for 1..N intra-op threads, and the count the board should use."""
    from dataclasses import replace as with_changes

    from .measure.throughput import recommend_threads, thread_counts, time_point
    from .runtimes import runtime_class

    cls = runtime_class(job.runtime)
    cls.import_module()
    cores = online_cores()
    points = []
    feeds = None
    for threads in thread_counts(cores):
        phase(f"threads {threads}")
        rt = cls(with_changes(job.runtime_options(), threads=threads))
        rt.load(Path(job.model))
        feeds = feeds if feeds is not None else _first_feeds(job, rt)
        call = _warmed(rt.bind(feeds))
        points.append({"threads": threads, **time_point(call, job.scenario.seconds)})
        rt.close()
    return {"online_cores": cores, "points": points, "recommended": recommend_threads(points)}


SERVER_SWITCH_INTERVAL_S = 0.0002


def _wait_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def run_server(job: WorkerJob) -> dict:
    """MLPerf's server scenario (``measure.server``): Poisson arrivals served by several callers."""
    from .measure.server import (
        SEARCH_ABOVE_CAPACITY,
        capacity_per_s,
        default_p99_bound,
        poisson_arrivals_s,
        queries_for,
        run_open_loop,
        score_run,
        search_max_rate,
    )
    from .measure.throughput import time_point

    settings = job.scenario
    # A caller whose request arrives waits for the GIL up to the switch interval (5 ms by
    # default) before it can issue: that would be the generator's latency, not the model's.
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    rt, _, _ = load_runtime(job)
    feeds = _first_feeds(job, rt)
    callers = settings.server_callers
    runtimes = [rt] * callers
    if not rt.concurrent_calls:  # one interpreter per caller: LiteRT's is not thread-safe
        runtimes = [rt] + [load_runtime(job)[0] for _ in range(callers - 1)]
    calls = [_warmed(r.bind(feeds)) for r in runtimes]
    phase("server: single stream")
    single = time_point(calls[0], settings.seconds / 2)
    phase("server: capacity")
    per_call_s = max(single["mean_ms"] / 1e3, 1e-6)
    capacity = capacity_per_s(calls, max(64, int(callers * settings.seconds / 2 / per_call_s)))
    bound_ms, bound_source = default_p99_bound(single["p50_ms"])
    if settings.server_p99_ms:
        bound_ms, bound_source = settings.server_p99_ms, "plan"
    target = settings.server_rate_per_s or capacity / 2
    seeds = iter(range(job.seed, job.seed + 1000))

    def run_at(rate: float) -> dict:
        phase(f"server: {rate:.1f}/s")
        arrivals = poisson_arrivals_s(rate, queries_for(rate, settings.seconds), next(seeds))
        r = run_open_loop(calls, arrivals, _wait_until)
        return score_run(arrivals, r["start"], r["issued"], r["done"], bound_ms, rate)

    at_target = run_at(target)
    search = search_max_rate(
        run_at, 0.0, SEARCH_ABOVE_CAPACITY * capacity, settings.server_search_steps
    )
    return {
        "callers": callers,
        "single_stream": single,
        "capacity_per_s": round(capacity, 3),
        "p99_bound_ms": bound_ms,
        "p99_bound_source": bound_source,
        "target_rate_source": "plan" if settings.server_rate_per_s else "half the capacity",
        "at_target": at_target,
        **search,
    }


def run_operators(job: WorkerJob) -> dict:
    """Per-operator time from the runtime's profiler, CPU fallback, delegate coverage."""
    from .measure.operators import cpu_fallback, delegate_coverage, operator_profile

    rt, _, _ = load_runtime(job)
    feeds = _first_feeds(job, rt)
    out: dict = {"runtime": rt.describe()}
    phase("operators")
    runs = job.scenario.profile_runs
    events = rt.node_timings(feeds, runs)
    if events is not None:
        out["profile"] = operator_profile(events, runs)
        fallback = cpu_fallback(events, job.providers)
        if fallback is not None:
            out["cpu_fallback"] = fallback
    nodes = rt.graph_nodes()
    if nodes is not None:
        out["delegate"] = {"asked": "XNNPACK" if job.xnnpack else None, **delegate_coverage(nodes)}
    if events is None and nodes is None:
        out["skipped"] = f"{rt.name} reports neither operator times nor delegated nodes"
    return out


def run_providers(job: WorkerJob) -> dict:
    """The execution providers the runtime offers here (asked before a run uses any)."""
    from .runtimes import runtime_class

    cls = runtime_class(job.runtime)
    cls.import_module()
    return {"available": cls.available_providers(), "version": cls.version()}


def with_own_contention(run):
    """A scenario's run, with its span on CLOCK_MONOTONIC and this worker's CPU and run-queue
    wait over it (``span_monotonic_s``, ``sched_ns``), read outside anything timed."""

    def measured(job: WorkerJob) -> dict:
        before, t0 = own_schedstat(), time.monotonic()
        result = run(job)
        after, t1 = own_schedstat(), time.monotonic()
        sched = None
        if before is not None and after is not None:
            sched = [after[0] - before[0], after[1] - before[1]]
        return {**result, "span_monotonic_s": [t0, t1], "sched_ns": sched}

    return measured


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
    global _out
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the agent died before the request took effect
        return 1
    # Keep the event stream on a private descriptor; anything else printing to
    # stdout (a runtime's C++ logging) goes to stderr instead.
    _out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    job = WorkerJob.from_json(json.loads(sys.stdin.readline()))
    from .errors import AgentError

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
        return 0
    except MemoryError:
        emit(
            {
                "event": "error",
                "error": {"type": "MemoryError", "message": "out of memory (memory limit reached)"},
            }
        )
        return 0
    emit({"event": "result", "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
