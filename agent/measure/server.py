"""Tail latency under load: MLPerf's server scenario, on the device.

Requests arrive as a Poisson process at a target rate (exponential gaps, seeded);
``callers`` threads serve them, at most one request each in flight, so a request that
arrives while every caller is busy waits in the queue. A request's latency runs from
its scheduled arrival to the end of its call: queueing included, as LoadGen counts it.
The highest rate whose p99 stays under the bound is found by bisection
(:func:`search_max_rate`) over runs at fixed rates.

The only waiting is the caller's ``wait_until`` (the worker passes a sleep); scoring
is pure and tested on known arrivals and completions.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from edgequal.contract.stats import nearest_rank

# LoadGen needs at least 64 queries for a p90; a step runs at least this many.
MIN_QUERIES = 64
# A run is saturated when completions fall this far behind the offered rate: the
# queue grew for the whole run instead of draining between bursts.
SATURATED_BELOW = 0.90
# The default p99 bound: this many single-stream medians, never under BOUND_MIN_MS (a
# thread's wake-up alone is 0.1-1 ms on a busy board). MLPerf fixes a bound per model;
# a plan that knows its product's bound sets ``server_p99_ms``.
BOUND_X_P50 = 4.0
BOUND_MIN_MS = 2.0
# The bisection searches up to this multiple of the closed-loop capacity.
SEARCH_ABOVE_CAPACITY = 1.2
# Queries are scheduled this long after the callers are started, so the first
# arrival does not count the threads' start-up as queueing.
START_DELAY_S = 0.02


def poisson_arrivals_s(rate_per_s: float, count: int, seed: int = 0) -> np.ndarray:
    """Arrival times (s from the start) of ``count`` requests of a Poisson process at ``rate_per_s``."""
    if rate_per_s <= 0 or count < 1:
        raise ValueError("a Poisson process needs a positive rate and at least one request")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=count)
    return np.cumsum(gaps)


def default_p99_bound(single_stream_p50_ms: float) -> tuple[float, str]:
    """``(bound_ms, how it was chosen)`` when the plan sets none."""
    bound = max(BOUND_X_P50 * single_stream_p50_ms, BOUND_MIN_MS)
    return round(bound, 6), f"{BOUND_X_P50:g} x single-stream p50, at least {BOUND_MIN_MS:g} ms"


def queries_for(rate_per_s: float, seconds: float) -> int:
    """Requests in one run at ``rate_per_s`` for ``seconds``: at least MIN_QUERIES."""
    return max(MIN_QUERIES, int(math.ceil(rate_per_s * seconds)))


def run_open_loop(
    calls: Sequence[Callable[[], object]],
    arrivals_s: np.ndarray,
    wait_until: Callable[[float], None],
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Serve the scheduled requests with one thread per call in ``calls``.

    ``wait_until(t)`` returns at or after ``clock()`` time ``t``. Each caller takes the
    next request in arrival order, waits for its arrival, calls, and records when it
    issued and finished it. Returns ``{start, issued, done}`` (``clock`` seconds; the
    arrivals are relative to ``start``).
    """
    n = len(arrivals_s)
    issued = np.zeros(n, dtype=np.float64)
    done = np.zeros(n, dtype=np.float64)
    # next() on itertools.count is atomic under the GIL: no lock per request.
    counter = itertools.count()
    start = clock() + START_DELAY_S
    due = (start + np.asarray(arrivals_s, dtype=np.float64)).tolist()

    def serve(call: Callable[[], object]) -> None:
        take, now = counter.__next__, clock
        while True:
            i = take()
            if i >= n:
                return
            t = due[i]
            if now() < t:
                wait_until(t)
            issued[i] = now()
            call()
            done[i] = now()

    threads = [threading.Thread(target=serve, args=(c,), daemon=True) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"start": start, "issued": issued, "done": done}


def score_run(
    arrivals_s: np.ndarray,
    start: float,
    issued: np.ndarray,
    done: np.ndarray,
    bound_ms: float | None,
    target_rate_per_s: float,
) -> dict:
    """One fixed-rate run: latency including queueing (p50/p90/p99), rates, whether it held.

    ``offered_rate_per_s`` is what the Poisson draw actually asked for (the gaps between
    the first and last arrival); ``achieved_rate_per_s`` the same over completions. A
    run that keeps up completes as it was asked, shifted by its latency; one that
    cannot completes at its capacity while the queue grows. ``saturated``: achieved
    under 90 % of offered. ``held``: not
    saturated and p99 within ``bound_ms`` (p99 of fewer than 100 queries is their
    maximum, nearest rank, so the check stays conservative).
    """
    arrivals_s = np.asarray(arrivals_s, dtype=np.float64)
    scheduled = start + arrivals_s
    latency_ms = np.sort((np.asarray(done) - scheduled) * 1e3)
    queue_ms = np.sort(np.maximum(np.asarray(issued) - scheduled, 0.0) * 1e3)
    n = len(arrivals_s)
    done = np.asarray(done, dtype=np.float64)
    asked_s = float(arrivals_s[-1] - arrivals_s[0])
    span_s = float(done.max() - done.min())
    offered = (n - 1) / asked_s if asked_s > 0 else float("inf")
    achieved = (n - 1) / span_s if span_s > 0 else None
    saturated = achieved is None or achieved < SATURATED_BELOW * offered
    p99 = float(nearest_rank(latency_ms, 99))
    within = bound_ms is None or p99 <= bound_ms
    return {
        "target_rate_per_s": round(target_rate_per_s, 3),
        "queries": n,
        "offered_rate_per_s": round(offered, 3),
        "achieved_rate_per_s": round(achieved, 3) if achieved else None,
        "p50_ms": round(float(nearest_rank(latency_ms, 50)), 6),
        "p90_ms": round(float(nearest_rank(latency_ms, 90)), 6),
        "p99_ms": round(p99, 6),
        "max_ms": round(float(latency_ms[-1]), 6),
        "queue_p50_ms": round(float(nearest_rank(queue_ms, 50)), 6),
        "queue_p99_ms": round(float(nearest_rank(queue_ms, 99)), 6),
        "saturated": bool(saturated),
        "p99_within_bound": bool(within),
        "held": bool(within and not saturated),
    }


def search_max_rate(run_at: Callable[[float], dict], low: float, high: float, steps: int) -> dict:
    """Bisection for the highest rate that holds (``run_at(rate)["held"]``) in ``(low, high]``.

    ``low`` is taken to hold (0 does); each step runs at the midpoint and keeps the half
    where the boundary lies. Returns ``{max_rate_held_per_s, bracket_per_s, steps}``:
    the highest rate that held (None when none did) and the bracket it was found in.
    """
    runs = []
    held_rate = None
    for _ in range(steps):
        rate = (low + high) / 2
        if rate <= 0:
            break
        result = run_at(rate)
        runs.append(result)
        if result["held"]:
            low, held_rate = rate, rate
        else:
            high = rate
    return {
        "max_rate_held_per_s": round(held_rate, 3) if held_rate else None,
        "bracket_per_s": [round(low, 3), round(high, 3)],
        "steps": runs,
    }


def capacity_per_s(calls: Sequence[Callable[[], object]], queries: int) -> float:
    """Closed-loop rate with every caller busy: all ``queries`` arrive at once, none waits to start."""
    r = run_open_loop(calls, np.zeros(queries), wait_until=lambda t: None)
    span = float(np.max(r["done"]) - np.min(r["issued"]))
    return queries / span if span > 0 else float("inf")
