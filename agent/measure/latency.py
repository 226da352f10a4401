"""Warm latency: the timing loop, the warm-up rule and one latency measurement per input shape.

The loop is the only code between two clock reads: ``perf_counter_ns`` around the
call, the result stored into a preallocated int64 array, GC off. Statistics happen
after the loop (``stats.summarize_latency``). No processes, no sleeping, no sysfs:
the worker hands this module a bound call and the plan's settings.
"""

from __future__ import annotations

import base64
import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from .stats import steady_state, summarize_latency

# Warm-up runs in rounds of at least this many runs and seconds, judged each round.
WARMUP_ROUND_RUNS = 20
WARMUP_ROUND_S = 0.2


@dataclass(frozen=True)
class LatencySettings:
    """How long to warm up and how many runs to time (the plan's ``warmup_*`` and ``latency_*``)."""

    warmup_min_runs: int
    warmup_min_s: float
    warmup_max_s: float
    min_runs: int
    min_s: float
    max_runs: int
    max_s: float | None = None

    def to_json(self) -> dict:
        """As JSON for the worker job."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> LatencySettings:
        """From the worker job's JSON."""
        return cls(**obj)


def time_loop_ns(
    call: Callable[[], object],
    samples: np.ndarray,
    min_runs: int,
    min_s: float,
    max_s: float | None = None,
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


def sample_capacity(min_runs: int, min_s: float, per_run_ns: float, max_runs: int) -> int:
    """Samples to preallocate: enough for ``min_s`` at the warm-up's pace, with headroom."""
    expected = int(min_s * 1e9 / max(per_run_ns, 1.0) * 1.5) + 16
    return max(min_runs, min(max_runs, expected))


def warm_up(call: Callable[[], object], settings: LatencySettings) -> dict:
    """Run max(min runs, min seconds), then rounds until steady (``stats.steady_state``).

    Gives up at ``warmup_max_s`` and flags the run as not steady, with the reason.
    """
    min_runs = settings.warmup_min_runs
    max_s = settings.warmup_max_s
    buf = np.empty(max(min_runs * 4, 4096), dtype=np.int64)
    start = time.monotonic()
    rounds: list[np.ndarray] = []
    # The minimum runs and seconds first, in as many buffer-fulls as a fast model needs.
    while True:
        elapsed = time.monotonic() - start
        done = sum(len(r) for r in rounds)
        if (done >= min_runs and elapsed >= settings.warmup_min_s) or elapsed >= max_s:
            break
        n = time_loop_ns(
            call, buf, max(min_runs - done, 1), settings.warmup_min_s - elapsed, max_s - elapsed
        )
        rounds.append(buf[:n].copy())
    rounds = [np.concatenate(rounds)]
    state = steady_state(rounds[0])
    while not state.steady and time.monotonic() - start < max_s:
        left = max_s - (time.monotonic() - start)
        n = time_loop_ns(call, buf, WARMUP_ROUND_RUNS, WARMUP_ROUND_S, left)
        rounds.append(buf[:n].copy())
        state = steady_state(np.concatenate(rounds[-2:]))
    taken = np.concatenate(rounds)
    return {
        "runs": int(len(taken)),
        "seconds": round(time.monotonic() - start, 3),
        "steady": bool(state.steady),
        "reason": state.reason,
        "median_ns": float(np.median(taken[-min(len(taken), 50) :])),
    }


def encode_samples(samples: np.ndarray) -> str:
    """Raw int64 nanosecond samples as base64 little-endian bytes (compact in JSON)."""
    return base64.b64encode(samples.astype("<i8").tobytes()).decode()


def measure_latency(
    call: Callable[[], object],
    settings: LatencySettings,
    on_phase: Callable[[str], None] = lambda name: None,
    sched: Callable[[], tuple[int, int] | None] | None = None,
) -> dict:
    """Warm up, then time the planned runs: ``{warmup, loop_s, summary, samples_ns_b64, loop_monotonic_s}``.

    ``loop_s`` is how long the timed loop ran; ``loop_monotonic_s`` is ``[start, end]`` of the timed loop on CLOCK_MONOTONIC, so the
    agent can line the loop up with what it sampled about the rest of the machine.
    ``sched`` (the caller's reader of its own CPU and run-queue wait, ns) is read just
    before and after the loop: ``sched_ns`` is ``[cpu_ns, wait_ns]`` over the loop, or None.
    """
    on_phase("warmup")
    warm = warm_up(call, settings)
    capacity = sample_capacity(
        settings.min_runs, settings.min_s, warm.pop("median_ns"), settings.max_runs
    )
    samples = np.empty(capacity, dtype=np.int64)
    on_phase("latency")
    before = sched() if sched else None
    t0 = time.monotonic()
    n = 0
    while True:
        elapsed = time.monotonic() - t0
        n += time_loop_ns(
            call,
            samples[n:],
            max(settings.min_runs - n, 1),
            max(settings.min_s - elapsed, 0.0),
            settings.max_s - elapsed if settings.max_s else None,
        )
        elapsed = time.monotonic() - t0
        full = n == len(samples)
        enough = n >= settings.min_runs and elapsed >= settings.min_s
        timed_out = settings.max_s is not None and elapsed >= settings.max_s
        if not full or enough or timed_out or len(samples) >= settings.max_runs:
            break
        # The warm-up's pace underestimated this loop's: grow the array between two
        # calls (outside any timed call) and go on until the runs and seconds are done.
        samples = np.concatenate(
            [samples, np.empty(min(len(samples), settings.max_runs - len(samples)), np.int64)]
        )
    t1 = time.monotonic()
    after = sched() if sched else None
    taken = samples[:n]
    return {
        "warmup": warm,
        "loop_s": round(t1 - t0, 6),
        "summary": summarize_latency(taken),
        "samples_ns_b64": encode_samples(taken),
        "loop_monotonic_s": [t0, t1],
        "sched_ns": _delta(before, after),
    }


def _delta(before, after) -> list[int] | None:
    if before is None or after is None:
        return None
    return [after[0] - before[0], after[1] - before[1]]
