"""Latency statistics: nearest-rank percentiles, order-statistic confidence intervals,
steady-state detection and the sustained-window scores.

Pure functions over numbers, numpy and math only (no scipy: the agent must fit on a
1 GB board). Conventions, from DESIGN.md and reference/measurement.md §3.4 and §6:

- Percentiles are nearest rank: the value of rank ``ceil(p/100 * n)`` (1-based) in the
  sorted samples, so every reported percentile is a latency that was actually observed.
- Confidence intervals for a quantile are distribution-free: ranks ``l`` and ``u`` of
  the order statistics chosen from the binomial distribution (what
  ``scipy.stats.quantile_test(...).confidence_interval()`` computes).
- Latency samples arrive as integer nanoseconds; reports carry milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .errors import BadInput

# Fewest samples for which a percentile is reported at all. p99 and p99.9 use the
# first n at which a two-sided 95 % order-statistic CI exists (measurement.md §3.4);
# p90 and p95 only need enough samples not to be the maximum itself most of the time.
MIN_SAMPLES_P90 = 10
MIN_SAMPLES_P95 = 20
MIN_SAMPLES_P99 = 368
MIN_SAMPLES_P99_9 = 3688

# Sustained verdict thresholds on stability = worst window / best window (3DMark rule).
STABLE_MIN_STABILITY = 0.97
DEGRADED_MIN_STABILITY = 0.90

_NS_PER_MS = 1_000_000
_ROUND_DIGITS = 6


# ---------------------------------------------------------------------------
# Percentiles


def nearest_rank_index(n: int, percent: float) -> int:
    """0-based index of the nearest-rank ``percent`` percentile among ``n`` sorted values."""
    if n <= 0:
        raise BadInput("a percentile needs at least one sample")
    if not 0.0 <= percent <= 100.0:
        raise BadInput(f"percentile must be within 0..100, got {percent}")
    # Exact decimal arithmetic: 99.9/100*10000 is 9990.000000000002 in floats, which
    # would push ceil() one rank too high.
    rank = math.ceil(Fraction(str(percent)) * n / 100)
    return min(max(rank, 1), n) - 1


def nearest_rank(sorted_values, percent: float):
    """Nearest-rank percentile of already sorted values: x(ceil(percent/100 * n)), rank >= 1."""
    return sorted_values[nearest_rank_index(len(sorted_values), percent)]


# ---------------------------------------------------------------------------
# Exact binomial distribution in log space

# log(k!) for small k straight from math.lgamma; larger k use Stirling's series, whose
# truncation error past k = 256 is far below float64 resolution.
_LOG_FACTORIAL_TABLE_SIZE = 256
_LOG_FACTORIAL_TABLE = np.array(
    [math.lgamma(k + 1) for k in range(_LOG_FACTORIAL_TABLE_SIZE)], dtype=np.float64
)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirling_log_gamma(x: np.ndarray) -> np.ndarray:
    """lgamma(x) for float x >= 257 by Stirling's series (error far below float64 ulp)."""
    inv = 1.0 / x
    inv2 = inv * inv
    series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0)))
    return (x - 0.5) * np.log(x) - x + _HALF_LOG_2PI + series


def _log_factorial_range(m: int) -> np.ndarray:
    """log(k!) for k = 0..m (a table for small k, Stirling's series beyond)."""
    out = np.empty(m + 1, dtype=np.float64)
    head = min(m + 1, _LOG_FACTORIAL_TABLE_SIZE)
    out[:head] = _LOG_FACTORIAL_TABLE[:head]
    if m + 1 > head:
        out[head:] = _stirling_log_gamma(np.arange(head + 1, m + 2, dtype=np.float64))
    return out


