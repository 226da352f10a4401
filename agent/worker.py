"""The worker: a child process that loads and runs one model (crash isolation).

Started with exec (``python -m edgequal.agent.worker``) by the supervisor, in its
own process group. It reads one job (JSON) on stdin and writes JSON-lines events
to the stdout it was given; the runtime's own prints go to stderr, so they cannot
corrupt the event stream. A model is hostile input: it is parsed and run only here.

Events: ``{"event": "phase", "phase": P, "state": "started"}``,
``{"event": "progress", ...}``, ``{"event": "window", ...}`` (sustained runs),
``{"event": "result", "result": {...}}`` or ``{"event": "error", "error": {...}}``.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import numpy as np

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


def make_runtime(job: dict):
    """The runtime adapter the job asks for, with its options."""
    from .runtimes import RuntimeOptions, runtime_class

    return runtime_class(job["runtime"]), RuntimeOptions(**job.get("options", {}))


def time_loop_ns(
    call, samples: np.ndarray, min_runs: int, min_s: float, max_s: float | None = None
) -> int:
    """Time ``call`` with perf_counter_ns around the call only, into a preallocated array.

    Stops when both ``min_runs`` runs and ``min_s`` seconds are done (or at ``max_s``,
    or when the array is full). GC is off during the loop. Returns the sample count.
    """
    clock = time.perf_counter_ns
    capacity = len(samples)
    min_ns = int(min_s * 1e9)
    max_ns = int(max_s * 1e9) if max_s else None
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        n = 0
        while n < capacity:
            t0 = clock()
            call()
            t1 = clock()
            samples[n] = t1 - t0
            n += 1
            if n >= min_runs and t1 - start >= min_ns:
                break
            if max_ns is not None and t1 - start >= max_ns:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return n


def _capacity(min_runs: int, min_s: float, per_run_ns: float, max_runs: int) -> int:
    """Samples to preallocate: enough for min_s at the warm-up's pace, with headroom."""
    expected = int(min_s * 1e9 / max(per_run_ns, 1.0) * 1.5) + 16
    return max(min_runs, min(max_runs, expected))


def warm_up(call, plan: dict) -> dict:
    """Run until steady (window median within 2 %, CV < 5 %) after max(min runs, min seconds).

    Gives up at ``warmup_max_s`` and flags the run as not steady.
    """
    from .measure.stats import steady_state

    min_runs = plan["warmup_min_runs"]
    min_s = plan["warmup_min_s"]
    max_s = plan["warmup_max_s"]
    buf = np.empty(max(min_runs * 4, 4096), dtype=np.int64)
    start = time.monotonic()
    n = time_loop_ns(call, buf, min_runs, min_s, max_s)
    samples = [buf[:n].copy()]
    state = steady_state(samples[0])
    while not state.steady and time.monotonic() - start < max_s:
        n = time_loop_ns(call, buf, 20, 0.2, max_s - (time.monotonic() - start))
        samples.append(buf[:n].copy())
        state = steady_state(np.concatenate(samples[-2:]))
    all_samples = np.concatenate(samples)
    return {
        "runs": int(len(all_samples)),
        "seconds": round(time.monotonic() - start, 3),
        "steady": bool(state.steady),
        "reason": state.reason,
        "median_ns": float(np.median(all_samples[-min(len(all_samples), 50) :])),
    }


def encode_samples(samples: np.ndarray) -> str:
    """Raw int64 nanosecond samples as base64 little-endian bytes (compact in JSON)."""
    return base64.b64encode(samples.astype("<i8").tobytes()).decode()


