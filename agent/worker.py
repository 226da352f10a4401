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


JOBS = {"cold_load": run_cold_load, "warm": run_warm, "sustained": run_sustained}


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
