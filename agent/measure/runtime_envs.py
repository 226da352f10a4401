"""Comparing one model under several runtime environments measured in one run: the
segment order, and the ratio of two environments' latency with its confidence interval.

Each environment's worker is loaded once; their timed segments alternate in ABBA order
(the environments in order in even rounds, reversed in odd ones), so a slow change of
the board (heat, a clock step, a neighbour) falls on every environment alike, the
co-load rule (``measure/coload.py``) applied to environments. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from edgequal.contract.stats import MIN_SAMPLES_P99, nearest_rank_index

BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95
# Resamples drawn at once: 50 resamples of 100,000 samples are 40 MB of int64.
_CHUNK = 50


def segment_order(environments: int, rounds: int) -> list[tuple[int, int]]:
    """``(round, environment index)`` in the order segments run: ABBA for two environments
    (A B, B A, A B, ...), forward then reversed for more."""
    order = []
    for r in range(rounds):
        indices = range(environments) if r % 2 == 0 else reversed(range(environments))
        order.extend((r, i) for i in indices)
    return order


def segment_budget(min_runs: int, min_s: float, max_runs: int, rounds: int) -> dict:
    """One segment's share of the plan's latency phase: each environment gets the plan's
    runs and seconds over its ``rounds`` segments (at least one run; at most
    ``max_runs / rounds``)."""
    runs = max(1, -(-min_runs // rounds))
    return {"runs": runs, "seconds": min_s / rounds, "max_runs": max(runs, max_runs // rounds)}


def _nearest_rank_rows(rows: np.ndarray, percent: float) -> np.ndarray:
    """The nearest-rank ``percent`` percentile of each row."""
    k = nearest_rank_index(rows.shape[1], percent)
    return np.partition(rows, k, axis=1)[:, k]


def ratio_ci(
    baseline: Sequence[np.ndarray],
    candidate: Sequence[np.ndarray],
    percent: float,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of ``candidate's / baseline's`` nearest-rank percentile.

    The samples are resampled within each segment (a stratified bootstrap): a segment
    keeps its size, so the interval reflects the variation between calls of one
    segment and no resample moves samples across the board states segments saw.
    None when either side has no samples.
    """
    if not any(len(s) for s in baseline) or not any(len(s) for s in candidate):
        return None
    rng = np.random.default_rng(seed)

    def draws(segments: Sequence[np.ndarray], count: int) -> np.ndarray:
        parts = [
            np.asarray(s, dtype=np.int64)[rng.integers(0, len(s), size=(count, len(s)))]
            for s in segments
            if len(s)
        ]
        return _nearest_rank_rows(np.concatenate(parts, axis=1), percent).astype(np.float64)

    ratios = []
    left = resamples
    while left > 0:
        count = min(_CHUNK, left)
        base, cand = draws(baseline, count), draws(candidate, count)
        ratios.append(cand / np.maximum(base, 1.0))
        left -= count
    values = np.sort(np.concatenate(ratios))
    alpha = (1.0 - confidence) / 2
    lo = values[max(0, math.floor(alpha * len(values)))]
    hi = values[min(len(values) - 1, math.ceil((1 - alpha) * len(values)) - 1)]
    return round(float(lo), 4), round(float(hi), 4)


def _ratio(a, b) -> float | None:
    return round(a / b, 4) if a and b else None


def latency_ratios(
    baseline: dict,
    candidate: dict,
    baseline_segments: Sequence[np.ndarray],
    candidate_segments: Sequence[np.ndarray],
    seed: int = 0,
) -> dict:
    """p50 and p99 ratios (candidate / baseline) with their 95 % bootstrap intervals.

    ``baseline`` and ``candidate`` are ``stats.summarize_latency`` summaries of the
    segments' samples; p99 needs ``MIN_SAMPLES_P99`` samples on both sides (else None).
    """
    out = {
        "p50_ratio": _ratio(candidate.get("p50_ms"), baseline.get("p50_ms")),
        "p50_ratio_ci": _list(ratio_ci(baseline_segments, candidate_segments, 50, seed)),
        "p99_ratio": None,
        "p99_ratio_ci": None,
    }
    counts = (sum(len(s) for s in baseline_segments), sum(len(s) for s in candidate_segments))
    if min(counts) >= MIN_SAMPLES_P99:
        out["p99_ratio"] = _ratio(candidate.get("p99_ms"), baseline.get("p99_ms"))
        out["p99_ratio_ci"] = _list(ratio_ci(baseline_segments, candidate_segments, 99, seed))
    return out


def rounds_slower(baseline_p50_ms: Sequence[float], candidate_p50_ms: Sequence[float]) -> int:
    """Rounds whose candidate segment's median is above the same round's baseline one."""
    return sum(1 for a, b in zip(baseline_p50_ms, candidate_p50_ms) if b > a)


def _list(pair):
    return list(pair) if pair is not None else None
