"""The regression statistics: median-ratio bootstrap, Mann–Whitney U, the verdict rule."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.regression import (
    MIN_ITERATIONS,
    bootstrap_iterations,
    bootstrap_median_ratio,
    decode_samples_ns,
    judge_ratio,
    mann_whitney_u,
)


def _latencies_ns(n: int, seed: int) -> np.ndarray:
    """Right-skewed latencies around 100 µs, as a warm loop gives them."""
    rng = np.random.default_rng(seed)
    return (100_000 * rng.lognormal(0.0, 0.15, n)).astype(np.int64)


@pytest.mark.slow
def test_same_distribution_passes_and_five_percent_slower_fails_at_three_percent():
    baseline = _latencies_ns(4000, 1)
    again = _latencies_ns(4000, 2)  # a second run of the same model
    same = bootstrap_median_ratio(baseline, again)
    assert same.ci_low < 1.0 < same.ci_high or abs(same.ratio - 1) < 0.03
    assert judge_ratio(same, 0.03) == "same"

    slower = bootstrap_median_ratio(baseline, (again * 1.05).astype(np.int64))
    assert slower.ratio == pytest.approx(1.05, abs=0.02)
    assert slower.ci_low > 1.0
    assert judge_ratio(slower, 0.03) == "slower"
    # Under the minimum effect a significant change is not a regression.
    small = bootstrap_median_ratio(baseline, (baseline * 1.01).astype(np.int64))
    assert small.ci_low > 1.0 and judge_ratio(small, 0.03) == "same"
    faster = bootstrap_median_ratio(baseline, (again * 0.9).astype(np.int64))
    assert judge_ratio(faster, 0.03) == "faster"


@pytest.mark.slow
def test_bootstrap_is_seeded_and_bounded():
    a, b = _latencies_ns(3000, 3), _latencies_ns(3000, 4)
    assert bootstrap_median_ratio(a, b, seed=5) == bootstrap_median_ratio(a, b, seed=5)
    assert (
        bootstrap_median_ratio(a, b, seed=5).ci_low != bootstrap_median_ratio(a, b, seed=6).ci_low
    )
    assert bootstrap_iterations(100_000, 100_000, 2000) == 400
    assert bootstrap_iterations(1_000_000, 10, 2000) == MIN_ITERATIONS
    assert bootstrap_iterations(1000, 1000, 50) == 50
    with pytest.raises(UsageError):
        bootstrap_median_ratio([], [1, 2])


def test_judge_ratio_unresolved_when_the_interval_crosses_one():
    from edgequal.host.judge.regression import MedianRatio

    r = MedianRatio(1.08, 0.97, 1.2, 0.95, 1000, 0, 10, 10, 1.0, 1.08)
    assert judge_ratio(r, 0.03) == "unresolved"


def test_mann_whitney_matches_scipy_on_a_small_hand_checked_case():
    # scipy.stats.mannwhitneyu([2,3,4,4,6,9,10], [1,2,2,3,5,8], method="asymptotic")
    # gives U = 30.5, p = 0.19482267881995718 (continuity and tie corrections on).
    r = mann_whitney_u([1, 2, 2, 3, 5, 8], [2, 3, 4, 4, 6, 9, 10])
    assert r.u == 30.5
    assert r.p_value == pytest.approx(0.19482267881995718, rel=1e-12)
    assert r.prob_candidate_slower == pytest.approx(30.5 / 42)
    same = mann_whitney_u([1, 1, 1], [1, 1, 1])
    assert same.p_value == 1.0 and same.prob_candidate_slower == 0.5


def test_decode_samples_little_endian_int64():
    raw = np.array([1, 2, 300_000], dtype="<i8").tobytes()
    assert decode_samples_ns(base64.b64encode(raw).decode()).tolist() == [1, 2, 300_000]
    with pytest.raises(UsageError):
        decode_samples_ns(base64.b64encode(b"1234567").decode())
    with pytest.raises(UsageError):
        decode_samples_ns("not base64!")