def _log_factorial(k: np.ndarray) -> np.ndarray:
    """log(k!) for non-negative integral float k (the table below 256, Stirling beyond)."""
    out = np.empty(k.shape, dtype=np.float64)
    small = k < _LOG_FACTORIAL_TABLE_SIZE
    out[small] = _LOG_FACTORIAL_TABLE[k[small].astype(np.int64)]
    out[~small] = _stirling_log_gamma(k[~small] + 1.0)
    return out


def _check_binom_args(n: int, p: float) -> None:
    if n < 0:
        raise BadInput(f"binomial n must be >= 0, got {n}")
    if not 0.0 <= p <= 1.0:
        raise BadInput(f"binomial p must be within 0..1, got {p}")


def binom_log_pmf(n: int, p: float, k_max: int | None = None) -> np.ndarray:
    """log P[X = k] for X ~ Binomial(n, p) and k = 0..k_max (default n); -inf where zero."""
    _check_binom_args(n, p)
    k_max = n if k_max is None else min(k_max, n)
    k = np.arange(k_max + 1, dtype=np.int64)
    if p == 0.0 or p == 1.0:
        out = np.full(k.shape, -np.inf)
        hit = 0 if p == 0.0 else n
        if hit <= k_max:
            out[hit] = 0.0
        return out
    log_fact = _log_factorial_range(n)
    # log C(n, k) = log n! - log k! - log (n-k)!; log_fact[::-1][k] is log (n-k)!.
    log_choose = log_fact[n] - log_fact[: k_max + 1] - log_fact[::-1][: k_max + 1]
    return log_choose + k * math.log(p) + (n - k) * math.log1p(-p)


def binom_cdf_vector(n: int, p: float) -> np.ndarray:
    """P[X <= k] for X ~ Binomial(n, p) and every k = 0..n (length n + 1).

    Summed in log space (``logaddexp.accumulate``) so that tails far below 1e-308 neither
    underflow nor lose the terms that follow them; fast for n in the millions.
    """
    cdf = np.exp(np.logaddexp.accumulate(binom_log_pmf(n, p)))
    # Rounding can leave the running sum a few ulps above 1.
    return np.minimum(cdf, 1.0)


# ---------------------------------------------------------------------------
# Order-statistic confidence intervals


