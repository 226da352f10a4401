"""Where a series of nightly figures changed, beyond noise: E-Divisive (Matteson & James 2014).

E-Divisive is the detector Apache Otava (formerly hunter) runs on performance series, and
this module implements its published definition with numpy (the choice and the
alternatives: docs/history.md "The detector"):

- For a segment Z and a candidate split τ < κ, X = Z[start:τ] and Y = Z[τ:κ] (n and m
  points), the divergence of their distributions with exponent ``alpha`` in (0, 2) is

      Ê(X, Y; α) = 2/(nm) Σᵢⱼ |Xᵢ − Yⱼ|^α − C(n,2)⁻¹ Σᵢ<ₖ |Xᵢ − Xₖ|^α − C(m,2)⁻¹ Σⱼ<ₖ |Yⱼ − Yₖ|^α

  and the scaled statistic is Q̂(X, Y; α) = nm/(n + m) · Ê(X, Y; α) (:func:`q_hat`). The
  segment's best split is the (τ̂, κ̂) that maximises Q̂ over every τ and κ leaving at
  least ``min_points`` points in X and in Y (:func:`best_split`); τ̂ is the change point.
  Searching κ as well as τ is what finds a step up and back down (a bad week): Y is the
  week, not everything after it.
- Significance is a permutation test (the paper's): the points of every current segment
  are shuffled within that segment, the best Q̂ over all segments searched again, and the
  p-value is (#shuffles at least as large + 1) / (permutations + 1). The best candidate
  over all segments is tested; when significant it is kept and the search goes on with
  the new segments, until the best candidate is not significant.
- A significant split is kept only when it matters: the medians either side differ by at
  least the minimum effect (``min_effect``, a fraction of the median before).

Pure functions over numbers; the series live in ``host/lab/series.py``, the changes and
the boards sharing them in ``host/lab/changes.py``, the culprit in ``host/lab/culprit.py``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

DEFAULT_P_VALUE = 0.01
"""A split is significant when its permutation p-value is at most this."""
DEFAULT_MIN_POINTS = 3
"""Fewest points either side of a change: one odd night is not a change."""
DEFAULT_PERMUTATIONS = 199
"""Shuffles per test: the smallest p-value it can give is 1 / (permutations + 1) = 0.005."""


DEFAULT_ALPHA = 1.0
"""E-Divisive's exponent on distances, in (0, 2): 1 (the paper's and Otava's default)
compares whole distributions, not only their means."""

TIE_TOLERANCE = 1e-9
"""Relative: a shuffle's Q̂ this close to the observed one is a tie (floating point)."""


@dataclass(frozen=True)
class Split:
    """One change point: ``index`` is the first point after it (0-based in the series)."""

    index: int
    p_value: float
    median_before: float
    median_after: float
    n_before: int
    n_after: int

    @property
    def ratio(self) -> float | None:
        """median after / median before (None when the median before is 0)."""
        return self.median_after / self.median_before if self.median_before else None


