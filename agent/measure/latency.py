"""Warm latency: the timing loop, the warm-up rule and one latency measurement per input shape.

The loop is the only code between two clock reads: ``perf_counter_ns`` around the
call, the result stored into a preallocated int64 array, GC off. Statistics happen
after the loop (``stats.summarize_latency``). No processes, no sleeping, no sysfs:
the worker hands this module a bound call and the plan's settings.

Preemption tags (docs/measurement.md "Measuring through interference"): with a
``switches`` reader (the worker's count of its involuntary context switches, all
threads), every timed call is tagged preempted when the count moved between the end
of the previous call and the end of this one. The reader runs after the second clock
read, outside the timed region. ``clean`` figures are over the calls that kept the CPU;
the loop runs on, within its limits, until they are enough.
"""

from __future__ import annotations

import base64
import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from edgequal.contract.plan import MAX_EXTENSION, loop_limit_s
from edgequal.contract.preemption import encode_tags
from edgequal.contract.stats import (
    MIN_SAMPLES_P99,
    MIN_SAMPLES_P99_9,
    steady_state,
    summarize_latency,
)

from .timed_outputs import OutputSampler

# Warm-up runs in rounds of at least this many runs and seconds, judged each round.
WARMUP_ROUND_RUNS = 20
WARMUP_ROUND_S = 0.2


# Steadiness is judged on the clean warm-up calls when at least this many kept the CPU.
MIN_CLEAN_FOR_STEADINESS = 20


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
    preemption_tags: bool = True
    max_extension: float = MAX_EXTENSION

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
    sampler: OutputSampler | None = None,
    first: int = 0,
) -> int:
    """Time ``call`` with perf_counter_ns around the call only, into a preallocated array.

    Stops when both ``min_runs`` runs and ``min_s`` seconds are done (or at ``max_s``,
    or when the array is full). GC is off during the loop. Returns the sample count.
    With ``sampler`` (``timed_outputs.OutputSampler``) the due calls' outputs are kept,
    after the second clock read; ``first`` is the index of this loop's first call in
    the phase.
    """
    clock = time.perf_counter_ns
    capacity = len(samples)
    min_ns = int(min_s * 1e9)
    max_ns = int(max_s * 1e9) if max_s else None
    due = sampler.next_due - first if sampler is not None else -1
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        n = 0
        while n < capacity:
            t0 = clock()
            returned = call()
            t1 = clock()
            samples[n] = t1 - t0
            if n == due:  # outside the timed span
                due = sampler.take(first + n, returned) - first
            n += 1
            if n >= min_runs and t1 - start >= min_ns:
                break
            if max_ns is not None and t1 - start >= max_ns:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return n


def time_loop_tagged_ns(
    call: Callable[[], object],
    samples: np.ndarray,
    preempted: np.ndarray,
    switches: Callable[[], int],
    min_runs: int,
    min_clean: int,
    min_s: float,
    max_s: float | None = None,
    sampler: OutputSampler | None = None,
    first: int = 0,
) -> tuple[int, int]:
    """:func:`time_loop_ns`, with each call tagged in ``preempted`` (bool array).

    A call is tagged when ``switches()`` (involuntary context switches of the process)
    moved from its read after the previous call to its read after this one: it was
    switched out during the call or just before it. The read sits after the second
    clock read, so the timed region is the same as :func:`time_loop_ns`'s. Stops when
    ``min_runs`` calls, ``min_clean`` untagged ones and ``min_s`` seconds are done, at
    ``max_s``, or when the arrays are full. Returns ``(calls, untagged calls)``.
    ``sampler`` and ``first`` as in :func:`time_loop_ns`; the switches read comes first.
    """
    clock = time.perf_counter_ns
    capacity = min(len(samples), len(preempted))
    min_ns = int(min_s * 1e9)
    max_ns = int(max_s * 1e9) if max_s else None
    due = sampler.next_due - first if sampler is not None else -1
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        seen = switches()
        start = clock()
        n = clean = 0
        while n < capacity:
            t0 = clock()
            returned = call()
            t1 = clock()
            now = switches()
            samples[n] = t1 - t0
            hit = now != seen
            preempted[n] = hit
            clean += not hit
            if n == due:  # outside the timed span; a switch while keeping tags the next call
                due = sampler.take(first + n, returned) - first
            seen = now
            n += 1
            if n >= min_runs and clean >= min_clean and t1 - start >= min_ns:
                break
            if max_ns is not None and t1 - start >= max_ns:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return n, clean


