"""Batch sweep and thread scaling scoring, on known points."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.measure.throughput import (
    batch_feeds,
    batch_point,
    best_batch,
    fixed_batch_reason,
    point_summary,
    recommend_threads,
    thread_counts,
    time_point,
)
from edgequal.contract.tensors import TensorSpec


def test_point_summary_uses_nearest_rank_and_the_loop_wall_time():
    samples = np.array([4, 1, 3, 2, 5, 6, 7, 8, 9, 10], dtype=np.int64) * 1_000_000
    p = point_summary(samples, loop_s=0.1)
    assert p["calls"] == 10 and p["p50_ms"] == 5.0 and p["p90_ms"] == 9.0
    assert p["mean_ms"] == 5.5 and p["calls_per_s"] == 100.0


def test_time_point_runs_at_least_the_minimum_calls():
    calls = []
    p = time_point(lambda: calls.append(1), seconds=0.0)
    assert p["calls"] == len(calls) >= 5


def test_fixed_and_dynamic_batch_dimensions():
    assert fixed_batch_reason([TensorSpec("image", "float32", ["batch", 3, 32, 32])]) is None
    assert fixed_batch_reason([TensorSpec("image", "float32", [None, 3, 32, 32])]) is None
    reason = fixed_batch_reason([TensorSpec("image", "float32", [1, 3, 32, 32])])
    assert reason.startswith("input 'image' has a fixed batch dimension of 1")
    assert "no batch dimension" in fixed_batch_reason([TensorSpec("s", "float32", [])])


def test_batch_feeds_repeat_the_first_item():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = batch_feeds({"x": x}, 3)["x"]
    assert out.shape == (3, 6) and (out == x[0]).all() and out.flags.c_contiguous


def _point(batch, calls_per_s, p50_ms=1.0):
    return batch_point(
        {
            "calls": 10,
            "loop_s": 1.0,
            "p50_ms": p50_ms,
            "p90_ms": p50_ms,
            "mean_ms": p50_ms,
            "calls_per_s": calls_per_s,
        },
        batch,
        batch,
        cores=4,
    )


def test_best_batch_is_the_most_items_per_second_with_per_core_figures():
    points = [_point(1, 1000.0), _point(4, 400.0, 2.5), _point(8, 180.0, 5.5)]
    assert [p["items_per_s"] for p in points] == [1000.0, 1600.0, 1440.0]
    assert points[1]["items_per_s_per_core"] == 400.0 and points[1]["ms_per_item"] == 0.625
    best = best_batch(points, cores=4)
    assert best["batch"] == 4 and best["items_per_s"] == 1600.0
    assert best["items_per_s_per_core"] == 400.0 and best["speedup_over_batch_1"] == 1.6
    assert best_batch([], cores=4) is None


def test_thread_counts_cover_every_core_on_small_boards():
    assert thread_counts(1) == [1]
    assert thread_counts(4) == [1, 2, 3, 4]
    assert thread_counts(12) == [1, 2, 4, 8, 12]


def test_recommended_threads_are_the_fewest_within_five_percent_of_the_best():
    points = [
        {"threads": 1, "calls_per_s": 100.0, "p50_ms": 10.0},
        {"threads": 2, "calls_per_s": 190.0, "p50_ms": 5.2},
        {"threads": 3, "calls_per_s": 197.0, "p50_ms": 5.0},
        {"threads": 4, "calls_per_s": 199.0, "p50_ms": 5.0},
    ]
    rec = recommend_threads(points)
    assert rec["threads"] == 2 and rec["fastest_threads"] == 4
    assert "more threads gain under 5%" in rec["reason"]
    rec = recommend_threads(points, within=0.0)
    assert rec["threads"] == 4 and rec["reason"] == "4 threads gave the most inferences per second"


@pytest.mark.parametrize("points", [[], [{"threads": 1, "calls_per_s": None}]])
def test_no_recommendation_without_a_timed_point(points):
    assert recommend_threads(points) is None
