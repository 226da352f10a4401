"""What every worker job shares: the event stream, phases, memory figures, the runtime
and the model's inputs. Used only inside a worker process (``agent/worker/main.py``)."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import numpy as np

from ..config import proc_root as config_proc_root
from .jobs import WorkerJob

_out = None  # the event stream (the original stdout), opened by open_event_stream()


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
    """Resident set size of this process now (``probes/memory.py``: /proc, else psutil)."""
    from ..probes.memory import read_rss_bytes

    return read_rss_bytes(os.getpid())


def peak_rss_bytes() -> int:
    """Peak resident set size of this process: ``VmHWM`` where there is a /proc
    (``probes/memory.py``: ru_maxrss there counts the agent's memory the worker was forked
    from), else ru_maxrss (KiB on Linux, bytes on macOS)."""
    from ..probes.memory import read_peak_rss_bytes

    peak = read_peak_rss_bytes(os.getpid())
    if peak is not None:
        return peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def synthesize_inputs(specs, shapes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs made from the model's specs; dynamic dims must come from ``shapes``."""
    from edgequal.contract.errors import BadInput

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
    """This worker's CPU time and run-queue wait (ns) over all its threads, from the proc
    root; None where it has none (macOS): contention is then not measurable."""
    from ..probes.contention import read_worker_schedstat

    return read_worker_schedstat(config_proc_root(), os.getpid())


def involuntary_switches() -> int:
    """Involuntary context switches of this worker so far, all threads (getrusage).

    The latency loop reads it between timed calls to tag the calls during which the
    worker was switched out (measure/latency.py); about a microsecond a read.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


_kept: list = []  # (what was loaded, runtime, rss before, rss after): keep_runtime()


def _loaded_as(job: WorkerJob) -> tuple:
    return (job.runtime, job.model, job.runtime_options())


def keep_runtime(job: WorkerJob, rt, rss_before: int, rss_loaded: int) -> None:
    """Keep a cold load's runtime for the next job of this process (``WorkerJob.keep``)."""
    _kept[:] = [(_loaded_as(job), rt, rss_before, rss_loaded)]


def load_runtime(job: WorkerJob):
    """Import the job's runtime and load its model: ``(runtime, rss_before_load, rss_after_load)``;
    the runtime a cold load of the same model and options kept (:func:`keep_runtime`), with
    its memory figures, where there is one."""
    from ..runtimes import runtime_class

    kept = _kept.pop() if _kept else None
    if kept is not None and kept[0] == _loaded_as(job):
        rt, rss_before, rss_loaded = kept[1:]
    else:
        del kept  # another model or options: its session goes before this one loads
        cls = runtime_class(job.runtime)
        cls.import_module()
        rss_before = rss_bytes()
        phase("load")
        rt = cls(job.runtime_options())
        rt.load(Path(job.model))
        rss_loaded = rss_bytes()
    if job.output_fault:  # only when the agent was started with the fault injector on
        from ..runtimes.faults import OutputFault, with_fault

        root = Path(job.probe_root) if job.probe_root else None
        rt = with_fault(rt, OutputFault.parse(job.output_fault), root)
    return rt, rss_before, rss_loaded


def timed_output_check(rt, call, golden, case):
    """Checking a timed loop's outputs (``measure/timed_outputs.py``): ``(sampler, finish)``
    for a loop of ``call``, the bound call on golden ``case``'s inputs; ``(None, None)``
    without a golden set of model inputs.

    One untimed call now gives the outputs at rest. ``finish(calls, started_at)``
    compares what the sampler kept, with the drift phase's rules, after the loop.
    """
    if golden is None or golden.pipeline is not None:
        return None, None
    from ..measure.drift import drift_of_cases
    from ..measure.timed_outputs import OutputSampler, compare_timed_outputs

    at_rest = rt.bound_outputs(call())
    sampler = OutputSampler(rt.bound_outputs)

    def finish(calls: int, started_at: float) -> dict:
        return compare_timed_outputs(
            sampler,
            calls,
            case.outputs,
            at_rest,
            lambda cases: drift_of_cases(cases, rt, golden),
            started_at,
        )

    return sampler, finish


def read_golden_for(job: WorkerJob, rt):
    if not job.golden:
        return None
    from edgequal.contract.golden import read_golden

    golden = read_golden(Path(job.golden))
    golden.check_against(rt.inputs())
    return golden


def first_feeds(job: WorkerJob, rt) -> dict:
    golden = read_golden_for(job, rt)
    if golden is not None:
        return golden.cases[0].inputs
    return synthesize_inputs(rt.inputs(), job.shapes or {}, job.seed)


def online_cores() -> int:
    """CPUs online now (thread scaling sweeps 1..this; per-core throughput divides by it)."""
    try:
        return max(1, int(os.sysconf("SC_NPROCESSORS_ONLN")))
    except (ValueError, OSError):
        return os.cpu_count() or 1


def warmed(call, runs: int = 3):
    for _ in range(runs):
        call()
    return call


def open_event_stream() -> None:
    """Keep the event stream on a private descriptor; anything else printing to stdout
    (a runtime's C++ logging) goes to stderr instead."""
    global _out
    _out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
