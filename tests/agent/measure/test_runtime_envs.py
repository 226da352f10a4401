"""Pure comparison of runtime environments: segment order, segment budget, ratio intervals."""

from __future__ import annotations

import numpy as np
from edgequal.agent.measure.runtime_envs import (
    latency_ratios,
    ratio_ci,
    rounds_slower,
    segment_budget,
    segment_order,
)
from edgequal.contract.stats import summarize_latency


def test_segments_alternate_abba():
    assert segment_order(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1), (3, 1), (3, 0)]
    # Three environments: forward, then reversed.
    assert [i for _, i in segment_order(3, 2)] == [0, 1, 2, 2, 1, 0]
    assert segment_order(1, 3) == [(0, 0), (1, 0), (2, 0)]


def test_segment_budget_shares_the_plan_between_rounds():
    assert segment_budget(200, 3.0, 100_000, 4) == {"runs": 50, "seconds": 0.75, "max_runs": 25_000}
    # Rounded up: every environment gets at least the plan's runs.
    assert segment_budget(201, 1.0, 1000, 4)["runs"] == 51
    assert segment_budget(1, 0.0, 1, 8) == {"runs": 1, "seconds": 0.0, "max_runs": 1}


def test_ratio_interval_of_a_constant_factor_is_that_factor():
    base = [np.full(50, 100_000, dtype=np.int64) for _ in range(4)]
    assert ratio_ci(base, [s * 2 for s in base], 50) == (2.0, 2.0)
    assert ratio_ci(base, base, 99) == (1.0, 1.0)
    # Resampled independently, a spread-out sample's ratio interval brackets the factor.
    rng = np.random.default_rng(1)
    spread = [rng.integers(90_000, 110_000, size=400) for _ in range(4)]
    lo, hi = ratio_ci(spread, [s * 2 for s in spread], 50)
    assert 1.95 < lo < 2.0 < hi < 2.05


def test_ratio_interval_brackets_a_real_shift_and_excludes_none():
    rng = np.random.default_rng(7)
    base = [rng.normal(1_000_000, 50_000, size=300).astype(np.int64) for _ in range(4)]
    slower = [rng.normal(1_300_000, 50_000, size=300).astype(np.int64) for _ in range(4)]
    lo, hi = ratio_ci(base, slower, 50, seed=3)
    assert 1.25 < lo < 1.3 < hi < 1.35
    # The same seed gives the same interval; another seed a slightly different one.
    assert ratio_ci(base, slower, 50, seed=3) == (lo, hi)
    assert ratio_ci(base, [np.empty(0, dtype=np.int64)], 50) is None


def test_latency_ratios_need_368_samples_for_p99():
    small = [np.full(100, 1_000_000, dtype=np.int64)]
    big = [np.full(400, 1_000_000, dtype=np.int64)]
    slow_big = [np.full(400, 1_500_000, dtype=np.int64)]
    few = latency_ratios(summarize_latency(small[0]), summarize_latency(small[0]), small, small)
    assert few["p50_ratio"] == 1.0 and few["p50_ratio_ci"] == [1.0, 1.0]
    assert few["p99_ratio"] is None and few["p99_ratio_ci"] is None
    many = latency_ratios(summarize_latency(big[0]), summarize_latency(slow_big[0]), big, slow_big)
    assert many["p50_ratio"] == 1.5 and many["p99_ratio"] == 1.5
    assert many["p99_ratio_ci"] == [1.5, 1.5]


def test_rounds_slower_counts_rounds_the_candidate_lost():
    assert rounds_slower([1.0, 1.0, 1.0, 1.0], [1.1, 0.9, 1.2, 1.0]) == 2


def _rounds(ratios, n=300, seed=5):
    """Baseline and candidate segments of one round each per ratio: the candidate's
    segment is the baseline's distribution scaled by that round's ratio."""
    rng = np.random.default_rng(seed)
    base, cand = [], []
    for r in ratios:
        b = rng.normal(1_000_000, 20_000, size=n).astype(np.int64)
        base.append(b)
        cand.append((rng.normal(1_000_000, 20_000, size=n) * r).astype(np.int64))
    return base, cand


def test_ratio_interval_carries_the_spread_between_rounds():
    """The issue's case: per-round ratios 1.01, 0.80, 0.40, 1.06 (slower in 2 of 4). The
    pooled median ratio is about 0.9; resampling only within segments gave a tight
    interval that excluded 1; resampling the rounds too gives one that does not."""
    base, cand = _rounds([1.01, 0.80, 0.40, 1.06])
    lo, hi = ratio_ci(base, cand, 50, seed=1)
    assert lo < 0.5 and hi >= 1.0
    assert (
        rounds_slower([float(np.median(b)) for b in base], [float(np.median(c)) for c in cand]) == 2
    )
    # Rounds that agree keep a tight interval: the width comes from the rounds' spread.
    steady_lo, steady_hi = ratio_ci(*_rounds([0.8, 0.8, 0.8, 0.8]), 50, seed=1)
    assert 0.78 < steady_lo < 0.8 < steady_hi < 0.82


def test_a_comparison_with_an_interfered_segment_is_not_decisive():
    from edgequal.agent.measure.runtime_envs import pair_interference, segment_wait_share

    assert segment_wait_share([95, 5]) == 0.05
    assert segment_wait_share(None) is None
    quiet = [{"sched_ns": [1_000_000, 10_000]} for _ in range(4)]
    busy = [*quiet[:3], {"sched_ns": [1_000_000, 400_000]}]
    assert pair_interference(quiet, quiet) == {
        "segments": 8, "interfered": 0, "max_runq_wait_share": 0.0099, "decisive": True,
    }  # fmt: skip
    out = pair_interference(quiet, busy)
    assert out["interfered"] == 1 and not out["decisive"]
    assert out["max_runq_wait_share"] == round(400_000 / 1_400_000, 4)
    # Unread (no /proc): nothing says it was interfered with.
    assert pair_interference([{}], [{}])["decisive"]
