"""The server scenario: arrivals, scoring with queueing, saturation, and the bisection."""

from __future__ import annotations

import time

import numpy as np
import pytest
from edgequal.agent.measure.server import (
    MIN_QUERIES,
    capacity_per_s,
    default_p99_bound,
    poisson_arrivals_s,
    queries_for,
    run_open_loop,
    score_run,
    search_max_rate,
)


def _sleep_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def test_poisson_arrivals_have_the_asked_mean_gap_and_are_seeded():
    a = poisson_arrivals_s(200.0, 20_000, seed=3)
    gaps = np.diff(np.concatenate(([0.0], a)))
    assert gaps.mean() == pytest.approx(1 / 200.0, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 200.0, rel=0.05)  # exponential: sd = mean
    assert (poisson_arrivals_s(200.0, 10, seed=3) == a[:10]).all()
    with pytest.raises(ValueError):
        poisson_arrivals_s(0.0, 10)


def test_queries_per_run_never_under_loadgens_minimum():
    assert queries_for(10.0, 1.0) == MIN_QUERIES
    assert queries_for(1000.0, 0.5) == 500


def test_score_counts_queueing_from_the_scheduled_arrival():
    # Four requests 10 ms apart, each served in 15 ms by one caller: each waits longer
    # than the one before, the queue grows: saturated whatever the bound.
    arrivals = np.array([0.01, 0.02, 0.03, 0.04])
    start = 100.0
    issued = start + np.array([0.010, 0.025, 0.040, 0.055])
    done = issued + 0.015
    r = score_run(arrivals, start, issued, done, bound_ms=40.0, target_rate_per_s=100.0)
    assert r["queries"] == 4 and r["offered_rate_per_s"] == pytest.approx(100.0)
    # latencies 15, 20, 25, 30 ms; queueing 0, 5, 10, 15 ms
    assert (r["p50_ms"], r["p90_ms"], r["p99_ms"]) == pytest.approx((20.0, 30.0, 30.0))
    assert r["queue_p50_ms"] == pytest.approx(5.0) and r["queue_p99_ms"] == pytest.approx(15.0)
    # completions every 15 ms: the server's capacity, not the 100/s asked
    assert r["achieved_rate_per_s"] == pytest.approx(1 / 0.015, abs=1e-3)
    assert r["p99_within_bound"] is True
    assert r["saturated"] is True and r["held"] is False


def test_a_run_that_keeps_up_holds_when_its_p99_is_within_the_bound():
    arrivals = np.array([0.01, 0.02, 0.03, 0.04])
    issued = 100.0 + arrivals
    done = issued + np.array([0.008, 0.006, 0.008, 0.007])
    r = score_run(arrivals, 100.0, issued, done, bound_ms=10.0, target_rate_per_s=100.0)
    assert r["queue_p99_ms"] == pytest.approx(0.0)
    assert r["achieved_rate_per_s"] == pytest.approx(3 / 0.029, abs=1e-3)
    assert r["saturated"] is False and r["held"] is True
    tight = score_run(arrivals, 100.0, issued, done, bound_ms=7.5, target_rate_per_s=100.0)
    assert tight["p99_ms"] == pytest.approx(8.0) and tight["held"] is False


def test_search_bisects_to_the_highest_rate_that_holds():
    def run_at(rate):
        return {"rate": rate, "held": rate <= 37.0}

    out = search_max_rate(run_at, 0.0, 100.0, steps=6)
    assert [s["rate"] for s in out["steps"]] == [50.0, 25.0, 37.5, 31.25, 34.375, 35.9375]
    assert out["max_rate_held_per_s"] == 35.938 and out["bracket_per_s"] == [35.938, 37.5]
    none = search_max_rate(lambda r: {"held": False}, 0.0, 8.0, steps=3)
    assert none["max_rate_held_per_s"] is None and none["bracket_per_s"] == [0.0, 1.0]


@pytest.mark.slow
def test_a_rate_the_callers_hold_and_one_they_cannot():
    # Two callers serving 4 ms requests (sleep: no CPU): capacity is at most 500/s, about
    # that on a quiet machine, less where other jobs delay each wake-up. Two callers hold
    # more than one does, measured in turns in the same run (the best of three each, the
    # turn other jobs delayed least). A fifth of it holds; four times saturates.
    service = lambda: time.sleep(0.004)  # noqa: E731
    calls = [service, service]
    turns = [(capacity_per_s(calls[:1], 32), capacity_per_s(calls, 64)) for _ in range(3)]
    one, capacity = (max(column) for column in zip(*turns))
    assert capacity <= 500 and one <= 250
    assert capacity > 1.2 * one, turns

    def run(rate):
        arrivals = poisson_arrivals_s(rate, MIN_QUERIES, seed=1)
        r = run_open_loop(calls, arrivals, _sleep_until)
        assert (r["issued"] >= r["start"] + arrivals - 1e-3).all()  # never issued early
        return score_run(arrivals, r["start"], r["issued"], r["done"], 50.0, rate)

    slow, fast = run(capacity / 5), run(capacity * 4)
    assert fast["saturated"] and not fast["held"]
    assert fast["achieved_rate_per_s"] < 0.9 * fast["offered_rate_per_s"]
    assert fast["queue_p99_ms"] > slow["queue_p99_ms"]
    # Within one run, on one machine: the held rate completes about as offered.
    assert not slow["saturated"]
    assert slow["achieved_rate_per_s"] > fast["achieved_rate_per_s"] / 10


def test_default_bound_is_four_medians_but_never_under_two_ms():
    assert default_p99_bound(5.0)[0] == 20.0
    bound, how = default_p99_bound(0.03)
    assert bound == 2.0 and how == "4 x single-stream p50, at least 2 ms"
