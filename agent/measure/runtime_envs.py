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

from .attribution import RUNQ_WAIT_PRESENT

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


def ratio_ci(
    baseline: Sequence[np.ndarray],
    candidate: Sequence[np.ndarray],
    percent: float,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Hierarchical percentile-bootstrap interval of ``candidate's / baseline's``
    nearest-rank percentile over segments measured in rounds.

    ``baseline[r]`` and ``candidate[r]`` are round r's segments (ABBA order, so a round's
    two segments saw the same board state). Each resample draws the rounds with
    replacement, the same rounds on both sides (they are paired), then the samples
    within each drawn segment (keeping its size): the interval carries how much rounds
    differ as well as how calls within one differ. Per-round ratios of 1.01, 0.80,
    0.40, 1.06 give an interval that reaches from below 0.5 to about 1, not a tight
    one around 0.75. With one round it is the within-segment bootstrap. None when no
    round has samples on both sides.
    """
    rounds = [(b, c) for b, c in zip(baseline, candidate) if len(b) and len(c)]
    if not rounds:
        return None
    rng = np.random.default_rng(seed)
    sides = [[np.asarray(r[side], dtype=np.int64) for r in rounds] for side in (0, 1)]
    width = max(len(x) for side in sides for x in side)
    sentinel = np.iinfo(np.int64).max  # pads a row past its drawn samples; sorts last

    def percentiles(segs: list[np.ndarray], drawn: np.ndarray) -> np.ndarray:
        # Row i pools the rounds drawn[i], each resampled within itself at its own size.
        count = len(drawn)
        pooled = np.full((count, len(rounds) * width), sentinel, dtype=np.int64)
        for j in range(len(rounds)):
            for r, seg in enumerate(segs):
                rows = np.flatnonzero(drawn[:, j] == r)
                if rows.size:
                    picks = seg[rng.integers(0, len(seg), size=(rows.size, len(seg)))]
                    pooled[rows, j * width : j * width + len(seg)] = picks
        sizes = np.array([len(x) for x in segs])[drawn].sum(axis=1)
        ks = np.array([nearest_rank_index(int(n), percent) for n in sizes])
        parted = np.partition(pooled, np.unique(ks), axis=1)
        return parted[np.arange(count), ks].astype(np.float64)

    chunks, left = [], resamples
    while left > 0:
        count = min(_CHUNK, left)
        drawn = rng.integers(0, len(rounds), size=(count, len(rounds)))
        base = percentiles(sides[0], drawn)
        chunks.append(percentiles(sides[1], drawn) / np.maximum(base, 1.0))
        left -= count
    ratios = np.concatenate(chunks)
    values = np.sort(ratios)
    alpha = (1.0 - confidence) / 2
    lo = values[max(0, math.floor(alpha * len(values)))]
    hi = values[min(len(values) - 1, math.ceil((1 - alpha) * len(values)) - 1)]
    return round(float(lo), 4), round(float(hi), 4)


def segment_wait_share(sched_ns) -> float | None:
    """The share of a segment's runnable time its worker waited for a CPU, from its
    ``[cpu_ns, wait_ns]`` (None where unread)."""
    if not sched_ns or len(sched_ns) != 2:
        return None
    cpu, wait = sched_ns
    return wait / (cpu + wait) if cpu + wait > 0 else None


def pair_interference(
    baseline_segments: Sequence[dict], candidate_segments: Sequence[dict]
) -> dict:
    """Whether a comparison's segments were interfered with: ``{segments, interfered,
    max_runq_wait_share, decisive}``. A segment whose worker waited for a CPU for
    RUNQ_WAIT_PRESENT (5 %) or more of its runnable time is interfered (the latency
    cause rule, measure/attribution.py); a comparison with any such segment is not
    decisive: its ratio may be the neighbour's, not the runtime's."""
    shares = [
        segment_wait_share(s.get("sched_ns")) for s in [*baseline_segments, *candidate_segments]
    ]
    read = [x for x in shares if x is not None]
    interfered = sum(x >= RUNQ_WAIT_PRESENT for x in read)
    return {
        "segments": len(shares),
        "interfered": interfered,
        "max_runq_wait_share": round(max(read), 4) if read else None,
        "decisive": interfered == 0,
    }


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
