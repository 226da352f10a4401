"""Closed-loop throughput points: the batch sweep and thread scaling.

A point is one bound call timed back to back (``latency.time_loop_ns``) for a few
seconds: its per-call latency, calls per second and items per second. Choosing the
best batch and the thread count a board should use is pure and tested on known
points. No processes, no sleeping, no sysfs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from edgequal.contract.stats import nearest_rank

from .latency import time_loop_ns

# A point runs at least this many calls, whatever its seconds.
POINT_MIN_RUNS = 5
# Thread scaling names the fewest threads within this share of the best throughput:
# the cores beyond it buy less than the noise of one run on a board.
THREADS_WITHIN = 0.05


def time_point(call: Callable[[], object], seconds: float, max_runs: int = 100_000) -> dict:
    """Time ``call`` back to back for ``seconds`` (>= POINT_MIN_RUNS calls).

    Returns ``{calls, loop_s, p50_ms, p90_ms, mean_ms, calls_per_s}``; ``calls_per_s``
    counts the loop's wall time (calls plus the loop's own few ns between them).
    """
    buf = np.empty(max_runs, dtype=np.int64)
    t0 = time.perf_counter_ns()
    n = time_loop_ns(call, buf, POINT_MIN_RUNS, seconds)
    t1 = time.perf_counter_ns()
    return point_summary(buf[:n], (t1 - t0) / 1e9)


def point_summary(samples_ns: np.ndarray, loop_s: float) -> dict:
    """Per-call latency (nearest rank) and calls per second of one timed loop."""
    ordered = np.sort(np.asarray(samples_ns, dtype=np.int64))
    n = int(ordered.size)
    return {
        "calls": n,
        "loop_s": round(loop_s, 6),
        "p50_ms": round(float(nearest_rank(ordered, 50)) / 1e6, 6),
        "p90_ms": round(float(nearest_rank(ordered, 90)) / 1e6, 6),
        "mean_ms": round(float(ordered.mean()) / 1e6, 6),
        "calls_per_s": round(n / loop_s, 3) if loop_s > 0 else None,
    }


# ---------------------------------------------------------------------------
# Batch sweep


def fixed_batch_reason(specs: Sequence) -> str | None:
    """None when every input's leading (batch) dimension is dynamic; else the one-line reason."""
    for spec in specs:
        if not spec.shape:
            return f"input '{spec.name}' is a scalar: the model has no batch dimension"
        lead = spec.shape[0]
        if isinstance(lead, int) and lead >= 0:
            return (
                f"input '{spec.name}' has a fixed batch dimension of {lead} "
                f"({spec.describe()}): export the model with a dynamic batch to sweep it"
            )
    return None


def batch_feeds(feeds: Mapping[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """The inputs with ``batch`` items: the first item of each input repeated along axis 0."""
    return {
        name: np.ascontiguousarray(np.repeat(a[:1], batch, axis=0)) for name, a in feeds.items()
    }


def batch_point(point: dict, batch: int, items_per_call: int, cores: int) -> dict:
    """A sweep point: the timed loop plus items per call, per second and per second per core."""
    items_per_s = point["calls_per_s"] * items_per_call if point["calls_per_s"] else None
    return {
        "batch": batch,
        "items_per_call": items_per_call,
        **point,
        "items_per_s": round(items_per_s, 3) if items_per_s is not None else None,
        "items_per_s_per_core": round(items_per_s / cores, 3) if items_per_s else None,
        "ms_per_item": round(point["p50_ms"] / items_per_call, 6) if items_per_call else None,
    }


def best_batch(points: Sequence[dict], cores: int) -> dict | None:
    """The point with the most items per second (ties: the smaller batch, lower latency)."""
    usable = [p for p in points if p.get("items_per_s")]
    if not usable:
        return None
    best = max(usable, key=lambda p: (p["items_per_s"], -p["batch"]))
    return {
        "batch": best["batch"],
        "items_per_s": best["items_per_s"],
        "items_per_s_per_core": best["items_per_s_per_core"],
        "p50_ms": best["p50_ms"],
        "cores": cores,
        "speedup_over_batch_1": (
            round(best["items_per_s"] / points[0]["items_per_s"], 3)
            if points and points[0]["batch"] == 1 and points[0].get("items_per_s")
            else None
        ),
    }


# ---------------------------------------------------------------------------
# Thread scaling


def thread_counts(online_cores: int) -> list[int]:
    """1..N for N <= 8 online cores; above that powers of two and N (a sweep stays short)."""
    n = max(1, int(online_cores))
    if n <= 8:
        return list(range(1, n + 1))
    counts = []
    k = 1
    while k < n:
        counts.append(k)
        k *= 2
    return [*counts, n]


def recommend_threads(points: Sequence[dict], within: float = THREADS_WITHIN) -> dict | None:
    """The fewest threads whose throughput is within ``within`` of the best, with the reason.

    More threads than that take cores from the rest of the product for a gain smaller
    than a run's own noise.
    """
    usable = [p for p in points if p.get("calls_per_s")]
    if not usable:
        return None
    best = max(usable, key=lambda p: p["calls_per_s"])
    floor = (1.0 - within) * best["calls_per_s"]
    chosen = min((p for p in usable if p["calls_per_s"] >= floor), key=lambda p: p["threads"])
    if chosen is best:
        reason = f"{chosen['threads']} threads gave the most inferences per second"
    else:
        reason = (
            f"{chosen['threads']} threads reach {chosen['calls_per_s'] / best['calls_per_s']:.0%} "
            f"of the best ({best['threads']} threads); more threads gain under {within:.0%}"
        )
    return {
        "threads": chosen["threads"],
        "calls_per_s": chosen["calls_per_s"],
        "p50_ms": chosen["p50_ms"],
        "fastest_threads": best["threads"],
        "reason": reason,
    }