def clean_needed(min_runs: int, calls: int) -> int:
    """Clean calls a loop of ``calls`` timed calls needs: the plan's runs, and as many as
    every percentile the as-measured figures report (p99 from 368, p99.9 from 3,688)."""
    need = min_runs
    for floor in (MIN_SAMPLES_P99, MIN_SAMPLES_P99_9):
        if calls >= floor:
            need = max(need, floor)
    return need


def sample_capacity(min_runs: int, min_s: float, per_run_ns: float, max_runs: int) -> int:
    """Samples to preallocate: enough for ``min_s`` at the warm-up's pace, with headroom."""
    expected = int(min_s * 1e9 / max(per_run_ns, 1.0) * 1.5) + 16
    return max(min_runs, min(max_runs, expected))


def warm_up(
    call: Callable[[], object],
    settings: LatencySettings,
    switches: Callable[[], int] | None = None,
) -> dict:
    """Run max(min runs, min seconds), then rounds until steady (``stats.steady_state``).

    Gives up at ``warmup_max_s`` and flags the run as not steady, with the reason. With
    ``switches`` the calls are tagged (:func:`time_loop_tagged_ns`) and steadiness is
    judged on the calls that kept the CPU, when at least MIN_CLEAN_FOR_STEADINESS did.
    """
    min_runs = settings.warmup_min_runs
    max_s = settings.warmup_max_s
    buf = np.empty(max(min_runs * 4, 4096), dtype=np.int64)
    tags = np.zeros(len(buf), dtype=bool)
    start = time.monotonic()
    rounds: list[np.ndarray] = []
    marks: list[np.ndarray] = []

    def loop(runs: int, min_s: float, left_s: float) -> None:
        if switches is None:
            n = time_loop_ns(call, buf, runs, min_s, left_s)
            tags[:n] = False
        else:
            n, _ = time_loop_tagged_ns(call, buf, tags, switches, runs, 0, min_s, left_s)
        rounds.append(buf[:n].copy())
        marks.append(tags[:n].copy())

    def judged(last: int | None = None) -> np.ndarray:
        taken = np.concatenate(rounds[-last:] if last else rounds)
        hit = np.concatenate(marks[-last:] if last else marks)
        clean = taken[~hit]
        return clean if len(clean) >= MIN_CLEAN_FOR_STEADINESS else taken

    # The minimum runs and seconds first, in as many buffer-fulls as a fast model needs.
    while True:
        elapsed = time.monotonic() - start
        done = sum(len(r) for r in rounds)
        if (done >= min_runs and elapsed >= settings.warmup_min_s) or elapsed >= max_s:
            break
        loop(max(min_runs - done, 1), settings.warmup_min_s - elapsed, max_s - elapsed)
    rounds, marks = [np.concatenate(rounds)], [np.concatenate(marks)]
    state = steady_state(judged())
    while not state.steady and time.monotonic() - start < max_s:
        loop(WARMUP_ROUND_RUNS, WARMUP_ROUND_S, max_s - (time.monotonic() - start))
        state = steady_state(judged(2))
    taken = np.concatenate(rounds)
    hit = np.concatenate(marks)
    out = {
        "runs": int(len(taken)),
        "seconds": round(time.monotonic() - start, 3),
        "steady": bool(state.steady),
        "reason": state.reason,
        "median_ns": float(np.median(taken[-min(len(taken), 50) :])),
    }
    if switches is not None:
        out["preempted"] = int(hit.sum())
    return out


def encode_samples(samples: np.ndarray) -> str:
    """Raw int64 nanosecond samples as base64 little-endian bytes (compact in JSON)."""
    return base64.b64encode(samples.astype("<i8").tobytes()).decode()


