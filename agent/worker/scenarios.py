"""The service scenarios' worker jobs: batch sweep, thread scaling, the server scenario,
the operator profile and the providers on offer (docs/measurement.md "Service
scenarios"). Plumbing only: the timing and scoring are in ``measure/``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .io import first_feeds, load_runtime, online_cores, own_schedstat, phase, warmed
from .jobs import WorkerJob


def run_batch_sweep(job: WorkerJob) -> dict:
    """Throughput and latency per batch size (``measure.throughput``); a fixed batch is a reason."""
    from ..measure.throughput import (
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
    base = first_feeds(job, rt)
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
        call = warmed(rt.bind(feeds))
        points.append(batch_point(time_point(call, job.scenario.seconds), batch, items, cores))
    timed = [p for p in points if "error" not in p]
    return {"cores": cores, "points": points, "best": best_batch(timed, cores)}


def run_thread_scaling(job: WorkerJob) -> dict:
    """Latency and throughput for 1..N intra-op threads, and the count the board should use."""
    from dataclasses import replace as with_changes

    from ..measure.throughput import recommend_threads, thread_counts, time_point
    from ..runtimes import runtime_class

    cls = runtime_class(job.runtime)
    cls.import_module()
    cores = online_cores()
    points = []
    feeds = None
    for threads in thread_counts(cores):
        phase(f"threads {threads}")
        rt = cls(with_changes(job.runtime_options(), threads=threads))
        rt.load(Path(job.model))
        feeds = feeds if feeds is not None else first_feeds(job, rt)
        call = warmed(rt.bind(feeds))
        points.append({"threads": threads, **time_point(call, job.scenario.seconds)})
        rt.close()
    return {"online_cores": cores, "points": points, "recommended": recommend_threads(points)}


SERVER_SWITCH_INTERVAL_S = 0.0002


def wait_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def run_server(job: WorkerJob) -> dict:
    """MLPerf's server scenario (``measure.server``): Poisson arrivals served by several callers."""
    from ..measure.server import (
        SEARCH_ABOVE_CAPACITY,
        capacity_per_s,
        default_p99_bound,
        poisson_arrivals_s,
        queries_for,
        run_open_loop,
        score_run,
        search_max_rate,
    )
    from ..measure.throughput import time_point

    settings = job.scenario
    # A caller whose request arrives waits for the GIL up to the switch interval (5 ms by
    # default) before it can issue: that would be the generator's latency, not the model's.
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    rt, _, _ = load_runtime(job)
    feeds = first_feeds(job, rt)
    callers = settings.server_callers
    runtimes = [rt] * callers
    if not rt.concurrent_calls:  # one interpreter per caller: LiteRT's is not thread-safe
        runtimes = [rt] + [load_runtime(job)[0] for _ in range(callers - 1)]
    calls = [warmed(r.bind(feeds)) for r in runtimes]
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
        r = run_open_loop(calls, arrivals, wait_until)
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
    from ..measure.operators import cpu_fallback, delegate_coverage, operator_profile

    rt, _, _ = load_runtime(job)
    feeds = first_feeds(job, rt)
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
    from ..runtimes import runtime_class

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
