"""The whole path, timed stage by stage: decode → preprocess → inference → decision.

Pure: the worker hands this module one callable per stage (each takes what the stage
before returned; the first takes a case's raw files) and the plan's latency settings.
The loop is the only code between clock reads: ``perf_counter_ns`` at each stage
boundary, into a preallocated int64 array, GC off. One clock read ends a stage and
starts the next, so the stages add up to the end-to-end time exactly. Cases are taken
in turn (case ``i mod n`` on run ``i``), after the warm-up of ``latency.warm_up`` over
the same whole path.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import numpy as np
from edgequal.contract.stats import summarize_latency

from .latency import LatencySettings, sample_capacity, warm_up

STAGES = ("decode", "preprocess", "inference", "decision")


def time_path_ns(
    first: Sequence, stages: Sequence[Callable], buf: np.ndarray, min_runs: int, min_s: float,
    max_s: float | None,
) -> int:  # fmt: skip
    """Run the path over ``first`` in turn, ``buf[i]`` the clock at each stage boundary of run
    ``i`` (``len(stages) + 1`` columns), until ``min_runs`` and ``min_s`` (or ``max_s``, or
    the buffer is full); returns the runs done."""
    clock = time.perf_counter_ns
    n_cases, limit = len(first), len(buf)
    was = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        i = 0
        while i < limit:
            value = first[i % n_cases]
            row = buf[i]
            row[0] = clock()
            for j, stage in enumerate(stages, 1):
                value = stage(value)
                row[j] = clock()
            i += 1
            elapsed_s = (row[-1] - start) / 1e9
            if (i >= min_runs and elapsed_s >= min_s) or (max_s and elapsed_s >= max_s):
                break
    finally:
        if was:
            gc.enable()
    return i


def measure_path(
    first: Sequence,
    stages: dict[str, Callable],
    settings: LatencySettings,
    on_phase: Callable[[str], None] = lambda name: None,
) -> dict:
    """Warm up over the whole path, then time it: ``{warmup, runs, cases, loop_s, stages,
    end_to_end, share}``.

    ``stages`` maps stage names (in order, from :data:`STAGES`) to callables; a stage not
    given (no decision rule) is ``None`` in ``stages`` and has no share. ``share`` is each
    stage's part of the end-to-end time (sum of its times over the sum of the paths').
    """
    names = list(stages)
    calls = list(stages.values())
    turn = [0]

    def whole_path() -> None:
        value = first[turn[0] % len(first)]
        turn[0] += 1
        for call in calls:
            value = call(value)

    on_phase("pipeline_warmup")
    warm = warm_up(whole_path, settings)
    capacity = sample_capacity(
        settings.min_runs, settings.min_s, warm.pop("median_ns"), settings.max_runs
    )
    buf = np.empty((capacity, len(calls) + 1), dtype=np.int64)
    on_phase("pipeline")
    t0 = time.monotonic()
    n = time_path_ns(first, calls, buf, settings.min_runs, settings.min_s, settings.max_s)
    loop_s = time.monotonic() - t0
    return {
        "warmup": warm,
        **summarize_path(buf[:n], names, len(first)),
        "loop_s": round(loop_s, 6),
    }


def summarize_path(boundaries_ns: np.ndarray, names: Sequence[str], cases: int) -> dict:
    """Per-stage and end-to-end latency summaries (``stats.summarize_latency``) from the clock
    at each stage boundary of every run, and each stage's share of the end-to-end time."""
    per_stage = np.diff(boundaries_ns, axis=1)
    end_to_end = boundaries_ns[:, -1] - boundaries_ns[:, 0]
    total = float(end_to_end.sum())
    out_stages: dict[str, dict | None] = {s: None for s in STAGES}
    share: dict[str, float | None] = {s: None for s in STAGES}
    for j, name in enumerate(names):
        out_stages[name] = summarize_latency(per_stage[:, j])
        share[name] = round(float(per_stage[:, j].sum()) / total, 4) if total > 0 else None
    return {
        "runs": int(len(boundaries_ns)),
        "cases": int(cases),
        "stages": out_stages,
        "end_to_end": summarize_latency(end_to_end),
        "share": share,
    }
