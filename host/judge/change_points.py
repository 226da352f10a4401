"""Where a series of nightly figures changed, beyond noise: hierarchical change-point detection.

The structure is E-Divisive's (Matteson & James 2014, the detector Apache Otava, formerly
hunter, runs on performance series): find the single best split of a segment, keep it
only when a permutation test says a split that good is unlikely in shuffled data, then
look again on each side, until no segment holds a significant split.

- The best split of a segment comes from ``ruptures`` (``KernelCPD`` with the Gaussian
  kernel, its exact dynamic programme in C): the kernel two-sample statistic (MMD) is the
  kernel relative of E-Divisive's energy statistic, and a bounded kernel keeps one wild
  night from making a split on its own. The kernel's width is the median heuristic.
- The p-value is a permutation test of that best split's gain (the cost it removes),
  the maximum over all splits searched again on each shuffle, so the search itself is
  accounted for (a noise series has *some* best split; that it exists proves nothing).
- Where no single split is significant, the best pair of splits is tested the same way:
  a step up and back down (a bad week) hides from every single split, whose sides each
  mix both levels (E-Divisive's second search point serves the same end). Two tests per
  segment at ``p_value`` each: measured on 300 series of 20 Gaussian values (σ 3 %),
  1.3 % of them report a change with no minimum effect, 0.3 % with the 5 % default.
- A significant split is kept only when it matters: the medians either side differ by at
  least the minimum effect (``min_effect``, a fraction of the median before).

Pure functions over numbers; the series live in ``host/lab/series.py``, the changes and
the boards sharing them in ``host/lab/changes.py``, the culprit in ``host/lab/culprit.py``. ``ruptures`` is imported here only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

DEFAULT_P_VALUE = 0.01
"""A split is significant when its permutation p-value is at most this."""
DEFAULT_MIN_POINTS = 3
"""Fewest points either side of a change: one odd night is not a change."""
DEFAULT_PERMUTATIONS = 199
"""Shuffles per test: the smallest p-value it can give is 1 / (permutations + 1) = 0.005."""


TIE_TOLERANCE = 1e-9
"""Relative: a shuffle's gain this close to the observed one is a tie (floating point)."""


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


def _gain(
    signal: np.ndarray, min_points: int, gamma: float, n_bkps: int = 1
) -> tuple[list[int], float]:
    """The best split of ``signal`` into ``n_bkps + 1`` segments (the index of each new
    segment's first point) and the cost it removes, by ruptures' exact kernel search."""
    try:
        import ruptures as rpt
    except ImportError as e:
        raise UsageError(
            f"change points need the ruptures package, which is not installed here ({e})",
            hint="pip install 'edgequal[host]' (ruptures has no release for Python 3.14 yet)",
        ) from e
    algo = rpt.KernelCPD(kernel="rbf", min_size=min_points, params={"gamma": gamma})
    algo.fit(signal.reshape(-1, 1))
    bkps = algo.predict(n_bkps=n_bkps)
    whole = algo.cost.error(0, signal.size)
    return [int(b) for b in bkps[:-1]], float(whole - algo.cost.sum_of_costs(bkps))


def _gamma(values: np.ndarray) -> float | None:
    """The Gaussian kernel's 1 / median squared distance (None when all values are equal)."""
    d = (values[:, None] - values[None, :]) ** 2
    d = d[np.triu_indices(values.size, 1)]
    d = d[d > 0]
    return 1.0 / float(np.median(d)) if d.size else None


def _split_segment(
    values: np.ndarray,
    lo: int,
    hi: int,
    p_value: float,
    min_points: int,
    permutations: int,
    rng: np.random.Generator,
    found: list[tuple[int, float]],
) -> None:
    seg = values[lo:hi]
    if seg.size < 2 * min_points:
        return
    gamma = _gamma(seg)
    if gamma is None:
        return
    # One split first; where none is significant, two at once: a step up and back down
    # (a bad week) hides from every single split, whose sides each mix both levels.
    for n_bkps in (1, 2):
        if seg.size < (n_bkps + 1) * min_points:
            return
        indices, gain = _gain(seg, min_points, gamma, n_bkps)
        p = _permutation_p(seg, gain, min_points, gamma, n_bkps, p_value, permutations, rng)
        if p is not None:
            break
    else:
        return
    bounds = [lo] + [lo + i for i in indices] + [hi]
    found.extend((b, p) for b in bounds[1:-1])
    for a, b in zip(bounds[:-1], bounds[1:]):
        _split_segment(values, a, b, p_value, min_points, permutations, rng, found)


def _permutation_p(seg, gain, min_points, gamma, n_bkps, p_value, permutations, rng):
    """The permutation p-value of ``gain`` (the best split's, searched again on each
    shuffle), or None as soon as it cannot be at most ``p_value``."""
    limit = int(p_value * (permutations + 1))
    beaten = 0
    # A shuffle that splits the same values apart computes the same gain summed in another
    # order, a few units in the last place lower or higher: a tie, and it counts. (Without
    # the tolerance 3 runs against 3, whose 2 in 20 orders split as well, gave p 0.03.)
    at_least = gain - TIE_TOLERANCE * max(abs(gain), 1e-300)
    for _ in range(permutations):
        if _gain(rng.permutation(seg), min_points, gamma, n_bkps)[1] >= at_least:
            beaten += 1
            if beaten > limit:
                return None  # cannot be significant any more: stop shuffling
    p = (beaten + 1) / (permutations + 1)
    return p if p <= p_value else None


def change_points(
    values,
    *,
    p_value: float = DEFAULT_P_VALUE,
    min_effect: float = 0.05,
    min_points: int = DEFAULT_MIN_POINTS,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> list[Split]:
    """The significant changes of ``values`` (in order), each beyond ``min_effect``.

    Same values and seed, same answer. The medians of a change are over the points
    between its neighbouring kept changes (or the series' ends).
    """
    if not 0.0 < p_value < 1.0:
        raise UsageError(f"p_value must be strictly between 0 and 1, got {p_value}")
    if min_points < 1 or permutations < 1 or min_effect < 0:
        raise UsageError("min_points and permutations must be at least 1, min_effect at least 0")
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise UsageError("a series for change points holds a value that is not finite")
    found: list[tuple[int, float]] = []
    _split_segment(
        x, 0, x.size, p_value, min_points, permutations, np.random.default_rng(seed), found
    )
    found.sort()
    kept = [(i, p) for i, p in found]
    # Drop changes too small to matter, then re-measure their neighbours' medians (a
    # dropped point merges two segments), until every kept change is beyond the effect.
    while True:
        splits = _measured(x, kept)
        small = [s for s in splits if not _beyond(s, min_effect)]
        if not small:
            return splits
        weakest = min(small, key=lambda s: abs((s.ratio or 1.0) - 1.0))
        kept = [(i, p) for i, p in kept if i != weakest.index]


def _beyond(s: Split, min_effect: float) -> bool:
    if s.median_before == 0:
        return s.median_after != 0  # from nothing to something: any amount is a change
    return abs(s.median_after / s.median_before - 1.0) >= min_effect


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
                median_before=float(np.median(before)),
                median_after=float(np.median(after)),
                n_before=int(before.size),
                n_after=int(after.size),
            )
        )
    return out
