"""Same, different, or run more: a three-way verdict on two sets of values, as Chromium's
Pinpoint compares performance samples (catapult ``pinpoint/models/compare``).

- **DIFFERENT**: the smaller of the two-sample Kolmogorov–Smirnov and Mann–Whitney U
  p-values (scipy) is at most ``different_p`` (0.01) *and* the medians differ by at least
  the minimum effect. Both tests, because Mann–Whitney misses a change of spread and
  Kolmogorov–Smirnov is weak on values that repeat (timer ticks).
- **SAME**: that p-value is above the SAME threshold of :func:`same_threshold`, which
  tightens as samples grow (a large p from a handful of values proves little; from
  thousands it does); or the difference is significant but smaller than the minimum
  effect (real, and too small to matter).
- **UNKNOWN** otherwise: run more (``qualify --repeat-until-decided``).

The schedule: ``same_p(n) = max(same_p_floor, same_p_start · sqrt(same_p_n / n))`` with n
the smaller side's count: 0.5 at 10 values, 0.25 at 40, 0.1 at 250, 0.05 from 1,000
(defaults; a policy's ``[baseline]`` sets ``different_p``, ``same_p_start``,
``same_p_n``, ``same_p_floor`` and ``min_effect``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UsageError

SAME = "SAME"
DIFFERENT = "DIFFERENT"
UNKNOWN = "UNKNOWN"

VERDICT_DEFAULTS = {
    "different_p": 0.01,
    "same_p_start": 0.5,
    "same_p_n": 10,
    "same_p_floor": 0.05,
}
"""The thresholds' defaults (docs/gating.md); ``min_effect`` is the baseline's."""


def same_threshold(n: int, settings: dict | None = None) -> float:
    """The p-value above which two sets of ``n`` values each are called SAME."""
    s = {**VERDICT_DEFAULTS, **(settings or {})}
    if n < 1:
        return 1.0
    return max(s["same_p_floor"], min(1.0, s["same_p_start"] * math.sqrt(s["same_p_n"] / n)))


@dataclass(frozen=True)
class Verdict:
    """SAME, DIFFERENT or UNKNOWN, with the p-values and medians that decided it."""

    verdict: str
    p_value: float | None
    ks_p: float | None
    mann_whitney_p: float | None
    same_threshold: float
    different_p: float
    ratio: float | None
    min_effect: float
    n_baseline: int
    n_candidate: int
    why: str

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


def decide(baseline, candidate, min_effect: float, settings: dict | None = None) -> Verdict:
    """The verdict on ``candidate`` against ``baseline`` (any positive figures: samples of
    one run, or one figure per repeated run)."""
    from scipy.stats import ks_2samp, mannwhitneyu

    s = {**VERDICT_DEFAULTS, **(settings or {})}
    a = np.asarray(baseline, dtype=np.float64).ravel()
    b = np.asarray(candidate, dtype=np.float64).ravel()
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n = min(a.size, b.size)
    threshold = same_threshold(n, s)
    if min_effect < 0:
        raise UsageError(f"the minimum effect must be at least 0, got {min_effect}")

    def out(verdict, p=None, ks=None, mw=None, ratio=None, why=""):
        return Verdict(
            verdict, p, ks, mw, threshold, s["different_p"], ratio, min_effect, a.size, b.size, why
        )

    if n < 1:
        return out(UNKNOWN, why="no values on one side")
    ma, mb = float(np.median(a)), float(np.median(b))
    ratio = mb / ma if ma else None
    if np.array_equal(np.unique(a), np.unique(b)) and np.unique(a).size == 1:
        return out(SAME, 1.0, 1.0, 1.0, ratio, "identical values")
    if n < 2:
        return out(UNKNOWN, ratio=ratio, why="one value a side: repeat the run to decide")
    ks = float(ks_2samp(a, b).pvalue)
    mw = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    p = min(ks, mw)
    big = ratio is None or abs(ratio - 1.0) >= min_effect
    if p <= s["different_p"]:
        if big:
            return out(DIFFERENT, p, ks, mw, ratio, f"p {p:.2g} ≤ {s['different_p']:g}")
        return out(SAME, p, ks, mw, ratio, f"a real change smaller than {min_effect:.0%}")
    if p > threshold:
        return out(SAME, p, ks, mw, ratio, f"p {p:.2g} > {threshold:.2g} at {n} values")
    return out(
        UNKNOWN, p, ks, mw, ratio, f"p {p:.2g} between {s['different_p']:g} and {threshold:.2g}"
    )
