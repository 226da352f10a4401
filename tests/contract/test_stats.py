"""Latency statistics against hand-computed answers and reference/measurement.md §3.4.

Expected CI ranks and binomial CDF values were computed once with
scipy.stats.quantile_test / scipy.stats.binom (scipy 1.17) and are written here
literally; edgequal itself does not depend on scipy.
"""

import json
import math
import time

import numpy as np
import pytest
from edgequal.contract import stats
from edgequal.contract.errors import BadInput

# ---------------------------------------------------------------------------
# nearest rank


@pytest.mark.parametrize(
    ("percent", "expected"),
    [(50, 50), (90, 90), (95, 95), (99, 99), (100, 100), (0, 1), (0.5, 1), (1, 1), (1.5, 2)],
)
def test_nearest_rank_of_1_to_100(percent, expected):
    assert stats.nearest_rank(list(range(1, 101)), percent) == expected


def test_nearest_rank_small_sets():
    values = [10, 20, 30, 40]
    assert stats.nearest_rank(values, 25) == 10  # ceil(1.0) = rank 1
    assert stats.nearest_rank(values, 26) == 20  # ceil(1.04) = rank 2
    assert stats.nearest_rank(values, 75) == 30
    assert stats.nearest_rank(values, 76) == 40
    assert stats.nearest_rank([7], 99.9) == 7


def test_nearest_rank_is_not_fooled_by_float_rounding():
    # 99.9 / 100 * 10000 == 9990.000000000002 in floats; the rank must still be 9990.
    values = np.arange(1, 10001)
    assert stats.nearest_rank(values, 99.9) == 9990
    assert stats.nearest_rank(np.arange(1, 1001), 99.9) == 999
    assert stats.nearest_rank_index(10000, 99.9) == 9989


def test_nearest_rank_rejects_bad_input():
    with pytest.raises(BadInput):
        stats.nearest_rank([], 50)
    with pytest.raises(BadInput):
        stats.nearest_rank([1, 2], 101)
    with pytest.raises(BadInput):
        stats.nearest_rank([1, 2], -1)


# ---------------------------------------------------------------------------
# binomial CDF


def test_log_factorial_matches_lgamma_in_table_and_stirling_ranges():
    ks = [0, 1, 2, 10, 255, 256, 257, 1000, 123456, 1_000_000]
    table = stats._log_factorial_range(max(ks))
    for k, value in zip(ks, table[ks], strict=True):
        assert value == pytest.approx(math.lgamma(k + 1), rel=1e-14, abs=1e-14)


def test_binom_cdf_small_exact_values():
    assert stats.binom_cdf_vector(10, 0.5)[3] == pytest.approx(176 / 1024, rel=1e-13)
    np.testing.assert_allclose(
        stats.binom_cdf_vector(4, 0.5), np.array([1, 5, 11, 15, 16]) / 16, rtol=1e-13
    )
    assert stats.binom_cdf_vector(2, 0.25)[0] == pytest.approx(0.5625, rel=1e-13)