def measure_latency(
    call: Callable[[], object],
    settings: LatencySettings,
    on_phase: Callable[[str], None] = lambda name: None,
    sched: Callable[[], tuple[int, int] | None] | None = None,
    switches: Callable[[], int] | None = None,
    sampler: OutputSampler | None = None,
) -> dict:
    """Warm up, then time the planned runs: ``{warmup, loop_s, summary, samples_ns_b64, loop_monotonic_s}``.

    ``loop_s`` is how long the timed loop ran; ``loop_monotonic_s`` is ``[start, end]`` of the timed loop on CLOCK_MONOTONIC, so the
    agent can line the loop up with what it sampled about the rest of the machine.
    ``sched`` (the caller's reader of its own CPU and run-queue wait, ns) is read just
    before and after the loop: ``sched_ns`` is ``[cpu_ns, wait_ns]`` over the loop, or None.

    With ``switches`` (see the module docstring) every call is tagged, and the result
    also has ``clean`` (the summary over untagged calls, None when there are none),
    ``preemption`` (``{calls, excluded, share, needed, clean_enough, extended_s}``) and
    ``preempted_b64`` (the tags, one bit per sample, ``np.packbits`` order). The loop
    runs until the clean calls reach :func:`clean_needed` (and the plan's seconds), or
    to :func:`loop_limit_s`, or to max runs.

    With ``sampler`` (``timed_outputs.OutputSampler``) every k-th timed call's outputs
    are kept for the caller to compare; the warm-up's calls are not.
    """
    on_phase("warmup")
    warm = warm_up(call, settings, switches)
    capacity = sample_capacity(
        settings.min_runs, settings.min_s, warm.pop("median_ns"), settings.max_runs
    )
    samples = np.empty(capacity, dtype=np.int64)
    tags = np.zeros(capacity, dtype=bool)
    limit_s = (
        loop_limit_s(settings.min_s, settings.max_s, settings.max_extension)
        if switches
        else settings.max_s
    )
    on_phase("latency")
    before = sched() if sched else None
    t0 = time.monotonic()
    n = clean = 0
    while True:
        elapsed = time.monotonic() - t0
        left = limit_s - elapsed if limit_s else None
        if switches is None:
            n += time_loop_ns(
                call,
                samples[n:],
                max(settings.min_runs - n, 1),
                max(settings.min_s - elapsed, 0.0),
                left,
                sampler,
                n,
            )
            clean = n
        else:
            need = clean_needed(settings.min_runs, max(n, settings.min_runs))
            done, kept = time_loop_tagged_ns(
                call, samples[n:], tags[n:], switches, max(settings.min_runs - n, 1),
                max(need - clean, 0), max(settings.min_s - elapsed, 0.0), left, sampler, n,
            )  # fmt: skip
            n, clean = n + done, clean + kept
        elapsed = time.monotonic() - t0
        full = n == len(samples)
        enough = n >= settings.min_runs and elapsed >= settings.min_s
        if switches is not None:
            enough = enough and clean >= clean_needed(settings.min_runs, n)
        timed_out = limit_s is not None and elapsed >= limit_s
        if enough or timed_out or (full and len(samples) >= settings.max_runs):
            break
        if full:
            # The warm-up's pace underestimated this loop's: grow the arrays between two
            # calls (outside any timed call) and go on until the runs and seconds are done.
            grow = min(len(samples), settings.max_runs - len(samples))
            samples = np.concatenate([samples, np.empty(grow, np.int64)])
            tags = np.concatenate([tags, np.zeros(grow, bool)])
        # Not full and not enough: the calls passed a percentile's floor, so the clean
        # calls needed rose with them; the loop goes on.
    t1 = time.monotonic()
    after = sched() if sched else None
    taken = samples[:n]
    out = {
        "warmup": warm,
        "loop_s": round(t1 - t0, 6),
        "summary": summarize_latency(taken),
        "samples_ns_b64": encode_samples(taken),
        "loop_monotonic_s": [t0, t1],
        "sched_ns": _delta(before, after),
    }
    if switches is not None:
        hit = tags[:n]
        kept = taken[~hit]
        needed = clean_needed(settings.min_runs, n)
        out["clean"] = summarize_latency(kept) if len(kept) else None
        out["preemption"] = {
            "calls": int(n),
            "excluded": int(hit.sum()),
            "share": round(float(hit.mean()), 4) if n else 0.0,
            "needed": int(needed),
            "clean_enough": bool(len(kept) >= needed),
            "extended_s": round(max(0.0, (t1 - t0) - settings.min_s), 3),
            "limit_s": round(limit_s, 3),
        }
        out["preempted_b64"] = encode_tags(hit)
    return out


def _delta(before, after) -> list[int] | None:
    if before is None or after is None:
        return None
    return [after[0] - before[0], after[1] - before[1]]