def q_hat(x, y, alpha: float = DEFAULT_ALPHA) -> float:
    """Q̂(X, Y; α) of Matteson & James (2014), eq. 4 and 5, written out as published (two
    or more points each side): the reference :func:`best_split` is tested against."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, m = x.size, y.size
    between = np.sum(np.abs(x[:, None] - y[None, :]) ** alpha) * 2.0 / (n * m)
    within_x = np.sum(np.triu(np.abs(x[:, None] - x[None, :]) ** alpha, 1)) / (n * (n - 1) / 2)
    within_y = np.sum(np.triu(np.abs(y[:, None] - y[None, :]) ** alpha, 1)) / (m * (m - 1) / 2)
    return float(n * m / (n + m) * (between - within_x - within_y))


def _q_grids(z: np.ndarray, min_points: int, alpha: float) -> np.ndarray:
    """Q̂ of every split of each row of ``z`` (R × T): entry [r, τ, κ] is
    Q̂(z[r, :τ], z[r, τ:κ]); -inf where X or Y would hold fewer than ``min_points`` (or
    fewer than 2) points. O(T²) a row from one prefix sum of the distance matrix's upper
    triangle: P[r, c] = Σ_{i<r, k<c, i<k} |zᵢ − zₖ|^α."""
    rows, t = z.shape
    d = np.abs(z[:, :, None] - z[:, None, :])
    if alpha != 1.0:
        d **= alpha
    upper, a_plus_c, a_plus_b, c, invalid = _grid_constants(t, max(min_points, 2))
    d *= upper
    p = np.zeros((rows, t + 1, t + 1))
    # The contiguous axis first: the row prefix sums, then down the columns.
    np.cumsum(d, axis=2, out=p[:, 1:, 1:])
    np.cumsum(p[:, 1:, 1:], axis=1, out=p[:, 1:, 1:])
    diag = np.diagonal(p, axis1=1, axis2=2)  # P[τ, τ]: Σ_{i<k<τ}, X's sum
    # Σ_{i<τ≤j<κ} = P[τ, κ] − P[τ, τ] (weight a); Σ_{τ≤j<k<κ} = P[κ, κ] − P[τ, κ]
    # (weight c); X's own sum P[τ, τ] (weight b), gathered per term, in place:
    # Q̂ = (a + c)·P[τ, κ] − (a + b)·P[τ, τ] − c·P[κ, κ].
    q = p * a_plus_c
    q -= diag[:, :, None] * a_plus_b
    q -= diag[:, None, :] * c
    q += invalid
    return q


@functools.lru_cache(maxsize=64)
def _grid_constants(t: int, low: int):
    """For a segment of ``t`` points: the strict upper-triangle mask, Q̂'s weights at every
    (τ, κ) on P[τ, κ], P[τ, τ] and P[κ, κ] (a + c, a + b and c, where a, b and c weigh
    the between, X's and Y's sums), and 0 / -inf where X or Y has fewer than ``low``
    points."""
    n = np.arange(t + 1, dtype=np.float64)[:, None]
    m = np.arange(t + 1, dtype=np.float64)[None, :] - n
    ok = (n >= low) & (m >= low)
    n, m = np.where(ok, n, 2.0), np.where(ok, m, 2.0)
    upper = np.triu(np.ones((t, t)), 1)
    invalid = np.where(ok, 0.0, -np.inf)
    a = 2.0 / (n + m)
    b = 2.0 * m / ((n + m) * (n - 1))
    c = 2.0 * n / ((n + m) * (m - 1))
    return upper, a + c, a + b, c, invalid


def _q_grid(z: np.ndarray, min_points: int, alpha: float) -> np.ndarray:
    """:func:`_q_grids` of one segment: entry [τ, κ] is Q̂(z[:τ], z[τ:κ])."""
    return _q_grids(np.asarray(z, dtype=np.float64)[None, :], min_points, alpha)[0]


_GRID_ELEMENTS = 1 << 13
"""Most Q̂ entries computed at once (R × (T + 1)²): 64 KiB a temporary array. Larger
chunks cost more a row, not less (measured on shuffles of 60 points: 190 µs a row in
chunks of 16 MiB or of 8 rows, 60 µs in chunks of 2 rows): a temporary past the C
allocator's mmap threshold (128 KiB) is mapped, faulted in and unmapped afresh."""