def test_binom_cdf_edges():
    assert stats.binom_cdf_vector(10, 0.3)[10] == pytest.approx(1.0, rel=1e-13)
    assert stats.binom_cdf_vector(5, 0.0)[0] == 1.0
    assert stats.binom_cdf_vector(5, 1.0)[4] == 0.0
    np.testing.assert_array_equal(stats.binom_cdf_vector(3, 1.0), [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(stats.binom_cdf_vector(0, 0.4), [1.0])
    with pytest.raises(BadInput):
        stats.binom_cdf_vector(10, 1.5)
    with pytest.raises(BadInput):
        stats.binom_cdf_vector(-1, 0.5)


@pytest.mark.parametrize(
    ("k", "n", "p", "expected"),
    [
        (9, 1000, 0.01, 0.45730059217488683),
        (980, 1000, 0.99, 0.003288359787727489),
        (9890, 10000, 0.99, 0.16939377362840238),
        (989500, 1_000_000, 0.99, 3.158565879248633e-07),
        (2, 3688, 0.001, 0.28732581782432376),
    ],
)
def test_binom_cdf_matches_scipy_for_large_n(k, n, p, expected):
    assert stats.binom_cdf_vector(n, p)[k] == pytest.approx(expected, rel=1e-8)


def test_binom_cdf_vector_for_a_million_is_fast_and_normalised():
    start = time.thread_time()  # this thread's CPU time: other jobs on the machine do not count
    cdf = stats.binom_cdf_vector(1_000_000, 0.99)
    elapsed_s = time.thread_time() - start
    assert cdf.shape == (1_000_001,)
    assert cdf[-1] == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(cdf) >= -1e-15)  # non-decreasing
    assert cdf[989500] == pytest.approx(3.158565879248633e-07, rel=1e-8)
    assert elapsed_s < 5.0


# ---------------------------------------------------------------------------
# order-statistic confidence intervals


@pytest.mark.parametrize(
    ("n", "q", "expected"),
    [
        # First n at which a two-sided 95 % CI exists (measurement.md §3.4 table).
        (5, 0.5, None),
        (6, 0.5, (1, 6)),
        (35, 0.9, None),
        (36, 0.9, (29, 36)),
        (367, 0.99, None),
        (368, 0.99, (360, 368)),
        (3687, 0.999, None),
        (3688, 0.999, (3680, 3688)),
        # Widths quoted in §3.4: p99 at n=1000 is [p98.3, p99.7], p50 is [p46.9, p53.2].
        (1000, 0.99, (983, 997)),
        (1000, 0.5, (469, 532)),
        (1000, 0.9, (881, 919)),
        (500, 0.99, (490, 500)),
        (3000, 0.99, (2959, 2981)),
        (10000, 0.99, (9880, 9920)),
        (10000, 0.5, (4902, 5099)),
        (100, 0.5, (40, 61)),
        (0, 0.5, None),
        (1, 0.5, None),
    ],
)
def test_quantile_ci_ranks_match_scipy_quantile_test(n, q, expected):
    assert stats.quantile_ci_ranks(n, q) == expected


def test_quantile_ci_ranks_at_other_confidence():
    # With 90 % confidence the interval narrows and exists from fewer samples.
    assert stats.quantile_ci_ranks(5, 0.5, confidence=0.90) == (1, 5)
    assert stats.quantile_ci_ranks(4, 0.5, confidence=0.90) is None


def test_quantile_ci_ranks_reject_percent_instead_of_fraction():
    with pytest.raises(BadInput):
        stats.quantile_ci_ranks(1000, 99)
    with pytest.raises(BadInput):
        stats.quantile_ci_ranks(1000, 0.5, confidence=95)


def test_quantile_ci_returns_values():
    values = np.arange(101, 201)  # ranks 1..100 hold 101..200
    assert stats.quantile_ci(values, 0.5) == (140, 161)
    assert stats.quantile_ci(values, 0.99) is None


# ---------------------------------------------------------------------------
# latency summary


def test_summarize_1_to_100_ms():
    samples_ns = np.arange(1, 101, dtype=np.int64) * 1_000_000
    summary = stats.summarize_latency(samples_ns)
    sd_ms = math.sqrt(100 * 101 / 12)  # sample sd of 1..n is sqrt(n(n+1)/12)
    assert summary == {
        "count": 100,
        "min_ms": 1.0,
        "mean_ms": 50.5,
        "sd_ms": round(sd_ms, 6),
        "cv": round(sd_ms / 50.5, 6),
        "p50_ms": 50.0,
        "p90_ms": 90.0,
        "p95_ms": 95.0,
        "p99_ms": None,
        "p99_9_ms": None,
        "max_ms": 100.0,
        "p50_ci_ms": [40.0, 61.0],
        "p99_ci_ms": None,
        "claims": stats.percentile_claims(samples_ns),
    }
    assert summary["claims"]["p90"]["rank"] == 98  # t = 3 of 100 at p90
    assert summary["claims"]["p99"] == {
        "percent": 99.0,
        "rank": None,
        "value_ms": None,
        "needs": 838,
    }
    assert summary["sd_ms"] == 29.011492
    json.dumps(summary, allow_nan=False)


def test_summarize_reports_p99_from_368_samples_and_p999_from_3688():
    summary = stats.summarize_latency(np.arange(1, 401, dtype=np.int64) * 1_000_000)
    assert summary["p99_ms"] == 396.0
    assert summary["p99_ci_ms"] == [392.0, 400.0]
    assert summary["p99_9_ms"] is None
    assert stats.summarize_latency(np.ones(367, dtype=np.int64))["p99_ms"] is None
    assert stats.summarize_latency(np.ones(368, dtype=np.int64))["p99_ms"] == 0.000001

    big = stats.summarize_latency(np.arange(1, 3689, dtype=np.int64) * 1000)
    assert big["p99_9_ms"] == 3.685  # rank ceil(0.999 * 3688) = 3685, in µs -> ms
    assert big["p50_ms"] == 1.844


def test_summarize_shuffled_input_and_ns_precision():
    rng = np.random.default_rng(7)
    samples_ns = rng.permutation(np.array([1_234_567, 2_000_001, 3_000_000, 999_999, 5_000_000]))
    summary = stats.summarize_latency(samples_ns)
    assert summary["min_ms"] == 0.999999
    assert summary["p50_ms"] == 2.000001
    assert summary["max_ms"] == 5.0
    assert summary["p90_ms"] is None  # needs 10 samples
    assert summary["p95_ms"] is None  # needs 20
    assert summary["p50_ci_ms"] is None  # needs 6


def test_summarize_small_counts():
    one = stats.summarize_latency(np.array([2_500_000]))
    assert one["count"] == 1
    assert one["sd_ms"] is None and one["cv"] is None
    assert one["p50_ms"] == one["min_ms"] == one["max_ms"] == 2.5

    ten = stats.summarize_latency(np.arange(1, 11) * 1_000_000)
    assert ten["p90_ms"] == 9.0
    assert ten["p95_ms"] is None
    twenty = stats.summarize_latency(np.arange(1, 21) * 1_000_000)
    assert twenty["p95_ms"] == 19.0


def test_summarize_known_cv():
    # mean 10, sample sd sqrt(((-2)^2 + 0 + 2^2) / 2) = 2, cv 0.2
    summary = stats.summarize_latency(np.array([8, 10, 12]) * 1_000_000)
    assert summary["mean_ms"] == 10.0
    assert summary["sd_ms"] == 2.0
    assert summary["cv"] == 0.2


def test_summarize_rejects_bad_samples():
    with pytest.raises(BadInput):
        stats.summarize_latency(np.array([], dtype=np.int64))
    with pytest.raises(BadInput):
        stats.summarize_latency(np.ones((2, 2)))
    with pytest.raises(BadInput):
        stats.summarize_latency(np.array([1.0, float("nan")]))


# ---------------------------------------------------------------------------
# steady state


def test_steady_when_flat():
    result = stats.steady_state(np.full(30, 1_000_000))
    assert result == stats.SteadyState(True, None, 1.0, 0.0)


def test_not_steady_with_too_few_samples():
    result = stats.steady_state(np.full(19, 1_000_000))
    assert result.steady is False
    assert "20" in result.reason
    assert result.median_ratio is None and result.spread is None


def test_not_steady_when_median_still_moving():
    samples = [1000] * 10 + [1030] * 10  # median up 3 %, limit 2 %
    result = stats.steady_state(samples)
    assert result.steady is False
    assert result.median_ratio == pytest.approx(1.03)
    assert result.spread == 0.0
    assert "median" in result.reason


def test_steady_when_median_within_tolerance():
    result = stats.steady_state([1000] * 10 + [1010] * 10)
    assert result.steady is True
    assert result.median_ratio == pytest.approx(1.01)


def test_a_few_outliers_do_not_make_a_window_unsteady():
    # A 12 us model preempted 3 times in 100 runs: CV 0.51, but median and MAD unmoved.
    window = [12_000, 12_100, 11_900, 12_050, 11_950] * 20
    window[7] = window[40] = window[90] = 60_000
    samples = np.array(window + window)
    last = samples[-100:]
    assert last.std(ddof=1) / last.mean() > 0.5
    result = stats.steady_state(samples)
    assert result.steady is True
    # MAD of the last window: |x - 12000| is 0 (x21), 50 (x38), 100 (x38), 48000 (x3): median 50
    assert result.spread == pytest.approx(1.4826 * 50 / 12_000)


def test_not_steady_when_window_is_widely_spread():
    # last window 10 x 800, 10 x 1200: median 1000, MAD 200, spread 0.2965 (limit 0.10)
    samples = [1000] * 20 + [800, 1200] * 10
    result = stats.steady_state(samples)
    assert result.steady is False
    assert result.median_ratio == 1.0
    assert result.spread == pytest.approx(1.4826 * 200 / 1000)
    assert "spread" in result.reason


def test_steady_state_compares_the_last_two_halves_unless_a_window_is_given():
    samples = [5000] * 50 + [1000] * 8
    assert stats.steady_state(samples, window=4).steady is True
    halves = stats.steady_state([5000] * 50 + [1000] * 40)  # 45 x 5000 vs 5 x 5000 + 40 x 1000
    assert halves.steady is False and halves.median_ratio == pytest.approx(0.2)
    with pytest.raises(BadInput):
        stats.steady_state(samples, window=1)


# ---------------------------------------------------------------------------
# sustained windows


def test_stability_peak_and_sustained():
    assert stats.stability([100, 98, 99]) == pytest.approx(0.98)
    assert stats.stability([0, 0]) == 0.0
    assert stats.peak_rate([95, 100, 120]) == 100.0
    assert stats.peak_rate([95]) == 95.0
    assert stats.sustained_rate(list(range(1, 16))) == 10.5  # median of 6..15
    assert stats.sustained_rate([3, 1, 2]) == 2.0
    with pytest.raises(BadInput):
        stats.stability([])
    with pytest.raises(BadInput):
        stats.peak_rate([1, float("nan")])


@pytest.mark.parametrize(
    ("stability", "throttled", "under_voltage", "interference", "crashed", "verdict"),
    [
        (0.99, False, False, False, False, "stable"),
        (0.97, False, False, False, False, "stable"),
        (0.99, True, False, False, False, "degraded"),
        (0.95, False, False, False, False, "unexplained"),
        (0.90, True, False, False, False, "degraded"),
        (0.89, True, False, False, False, "failed"),
        (0.50, False, False, False, False, "unexplained"),  # no cause measured: never failed
        (0.50, False, False, True, False, "inconclusive"),  # interference never fails a run
        (0.95, True, False, True, False, "inconclusive"),
        (0.50, True, False, True, False, "failed"),  # throttling failed it without interference
        (1.0, False, True, False, False, "failed"),
        (1.0, False, False, False, True, "failed"),
    ],
)
def test_sustained_verdict(stability, throttled, under_voltage, interference, crashed, verdict):
    assert (
        stats.sustained_verdict(stability, throttled, under_voltage, interference, crashed)
        == verdict
    )


def test_first_drop_time():
    starts = [0, 30, 60, 90]
    assert stats.first_drop_time_s(starts, [100, 99, 96, 95], peak=100) == 60.0
    assert stats.first_drop_time_s(starts, [100, 99, 98, 97.5], peak=100) is None
    assert stats.first_drop_time_s(starts, [100, 95, 90, 85], peak=100, drop=0.12) == 90.0


def test_first_drop_time_needing_consecutive_windows():
    starts = [0, 30, 60, 90, 120]
    rates = [100, 96, 99, 96, 95]
    assert stats.first_drop_time_s(starts, rates, peak=100) == 30.0
    assert stats.first_drop_time_s(starts, rates, peak=100, consecutive=2) == 90.0
    with pytest.raises(BadInput):
        stats.first_drop_time_s([0, 30], [100], peak=100)


# ---------------------------------------------------------------------------
# percentile claims at 99 % confidence (MLPerf LoadGen early stopping)


def test_claim_of_p90_from_1024_samples_is_x945():
    # The worked example: t = 80, so x(1024 - 80 + 1) = x(945), about p92.3.
    assert stats.claim_overshoot_count(1024, 90) == 80
    assert stats.claim_rank(1024, 90) == 945
    claims = stats.percentile_claims(np.arange(1, 1025, dtype=np.int64) * 1_000_000)
    assert claims["confidence"] == 0.99
    assert claims["p90"]["value_ms"] == 945.0
    assert claims["p90"]["claimed_percent"] == 92.285


def test_claim_that_would_be_the_maximum_needs_samples():
    claims = stats.percentile_claims(np.arange(1, 301, dtype=np.int64) * 1000)
    assert claims["p99"]["rank"] is None and claims["p99"]["value_ms"] is None
    assert claims["p99"]["needs"] == 838
    assert claims["p99_9"]["needs"] == 8403
    assert claims["p90"]["rank"] is not None


def _scipy_claim(n: int, percent: float) -> int:
    """t recomputed with scipy: the largest count with BinomCDF(t; n, 1 - p) <= 0.01."""
    binom = pytest.importorskip("scipy.stats").binom
    cdf = binom.cdf(np.arange(n + 1), n, 1 - percent / 100)
    ok = np.flatnonzero(cdf <= 0.01)
    return int(ok[-1]) if ok.size else -1


@pytest.mark.parametrize("n", [20, 81, 300, 1024, 5000, 9000])
def test_percentile_claims_match_scipy_recomputation_from_raw_samples(n):
    binom = pytest.importorskip("scipy.stats").binom
    rng = np.random.default_rng(n)
    raw_ns = (rng.lognormal(mean=14.0, sigma=0.4, size=n)).astype(np.int64)
    claims = stats.summarize_latency(raw_ns)["claims"]
    ordered = np.sort(raw_ns)
    for key, percent in stats.CLAIM_PERCENTS:
        t = _scipy_claim(n, percent)
        claim = claims[key]
        if t < 2:
            assert claim["rank"] is None and claim["value_ms"] is None
            # needs: the first n' whose t reaches 2 (scipy's CDF falls with n here).
            needs = claim["needs"]
            q = 1 - percent / 100
            assert binom.cdf(2, needs, q) <= 0.01 < binom.cdf(2, needs - 1, q)
            continue
        assert claim["rank"] == n - t + 1
        assert claim["value_ms"] == round(ordered[n - t] / 1e6, 6)
        # 99 %: the true percentile lies at or below the claim.
        assert binom.cdf(t, n, 1 - percent / 100) <= 0.01
        assert claim["claimed_percent"] == round(100 * (n - t + 1) / n, 3)
        # A tighter claim: n' samples whose claim is half as far above the percentile.
        target = percent + (100 * (n - t + 1) / n - percent) / 2
        m = claim["tighter_needs"]
        assert 100 * (m - _scipy_claim(m, percent) + 1) / m <= target
        prev = _scipy_claim(m - 1, percent)
        assert prev < 2 or 100 * (m - prev) / (m - 1) > target


def test_percentile_claims_cost_grows_slowly_with_samples():
    # O(sqrt(n)) a claim: 600,000 samples' claims cost about what 30,000 do.
    small = np.arange(1, 30_001, dtype=np.int64)
    large = np.arange(1, 600_001, dtype=np.int64)
    t0 = time.thread_time()
    stats.percentile_claims(small)
    t1 = time.thread_time()
    stats.percentile_claims(large)
    t2 = time.thread_time()
    assert t2 - t1 < 10 * max(t1 - t0, 0.005)


# ---------------------------------------------------------------------------
# the spread of repeated runs


def test_repeat_spread_of_five_runs_by_hand():
    # p50 of five runs (ms); sorted 1.0 1.1 1.2 1.3 2.0: the 0.2-trimmed mean drops one
    # from each end, (1.1 + 1.2 + 1.3) / 3 = 1.2; mean 1.32, sample sd 0.396232.
    out = stats.repeat_spread([1.2, 2.0, 1.0, 1.3, 1.1])
    assert out == {
        "n": 5, "median": 1.2, "mean": 1.32, "cv": round(0.3962322551231 / 1.32, 6),
        "trimmed_mean": 1.2,
    }  # fmt: skip
    assert stats.repeat_spread([4.0])["cv"] is None


@pytest.mark.parametrize("n", [3, 4, 5, 9, 10, 11])
def test_trimmed_mean_matches_scipy(n):
    scipy_stats = pytest.importorskip("scipy.stats")
    values = np.random.default_rng(n).lognormal(size=n)
    assert stats.trimmed_mean(values) == pytest.approx(scipy_stats.trim_mean(values, 0.2))
    spread = stats.repeat_spread(values)
    assert spread["cv"] == pytest.approx(scipy_stats.variation(values, ddof=1), abs=1e-6)
