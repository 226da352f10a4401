"""Is a candidate slower than its baseline? Noise-aware tests on raw latency samples.

Pure functions over numpy arrays (no scipy). Two statistics, one decision:

- :func:`bootstrap_median_ratio`: a percentile-bootstrap confidence interval of
  ``median(candidate) / median(baseline)``, each side resampled independently with a
  seeded generator and a bounded number of iterations (Efron & Tibshirani, ch. 13).
  Medians, not means: a few preempted runs move a mean but barely a median.
- :func:`mann_whitney_u`: the rank-sum test with the normal approximation and the tie
  correction, plus the common-language effect size P(candidate sample > baseline sample).
  Reported beside the ratio; with thousands of samples it calls any shift significant,
  which is why the decision also needs a minimum effect size.

:func:`judge_ratio` reads the interval: slower when the whole interval lies above 1 (the
change is real) and the ratio itself is at least ``1 + min_effect`` (the change matters).
``compare`` shows it beside each latency row; the gate's pass or fail against a baseline
is the three-way verdict's (host/judge/verdict.py, host/judge/baseline.py), which shows
this interval in its message.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UsageError

# Fewest bootstrap iterations whatever the sample count: a 95 % percentile interval
# from fewer resamples rests on a handful of tail values.
MIN_ITERATIONS = 200
# Resampled values per side over all iterations: bounds the time (about a second for
# two sides of 100,000 samples) however many samples a report holds.
MAX_RESAMPLED_VALUES = 40_000_000
# Values per side resampled in one numpy call (memory of one chunk: 8 bytes each).
_CHUNK_VALUES = 4_000_000
_NS_PER_MS = 1e6


def decode_samples_ns(text: str) -> np.ndarray:
    """Raw latency samples of a report: base64 of little-endian int64 nanoseconds."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise UsageError(f"latency samples are not valid base64 ({e})") from e
    if len(raw) % 8:
        raise UsageError(f"latency samples are {len(raw)} bytes, not a whole number of int64")
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)


@dataclass(frozen=True)
class MedianRatio:
    """median(candidate) / median(baseline) with its bootstrap interval."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    iterations: int
    seed: int
    n_baseline: int
    n_candidate: int
    baseline_median_ms: float
    candidate_median_ms: float

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


def _bootstrap_medians(values: np.ndarray, iterations: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``iterations`` resamples (with replacement, same size) of ``values``."""
    n = values.size
    out = np.empty(iterations, dtype=np.float64)
    rows = max(1, _CHUNK_VALUES // n)
    done = 0
    while done < iterations:
        k = min(rows, iterations - done)
        idx = rng.integers(0, n, size=(k, n))
        out[done : done + k] = np.median(values[idx], axis=1)
        done += k
    return out


def bootstrap_iterations(n_baseline: int, n_candidate: int, requested: int) -> int:
    """Iterations actually run: ``requested``, bounded by the work cap, at least MIN_ITERATIONS."""
    if requested < 1:
        raise UsageError(f"bootstrap iterations must be at least 1, got {requested}")
    cap = MAX_RESAMPLED_VALUES // max(n_baseline, n_candidate, 1)
    return max(min(requested, cap), min(requested, MIN_ITERATIONS))


def bootstrap_median_ratio(
    baseline_ns,
    candidate_ns,
    *,
    confidence: float = 0.95,
    iterations: int = 2000,
    seed: int = 0,
) -> MedianRatio:
    """Percentile-bootstrap CI of median(candidate) / median(baseline); same seed, same answer."""
    base = np.asarray(baseline_ns, dtype=np.float64).ravel()
    cand = np.asarray(candidate_ns, dtype=np.float64).ravel()
    if base.size == 0 or cand.size == 0:
        raise UsageError("a median ratio needs samples on both sides")
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"confidence must be strictly between 0 and 1, got {confidence}")
    base_median = float(np.median(base))
    cand_median = float(np.median(cand))
    if base_median <= 0:
        raise UsageError("the baseline's median latency is not positive")
    iters = bootstrap_iterations(base.size, cand.size, iterations)
    rng = np.random.default_rng(seed)
    boot_base = _bootstrap_medians(base, iters, rng)
    boot_cand = _bootstrap_medians(cand, iters, rng)
    ratios = boot_cand / boot_base
    alpha = 1.0 - confidence
    lo, hi = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return MedianRatio(
        ratio=cand_median / base_median,
        ci_low=float(lo),
        ci_high=float(hi),
        confidence=confidence,
        iterations=iters,
        seed=seed,
        n_baseline=int(base.size),
        n_candidate=int(cand.size),
        baseline_median_ms=base_median / _NS_PER_MS,
        candidate_median_ms=cand_median / _NS_PER_MS,
    )


@dataclass(frozen=True)
class MannWhitney:
    """Rank-sum test of candidate against baseline (normal approximation, tie-corrected)."""

    u: float
    z: float
    p_value: float
    # P(candidate sample > baseline sample) + 0.5 P(equal): 0.5 means no shift.
    prob_candidate_slower: float

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks with ties given their average rank, and the size of each tie group."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average = ends - (counts - 1) / 2.0
    return average[inverse], counts


def mann_whitney_u(baseline, candidate) -> MannWhitney:
    """Two-sided Mann–Whitney U test; U counts candidate samples above baseline samples."""
    x = np.asarray(candidate, dtype=np.float64).ravel()
    y = np.asarray(baseline, dtype=np.float64).ravel()
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise UsageError("a rank-sum test needs samples on both sides")
    ranks, ties = _average_ranks(np.concatenate([x, y]))
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    tie_term = float(np.sum(ties.astype(np.float64) ** 3 - ties)) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    mean = n1 * n2 / 2.0
    if variance <= 0:
        z, p = 0.0, 1.0
    else:
        # Continuity correction towards the mean.
        delta = u - mean
        z = (delta - math.copysign(0.5, delta)) / math.sqrt(variance) if delta else 0.0
        p = math.erfc(abs(z) / math.sqrt(2.0))
    return MannWhitney(u=u, z=z, p_value=p, prob_candidate_slower=u / (n1 * n2))


def judge_ratio(r: MedianRatio, min_effect: float) -> str:
    """``slower``, ``faster``, ``same`` or ``unresolved`` (a large change the interval does not confirm).

    slower: the interval lies wholly above 1 and the ratio is at least 1 + min_effect;
    faster: the mirror image; same: the ratio is within min_effect of 1, or the interval
    is but the ratio alone is not (noise); unresolved otherwise.
    """
    if r.ci_low > 1.0 and r.ratio >= 1.0 + min_effect:
        return "slower"
    if r.ci_high < 1.0 and r.ratio <= 1.0 - min_effect:
        return "faster"
    if abs(r.ratio - 1.0) < min_effect:
        return "same"
    return "unresolved"