def _best_q_rows(z: np.ndarray, min_points: int, alpha: float) -> np.ndarray:
    """The best Q̂ of each row of ``z`` (R × T), in chunks of rows that fit memory."""
    per_row = (z.shape[1] + 1) ** 2
    step = max(1, _GRID_ELEMENTS // per_row)
    return np.concatenate(
        [
            _q_grids(z[i : i + step], min_points, alpha).reshape(len(z[i : i + step]), -1).max(1)
            for i in range(0, len(z), step)
        ]
    )


def best_split(z, min_points: int = DEFAULT_MIN_POINTS, alpha: float = DEFAULT_ALPHA):
    """E-Divisive's best split of one segment: ``(τ̂, κ̂, Q̂)`` maximising Q̂(z[:τ], z[τ:κ])
    with at least ``min_points`` points either side, or None when the segment is too short.
    τ̂ is the index of the first point after the change."""
    z = np.asarray(z, dtype=np.float64)
    if z.size < 2 * max(min_points, 2):
        return None
    q = _q_grid(z, min_points, alpha)
    tau, kappa = np.unravel_index(int(np.argmax(q)), q.shape)
    return int(tau), int(kappa), float(q[tau, kappa])


def _best_over(x: np.ndarray, bounds: list[int], min_points: int, alpha: float, skip=()):
    """The best split over every segment between ``bounds`` but those in ``skip`` (as
    (start, end)): (index, Q̂, its segment (start, end), the end of its Y), or None."""
    best = None
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if (lo, hi) in skip:
            continue
        found = best_split(x[lo:hi], min_points, alpha)
        if found is not None and (best is None or found[2] > best[1]):
            best = (lo + found[0], found[2], (lo, hi), lo + found[1])
    return best


def _permutation_p(x, bounds, observed, min_points, alpha, p_value, permutations, rng):
    """The permutation p-value of the best Q̂ ``observed`` (each segment shuffled within
    itself, the best split searched again), or None as soon as it cannot be at most
    ``p_value``. Shuffles go in doubling batches (1, 2, 4...), each searched at once;
    shuffling stops after the first batch that settles that the p-value is lost (at p
    0.001 and 999 shuffles: the first shuffle that reaches the observed Q̂)."""
    # p = (beaten + 1) / (permutations + 1) <= p_value  <=>  beaten <= limit
    limit = int(p_value * (permutations + 1) + 1e-9) - 1
    beaten = done = 0
    # A shuffle that splits the same values apart computes the same Q̂ summed in another
    # order, a few units in the last place lower or higher: a tie, and it counts.
    at_least = observed - TIE_TOLERANCE * max(abs(observed), 1e-300)
    # Under no change the first shuffle at least as large comes after about ln(permutations)
    # shuffles: doubling batches search about that many (growing by 4 searched twice it).
    batch = 1
    while done < permutations:
        r = min(batch, permutations - done)
        best = np.full(r, -np.inf)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi - lo >= 2 * max(min_points, 2):
                shuffled = rng.permuted(np.tile(x[lo:hi], (r, 1)), axis=1)
                best = np.maximum(best, _best_q_rows(shuffled, min_points, alpha))
        beaten += int(np.count_nonzero(best >= at_least))
        done += r
        if beaten > limit:
            return None
        batch *= 2
    p = (beaten + 1) / (permutations + 1)
    return p if p <= p_value else None


def e_divisive(
    values,
    *,
    p_value: float = DEFAULT_P_VALUE,
    min_points: int = DEFAULT_MIN_POINTS,
    permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    min_effect: float | None = None,
) -> list[tuple[int, float]]:
    """E-Divisive's significant change points of ``values``: (index, p-value), in order.
    Same values and seed, same answer.

    With ``min_effect``, a candidate that cannot matter is not tested: when a segment's
    best split moves the median by less than ``min_effect`` (X's median against Y's, Y
    ending at κ̂), that segment is neither shuffled for nor split further, and the search
    goes on in the other segments. Without it, the published method."""
    x = np.asarray(values, dtype=np.float64).ravel()
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    small: set[tuple[int, int]] = set()
    while True:
        bounds = [0, *sorted(i for i, _ in found), x.size]
        best = _best_over(x, bounds, min_points, alpha, small)
        if best is None or not best[1] > 0:
            break
        index, observed, segment, kappa = best
        if min_effect is not None and not _moves(
            _median(x[segment[0] : index]), _median(x[index:kappa]), min_effect
        ):
            small.add(segment)
            continue
        p = _permutation_p(x, bounds, observed, min_points, alpha, p_value, permutations, rng)
        if p is None:
            break
        found.append((index, p))
    return sorted(found)


def change_points(
    values,
    *,
    p_value: float = DEFAULT_P_VALUE,
    min_effect: float = 0.05,
    min_points: int = DEFAULT_MIN_POINTS,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
    confidence: float | None = None,
) -> list[Split]:
    """The significant changes of ``values`` (in order), each beyond ``min_effect``.

    Same values and seed, same answer. The medians of a change are over the points
    between its neighbouring kept changes (or the series' ends). With ``confidence``
    (e.g. 0.95), a change must also be beyond ``min_effect`` by its interval: the
    one-sided ``confidence`` bound of the ratio of the two segments' geometric means
    (the two-sample t on the logarithms) past ``1 ± min_effect`` (:func:`surely_beyond`).
    """
    if not 0.0 < p_value < 1.0:
        raise UsageError(f"p_value must be strictly between 0 and 1, got {p_value}")
    if min_points < 1 or permutations < 1 or min_effect < 0:
        raise UsageError("min_points and permutations must be at least 1, min_effect at least 0")
    if not 0.0 < alpha < 2.0:
        raise UsageError(f"alpha must be strictly between 0 and 2, got {alpha}")
    if confidence is not None and not 0.5 <= confidence < 1.0:
        raise UsageError(f"confidence must be at least 0.5 and under 1, got {confidence}")
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise UsageError("a series for change points holds a value that is not finite")
    kept = e_divisive(
        x,
        p_value=p_value,
        min_points=min_points,
        permutations=permutations,
        alpha=alpha,
        seed=seed,
        min_effect=min_effect,
    )
    # Drop changes too small to matter, then re-measure their neighbours' medians (a
    # dropped point merges two segments), until every kept change is beyond the effect.
    while True:
        splits = _measured(x, kept)
        small = [s for s in splits if not _beyond(s, min_effect)]
        if confidence is not None and not small:
            bounds = [0] + [s.index for s in splits] + [x.size]
            small = [
                s
                for k, s in enumerate(splits)
                if not surely_beyond(
                    x[bounds[k] : s.index], x[s.index : bounds[k + 2]], min_effect, confidence
                )
            ]
        if not small:
            return splits
        weakest = min(small, key=lambda s: abs((s.ratio or 1.0) - 1.0))
        kept = [(i, p) for i, p in kept if i != weakest.index]


def _beyond(s: Split, min_effect: float) -> bool:
    return _moves(s.median_before, s.median_after, min_effect)


def surely_beyond(before, after, min_effect: float, confidence: float) -> bool:
    """Whether the level moved from ``before`` to ``after`` by at least ``min_effect`` at
    the one-sided ``confidence``: on the logarithms, the two-sample t interval of the
    difference of means (the spread pooled over both sides) lies past log(1 + min_effect)
    up, or past log(1 − min_effect) down.

    A change point is where the series' two sides differ most, found by searching: its
    measured effect is the largest of many, and a split of noise near the minimum effect
    passes on its medians alone. The spread is pooled because on the logarithms a step
    moves the level, not the spread, and a side of a few nights estimates its own spread
    badly (Welch's interval, each side's own, let through eight nights of noise at −8 %
    whose spread happened to be 1.7 % against the series' 5 %). Values that are not all
    positive, or fewer than three points in all, leave the medians' rule alone (True)."""
    a = np.asarray(before, dtype=np.float64)
    b = np.asarray(after, dtype=np.float64)
    if a.size + b.size < 3 or min(a.size, b.size) < 1 or a.min() <= 0 or b.min() <= 0:
        return True
    from scipy.stats import t as student_t  # host-only; imported when asked for

    from .verdict import pooled_spread

    la, lb = np.log(a), np.log(b)
    sd, df, _ = pooled_spread(la, lb, None)  # the verdict's pooled spread of log figures
    d = float(lb.mean() - la.mean())
    half = float(student_t.ppf(confidence, df)) * sd * math.sqrt(1 / a.size + 1 / b.size)
    if d - half >= np.log1p(min_effect):
        return True
    return min_effect < 1.0 and d + half <= np.log1p(-min_effect)


def _median(a: np.ndarray) -> float:
    """``np.median`` of a short array, without its generic machinery (a tenth of the time)."""
    a = np.sort(a)
    return float((a[(a.size - 1) // 2] + a[a.size // 2]) / 2)


def _moves(before: float, after: float, min_effect: float) -> bool:
    """Whether the median moved from ``before`` to ``after`` by at least ``min_effect``."""
    if before == 0:
        return after != 0  # from nothing to something: any amount is a change
    return abs(after / before - 1.0) >= min_effect


def _measured(x: np.ndarray, kept: list[tuple[int, float]]) -> list[Split]:
    bounds = [0] + [i for i, _ in kept] + [x.size]
    out = []
    for k, (i, p) in enumerate(kept):
        before = x[bounds[k] : i]
        after = x[i : bounds[k + 2]]
        out.append(
            Split(
                index=i,
                p_value=p,
                median_before=_median(before),
                median_after=_median(after),
                n_before=int(before.size),
                n_after=int(after.size),
            )
        )
    return out