def run_cold(job: dict) -> dict:
    """Cold load: runtime import, session creation, first inference, all in this fresh process."""
    t_start = time.perf_counter_ns()
    model = Path(job["model"])
    eviction = (
        evict_page_cache(model)
        if job.get("evict", True)
        else {"evicted": False, "reason": "not asked"}
    )
    phase("import")
    cls, options = make_runtime(job)
    t0 = time.perf_counter_ns()
    cls.import_module()
    t1 = time.perf_counter_ns()
    rss_before = rss_bytes()
    phase("load")
    rt = cls(options)
    rt.load(model)
    t2 = time.perf_counter_ns()
    rss_loaded = rss_bytes()
    feeds = _first_feeds(job, rt)
    phase("first_inference")
    t3 = time.perf_counter_ns()
    rt.run(feeds)
    t4 = time.perf_counter_ns()
    return {
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


def _first_feeds(job: dict, rt) -> dict:
    if job.get("golden"):
        from .golden import read_golden

        golden = read_golden(Path(job["golden"]))
        golden.check_against(rt.inputs())
        return golden.cases[0].inputs
    return synthesize_inputs(rt.inputs(), job.get("shapes", {}), job.get("seed", 0))


def run_measure(job: dict) -> dict:
    """Warm latency per input shape, drift over the golden set, memory."""
    from .measure.stats import summarize_latency

    cls, options = make_runtime(job)
    cls.import_module()
    rss_before = rss_bytes()
    phase("load")
    rt = cls(options)
    rt.load(Path(job["model"]))
    rss_loaded = rss_bytes()
    golden = None
    if job.get("golden"):
        from .golden import read_golden

        golden = read_golden(Path(job["golden"]))
        golden.check_against(rt.inputs())
        groups = {key: cases[0].inputs for key, cases in golden.shape_groups().items()}
    else:
        feeds = synthesize_inputs(rt.inputs(), job.get("shapes", {}), job.get("seed", 0))
        from .runtimes.base import shape_key

        groups = {shape_key(feeds): feeds}
    plan = job["latency"]
    latency = []
    for shape_key, feeds in groups.items():
        call = rt.bind(feeds)
        phase("warmup")
        warm = warm_up(call, plan)
        capacity = _capacity(plan["min_runs"], plan["min_s"], warm["median_ns"], plan["max_runs"])
        samples = np.empty(capacity, dtype=np.int64)
        phase("latency")
        n = time_loop_ns(call, samples, plan["min_runs"], plan["min_s"], plan.get("max_s"))
        taken = samples[:n]
        latency.append(
            {
                "shape": shape_key,
                "warmup": {k: v for k, v in warm.items() if k != "median_ns"},
                "summary": summarize_latency(taken),
                "samples_ns_b64": encode_samples(taken),
            }
        )
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


def measure_drift(rt, golden) -> dict:
    """Run every golden case once and compare with the reference outputs."""
    from .measure.drift import Tolerance, drift_report, parse_decision_rule

    cases = []
    for case in golden.cases:
        cases.append((case.name, rt.run(case.inputs), case.outputs))
    tolerances = {}
    for spec in rt.outputs():
        override = golden.tolerances.get(spec.name)
        tolerances[spec.name] = (
            Tolerance.from_dict(override)
            if override
            else Tolerance.for_class(default_tolerance_class(spec.dtype))
        )
    rule = parse_decision_rule(golden.decision) if golden.decision else None
    return drift_report(cases, tolerances, rule)


def default_tolerance_class(dtype: str) -> str:
    """fp32 for float32/float64 outputs, fp16 for float16, int8 for 8-bit integer outputs."""
    if dtype == "float16":
        return "fp16"
    if dtype in ("int8", "uint8"):
        return "int8"
    return "fp32"


def _request_stop(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


def run_sustain(job: dict) -> dict:
    """Closed-loop inference for the planned duration, reported per window as it goes.

    Window boundaries use CLOCK_MONOTONIC, which the agent's telemetry sampler shares,
    so windows and temperature samples line up. SIGTERM ends the run early and cleanly.
    """
    signal.signal(signal.SIGTERM, _request_stop)
    cls, options = make_runtime(job)
    cls.import_module()
    phase("load")
    rt = cls(options)
    rt.load(Path(job["model"]))
    call = rt.bind(_first_feeds(job, rt))
    for _ in range(3):
        call()
    duration_s = job["sustain"]["duration_s"]
    window_s = job["sustain"]["window_s"]
    phase("sustain")
    clock = time.perf_counter_ns
    buf = np.empty(1 << 16, dtype=np.int64)
    windows = []
    start = time.monotonic()
    end = start + duration_s
    w_start = start
    n = 0
    gc.disable()

    def close_window(now: float, partial: bool) -> None:
        taken = buf[: min(n, len(buf))]
        window = {
            "index": len(windows),
            "t0": w_start,
            "t1": now,
            "count": n,
            "rate_per_s": n / (now - w_start),
            "p50_ms": float(np.percentile(taken, 50)) / 1e6,
            "p90_ms": float(np.percentile(taken, 90)) / 1e6,
            "partial": partial,
        }
        windows.append(window)
        emit({"event": "window", **window})

    while not _stop_requested:
        t0 = clock()
        call()
        buf[n % len(buf)] = clock() - t0
        n += 1
        now = time.monotonic()
        if now - w_start >= window_s or now >= end:
            close_window(now, partial=False)
            w_start, n = now, 0
            if now >= end:
                break
    if _stop_requested and n > 0:
        # The window in progress when the agent stopped the run holds its hottest sample.
        close_window(time.monotonic(), partial=True)
    gc.enable()
    return {"windows": windows, "stopped_early": _stop_requested, "started_at": start}


JOBS = {"cold": run_cold, "measure": run_measure, "sustain": run_sustain}


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
    job = json.loads(sys.stdin.readline())
    from .errors import AgentError

    try:
        result = JOBS[job["kind"]](job)
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