def quantile_ci_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (l, u) of a distribution-free two-sided CI for the q-quantile (q in 0..1).

    l is the largest rank with BinomCDF(l-1; n, q) <= alpha/2, u the smallest rank with
    BinomCDF(u-1; n, q) >= 1 - alpha/2 (measurement.md §3.4); the interval is
    [x(l), x(u)] of the sorted samples. None when either rank falls outside 1..n, i.e.
    there are too few samples for this quantile at this confidence (p99 needs n >= 368).
    """
    if not 0.0 < q < 1.0:
        raise BadInput(f"quantile must be a fraction strictly between 0 and 1, got {q}")
    if not 0.0 < confidence < 1.0:
        raise BadInput(f"confidence must be strictly between 0 and 1, got {confidence}")
    if n < 1:
        return None
    alpha = 1.0 - confidence
    # cdf_before[r - 1] = BinomCDF(r - 1; n, q) for ranks r = 1..n.
    cdf_before = binom_cdf_vector(n, q)[:n]
    low_ok = np.flatnonzero(cdf_before <= alpha / 2)
    high_ok = np.flatnonzero(cdf_before >= 1.0 - alpha / 2)
    if low_ok.size == 0 or high_ok.size == 0:
        return None
    return int(low_ok[-1]) + 1, int(high_ok[0]) + 1


def quantile_ci(sorted_values, q: float, confidence: float = 0.95) -> tuple[Any, Any] | None:
    """Values [x(l), x(u)] of the order-statistic CI for the q-quantile, or None."""
    ranks = quantile_ci_ranks(len(sorted_values), q, confidence)
    if ranks is None:
        return None
    return sorted_values[ranks[0] - 1], sorted_values[ranks[1] - 1]


# ---------------------------------------------------------------------------
# Percentile claims at stated confidence (MLPerf LoadGen early stopping)

# The percentiles a summary claims, as (key, percent).
CLAIM_PERCENTS = (("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))
# A claim holds at this confidence: the true percentile lies at or below it.
CLAIM_CONFIDENCE = 0.99


def claim_overshoot_count(n: int, percent: float, confidence: float = CLAIM_CONFIDENCE) -> int:
    """t: the largest count with BinomCDF(t; n, 1 - p) <= 1 - confidence, or -1 if none.

    The number of samples above the true p-quantile is Binomial(n, 1 - p); with t so
    chosen, x(n - t + 1) is at or above the p-quantile with the stated confidence
    (MLPerf LoadGen's early-stopping estimate, at its 99 %).
    """
    if n < 1:
        return -1
    q = 1.0 - _fraction(percent)
    # t lies below the mean n*q (the CDF there is about one half), and the mass more
    # than 12 standard deviations below the mean is under 1e-30: sum only the band
    # between, so a claim costs O(sqrt(n)) whatever the sample count.
    mean, sd = n * q, math.sqrt(n * q * (1.0 - q))
    k_hi = min(n, math.ceil(mean) + 1)
    k_lo = max(0, math.floor(mean - 12.0 * sd) - 10)
    k = np.arange(k_lo, k_hi + 1, dtype=np.float64)
    log_pmf = (
        _log_factorial(np.array([float(n)]))[0]
        - _log_factorial(k)
        - _log_factorial(n - k)
        + k * math.log(q)
        + (n - k) * math.log1p(-q)
    )
    cdf = np.exp(np.logaddexp.accumulate(log_pmf))
    ok = np.flatnonzero(cdf <= 1.0 - confidence)
    return k_lo + int(ok[-1]) if ok.size else (k_lo - 1 if k_lo > 0 else -1)


def claim_rank(n: int, percent: float, confidence: float = CLAIM_CONFIDENCE) -> int | None:
    """1-based rank n - t + 1 of the order statistic claimed for ``percent`` from ``n``
    samples, or None when it would be the maximum or beyond it (t < 2)."""
    t = claim_overshoot_count(n, percent, confidence)
    return n - t + 1 if t >= 2 else None


def _fraction(percent: float) -> float:
    if not 0.0 < percent < 100.0:
        raise BadInput(f"a claimed percentile must be strictly between 0 and 100, got {percent}")
    return float(Fraction(str(percent)) / 100)


def _first_n(test, lo: int) -> int:
    """Smallest n > lo with test(n) true, given test(lo) false (doubling, then bisection).

    Where ``test`` is not monotone in n (a claim's overshoot is a sawtooth) the answer is
    an n where it turns true with n - 1 false, the first such one past the doubling's start.
    """
    hi = max(lo * 2, lo + 1)
    while not test(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid
    return hi


def claim_needs_samples(percent: float, confidence: float = CLAIM_CONFIDENCE) -> int:
    """Fewest samples from which ``percent`` has a claim below the maximum (t >= 2)."""
    _fraction(percent)
    return _first_n(lambda n: claim_overshoot_count(n, percent, confidence) >= 2, 1)


def claimed_percent(n: int, rank: int) -> float:
    """The percentile rank ``rank`` of ``n`` stands for: 100 * rank / n."""
    return 100.0 * rank / n


def tighter_claim_needs(n: int, percent: float, confidence: float = CLAIM_CONFIDENCE) -> int | None:
    """Samples for a claim half as far above ``percent`` as the one ``n`` samples give.

    With n samples the claim stands for percentile c = 100 (n - t + 1) / n > percent;
    the answer is the first n' past n whose claim stands at or below
    percent + (c - percent) / 2 (about 4 n: the overshoot shrinks as 1 / sqrt(n)).
    None when n gives no claim.
    """
    rank = claim_rank(n, percent, confidence)
    if rank is None:
        return None
    target = percent + (claimed_percent(n, rank) - percent) / 2

    def tight(m: int) -> bool:
        r = claim_rank(m, percent, confidence)
        return r is not None and claimed_percent(m, r) <= target

    return _first_n(tight, n)


def percentile_claims(sorted_ns, confidence: float = CLAIM_CONFIDENCE) -> dict:
    """The 99 % claims for p90, p95, p99 and p99.9 of sorted integer-ns samples (ms).

    Per key of CLAIM_PERCENTS: ``{percent, rank, value_ms, claimed_percent,
    tighter_needs}`` where a claim below the maximum exists, else ``{percent, rank:
    None, value_ms: None, needs}`` (the samples from which it would). ``value_ms`` is
    x(rank), the bound under which the true percentile lies with ``confidence``.
    """
    n = len(sorted_ns)
    out: dict = {"confidence": confidence}
    for key, percent in CLAIM_PERCENTS:
        rank = claim_rank(n, percent, confidence)
        if rank is None:
            out[key] = {
                "percent": percent,
                "rank": None,
                "value_ms": None,
                "needs": claim_needs_samples(percent, confidence),
            }
            continue
        out[key] = {
            "percent": percent,
            "rank": rank,
            "value_ms": _ms(sorted_ns[rank - 1]),
            "claimed_percent": round(claimed_percent(n, rank), 3),
            "tighter_needs": tighter_claim_needs(n, percent, confidence),
        }
    return out


# ---------------------------------------------------------------------------
# Latency summary


def _ms(value_ns: float) -> float:
    return round(float(value_ns) / _NS_PER_MS, _ROUND_DIGITS)


def _as_samples(samples_ns) -> np.ndarray:
    samples = np.asarray(samples_ns)
    if samples.ndim != 1:
        raise BadInput(f"latency samples must be a 1-D array, got shape {samples.shape}")
    if samples.size == 0:
        raise BadInput("no latency samples to summarize")
    if not np.issubdtype(samples.dtype, np.number) or np.issubdtype(
        samples.dtype, np.complexfloating
    ):
        raise BadInput(f"latency samples must be real numbers, got dtype {samples.dtype}")
    if np.issubdtype(samples.dtype, np.floating) and not np.all(np.isfinite(samples)):
        raise BadInput("latency samples contain NaN or Inf")
    return samples


def summarize_latency(samples_ns) -> dict:
    """JSON-ready latency summary in milliseconds of integer-nanosecond samples.

    Keys: count, min_ms, mean_ms, sd_ms (sample sd, ddof=1; None for one sample),
    cv (sd/mean), p50_ms, p90_ms, p95_ms, p99_ms, p99_9_ms (nearest rank; None when
    fewer than MIN_SAMPLES_* samples), max_ms, p50_ci_ms and p99_ci_ms ([lo, hi] of the
    95 % order-statistic CI, None when it does not exist), and claims (the 99 %
    percentile claims, :func:`percentile_claims`). Floats rounded to 6 decimals.
    """
    samples = _as_samples(samples_ns)
    n = int(samples.size)
    ordered = np.sort(samples)
    # float64 for the moments: int64 sums of ns over many samples stay exact in float64
    # up to 2**53 ns (104 days), far beyond any run.
    as_float = ordered.astype(np.float64)
    mean_ns = float(as_float.mean())
    sd_ns = float(as_float.std(ddof=1)) if n >= 2 else None
    if sd_ns is None:
        cv = None
    elif mean_ns > 0:
        cv = round(sd_ns / mean_ns, _ROUND_DIGITS)
    else:
        cv = None

    def pct(percent: float, min_samples: int) -> float | None:
        if n < min_samples:
            return None
        return _ms(nearest_rank(ordered, percent))

    def ci(q: float) -> list[float] | None:
        bounds = quantile_ci(ordered, q)
        return None if bounds is None else [_ms(bounds[0]), _ms(bounds[1])]

    return {
        "count": n,
        "min_ms": _ms(ordered[0]),
        "mean_ms": _ms(mean_ns),
        "sd_ms": None if sd_ns is None else _ms(sd_ns),
        "cv": cv,
        "p50_ms": pct(50, 1),
        "p90_ms": pct(90, MIN_SAMPLES_P90),
        "p95_ms": pct(95, MIN_SAMPLES_P95),
        "p99_ms": pct(99, MIN_SAMPLES_P99),
        "p99_9_ms": pct(99.9, MIN_SAMPLES_P99_9),
        "max_ms": _ms(ordered[-1]),
        "p50_ci_ms": ci(0.5),
        "p99_ci_ms": ci(0.99),
        "claims": percentile_claims(ordered),
    }


# ---------------------------------------------------------------------------
# The spread of repeated runs


TRIM_PROPORTION = 0.2


def trimmed_mean(values, proportion: float = TRIM_PROPORTION) -> float:
    """Mean after cutting ``floor(proportion * n)`` values from each end of the sorted
    values (``scipy.stats.trim_mean``'s rule; 0.2: the 20 % trimmed mean)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if ordered.size == 0:
        raise BadInput("a trimmed mean needs at least one value")
    if not 0.0 <= proportion < 0.5:
        raise BadInput(f"trim proportion must be within 0..0.5, got {proportion}")
    cut = int(proportion * ordered.size)
    return float(ordered[cut : ordered.size - cut].mean())


def repeat_spread(values) -> dict:
    """How one figure spread over N repeated runs on one board: ``{n, median, mean, cv,
    trimmed_mean}`` (cv = sample sd / mean, None under two runs or a zero mean;
    trimmed_mean the 0.2-trimmed mean). Labs compare boards by this, not by one run."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise BadInput("repeated runs' figures must be finite numbers, at least one")
    mean = float(v.mean())
    cv = float(v.std(ddof=1)) / mean if v.size >= 2 and mean != 0 else None
    return {
        "n": int(v.size),
        "median": round(float(np.median(v)), _ROUND_DIGITS),
        "mean": round(mean, _ROUND_DIGITS),
        "cv": None if cv is None else round(cv, _ROUND_DIGITS),
        "trimmed_mean": round(trimmed_mean(v), _ROUND_DIGITS),
    }


# ---------------------------------------------------------------------------
# Steady state during warm-up


# MAD of a normal distribution times this is its standard deviation.
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class SteadyState:
    """Whether warm-up latencies have settled, and the two numbers the decision used.

    ``median_ratio`` is median(last window) / median(previous window); ``spread`` the
    robust relative spread of the last window, 1.4826 x MAD / median (the CV a normal
    distribution with that MAD would have). Both None with too few samples.
    """

    steady: bool
    reason: str | None
    median_ratio: float | None
    spread: float | None


def robust_spread(samples) -> float:
    """1.4826 x median absolute deviation / median: a CV that a few outliers cannot dominate."""
    values = np.asarray(samples, dtype=np.float64).ravel()
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    if median == 0.0:
        return 0.0 if mad == 0.0 else math.inf
    return MAD_TO_SD * mad / median


def steady_state(
    samples_ns,
    window: int | None = None,
    median_tolerance: float = 0.02,
    max_spread: float = 0.10,
    min_window: int = 10,
) -> SteadyState:
    """Steady when the last window's median is within ``median_tolerance`` of the window
    before it and the last window's robust spread is below ``max_spread``.

    The DESIGN.md warm-up rule on robust statistics: medians and the MAD, not the mean
    and CV, because a handful of scheduler preemptions dominate the CV of a µs-scale
    model (Chen & Revels 2016, "Robust benchmarking in noisy environments"). The two
    windows are the last two halves of the samples (``window`` fixes their size).
    Fewer than ``2 * min_window`` samples are reported as not steady.
    """
    samples = np.asarray(samples_ns, dtype=np.float64).ravel()
    if window is None:
        window = max(min_window, samples.size // 2)
    if window < 2:
        raise BadInput(f"steady-state window must be at least 2 samples, got {window}")
    if samples.size < 2 * window:
        return SteadyState(
            False,
            f"need {2 * window} samples to compare two windows, have {samples.size}",
            None,
            None,
        )
    last = samples[-window:]
    previous = samples[-2 * window : -window]
    last_median = float(np.median(last))
    previous_median = float(np.median(previous))
    if previous_median == 0.0:
        median_ratio = 1.0 if last_median == 0.0 else math.inf
    else:
        median_ratio = last_median / previous_median
    spread = robust_spread(last)
    reasons = []
    if abs(median_ratio - 1.0) > median_tolerance:
        reasons.append(
            f"window median moved {abs(median_ratio - 1.0):.1%} (limit {median_tolerance:.1%})"
        )
    if spread >= max_spread:
        reasons.append(f"window spread (1.4826 MAD/median) {spread:.1%} (limit {max_spread:.1%})")
    return SteadyState(not reasons, "; ".join(reasons) or None, median_ratio, spread)


# ---------------------------------------------------------------------------
# Sustained (thermal) phase: scores over fixed-length windows of throughput


def _rates(rates) -> np.ndarray:
    values = np.asarray(rates, dtype=np.float64).ravel()
    if values.size == 0:
        raise BadInput("no sustained windows to score")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise BadInput("window rates must be finite and non-negative")
    return values


def stability(window_rates) -> float:
    """Worst window rate / best window rate (0.0 when nothing completed at all)."""
    values = _rates(window_rates)
    best = float(values.max())
    return float(values.min()) / best if best > 0 else 0.0


def peak_rate(rates) -> float:
    """Peak throughput: the best of the first two windows."""
    return float(_rates(rates)[:2].max())


def sustained_rate(rates) -> float:
    """Sustained throughput: the median of the last ten windows (all of them if fewer)."""
    return float(np.median(_rates(rates)[-10:]))


def sustained_verdict(
    stability: float,
    throttled: bool,
    under_voltage: bool,
    interference: bool = False,
    crashed: bool = False,
) -> str:
    """The sustained verdict (DESIGN.md, 3DMark 97 % rule), given the cause of any drop.

    ``stability`` is worst / best window over the windows interference did not touch.
    failed: a crash, under-voltage, or throttling with stability < 0.90; inconclusive:
    a drop that interference explains (it never fails a run); degraded: throttling, or
    stability < 0.97 with it; unexplained: stability < 0.97 with no cause measured;
    stable otherwise.
    """
    if crashed or under_voltage or (throttled and stability < DEGRADED_MIN_STABILITY):
        return "failed"
    if interference:
        return "inconclusive"
    if throttled:
        return "degraded"
    if stability < STABLE_MIN_STABILITY:
        return "unexplained"
    return "stable"


def first_drop_time_s(
    window_starts_s, rates, peak: float, drop: float = 0.03, consecutive: int = 1
) -> float | None:
    """Start time (s) of the first window whose rate is below (1 - drop) * peak, or None.

    With ``consecutive`` > 1 the drop must hold for that many windows in a row and the
    first of them is returned (measurement.md §6.4 uses 2 for t_3%).
    """
    starts = np.asarray(window_starts_s, dtype=np.float64).ravel()
    values = np.asarray(rates, dtype=np.float64).ravel()
    if starts.shape != values.shape:
        raise BadInput(
            f"{starts.size} window start times for {values.size} window rates; they must pair up"
        )
    if consecutive < 1:
        raise BadInput(f"consecutive must be >= 1, got {consecutive}")
    below = values < (1.0 - drop) * peak
    run = 0
    for i, is_below in enumerate(below):
        run = run + 1 if is_below else 0
        if run == consecutive:
            return float(starts[i - consecutive + 1])
    return None
