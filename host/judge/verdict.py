"""Same, different, or run more: a three-way verdict on two sets of runs (docs/gating.md
"Verdicts: the unit is the run").

The unit is the run. Each side is one figure per run (a run's clean p50, its p99, its
sustained throughput, its cold load): the calls of one run share that run's conditions
(the board's speed that minute, its caches, its neighbours), so they measure the run's
own precision, never whether another run would agree. Figures are compared on the log
scale, so the answer is a ratio and a spread is a CV.

- **Spread** (the run-to-run standard deviation of the log figure, ≈ its CV): pooled
  over the sides that have two runs or more (source ``repeats``), pooled with the board's
  noise score from history when given (``history``, or ``repeats+history``; its degrees of
  freedom are the history's runs less its stretches). None with one run a side and no
  history (``none``): then the verdict is UNKNOWN.
- **Interval** of the log ratio: ``mean(log b) − mean(log a) ± t · se``. Runs interleaved in
  one session (``--repeat-until-decided``'s pairs, bisect's segments): ``se = s · sqrt(1/na +
  1/nb)``, t with the pooled degrees of freedom. Two reports made apart (``compare``,
  ``rerun``, ``gate --baseline``): each report is one session, whose runs share its
  conditions as a run's calls share the run's (this machine ran in stretches 8–15 % apart
  with 2–3 % spread inside each), so their spread says nothing of how far two sessions
  fall apart. Only the board's history, measured session to session, does: ``se² = 2σ_h²
  − σ_r²(2 − 1/na − 1/nb)`` (:func:`apart_se`); without history the verdict is UNKNOWN and
  names the history or an interleaved re-run as what decides it. A board's sessions need
  not be normal (on the shared VM the benchmarks ran on, about one run in 50 to 150 was
  30–80 % slower in every call with nothing the agent measures moving), a tail a CV does
  not carry; so two reports made apart are DIFFERENT only beyond
  the history's own tail too (``Spread.tail``: 99 % of its run pairs lie within it), and
  UNKNOWN inside it, naming interleaved pairs as what confirms it. One run against one
  beyond the tail is still UNKNOWN where the slower run's fastest call kept pace (it moved
  less than ``FLOOR_SHARE`` as far as the median, log scale): a slower model makes every
  call slower, its fastest too, while a slow session (the cause of every such false alarm
  measured) slows the bulk of the calls and leaves the fastest near the board's pace.
- **DIFFERENT**: the two-sided 99 % interval (``alpha_different`` 0.01) excludes a ratio
  of 1 *and* the ratio is beyond the minimum effect (≥ 1 + m or ≤ 1 / (1 + m)); with a
  spread from the repeats alone, also the runs' own split at the same level (an exact
  permutation test of the mean log figure, :func:`split_p`): runs come in modes (some
  runs of the same model 30 % slower in every call, their neighbours' CPU no different:
  something of the fresh worker's own), and two or three runs a side that fell in different modes are tight within each
  side, so their sample spread is the mode's width, not the run-to-run spread, and the t
  interval alone called a rerun of the same model DIFFERENT. The split needs at least
  :func:`split_min_runs` a side (5 at 0.01).
- **SAME**: the 90 % interval (two one-sided tests at ``alpha_same`` 0.05) lies inside
  ``[1 / (1 + m), 1 + m]``: an equivalence claim, never a large p-value.
- **UNKNOWN** otherwise, with ``runs_needed``: the runs a side that would decide it at
  the assumed spread and the ratio seen.

The minimum effect m is the policy's (``[baseline] min_effect``, default 3 %), raised to
the board's noise CV from history when that is larger, up to ``NOISE_EFFECT_CAP`` (5 %):
so by default a 10 % slowdown is never SAME.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np

from ..errors import UsageError

SAME = "SAME"
DIFFERENT = "DIFFERENT"
UNKNOWN = "UNKNOWN"

REPEATS, HISTORY, BOTH, NONE = "repeats", "history", "repeats+history", "none"
"""Where a verdict's spread came from."""

VERDICT_DEFAULTS = {"alpha_different": 0.01, "alpha_same": 0.05, "session_shift": 0.20}
"""The tests' levels and, for two reports made apart with no history, the most two sessions
of one board are taken to differ by (docs/gating.md); ``min_effect`` is the baseline's."""

NOISE_EFFECT_CAP = 0.05
"""The most the board's noise raises the minimum effect to."""

MAX_RUNS_NEEDED = 100
"""Past this many runs a side, ``runs_needed`` is None: the ratio sits at the minimum effect."""

APART_ASK = (
    "give the board's history (--history: its noise is measured session to session) or "
    "run both interleaved (qualify --baseline REPORT --repeat-until-decided N)"
)
"""What decides two reports made apart when their own runs cannot (docs/gating.md)."""

CONFIRM_ASK = (
    'one slow session reads the same (docs/gating.md "Confirming a regression"); pairs '
    "run interleaved confirm it (fleet run --repeat-until-decided N, qualify --baseline "
    "REPORT --repeat-until-decided N)"
)
"""What a DIFFERENT between two reports made apart still needs before a lab acts on it."""

APART_MORE = (
    "more runs in these two sessions cannot shrink the history's session-to-session "
    "spread; run both interleaved (qualify --baseline REPORT --repeat-until-decided N)"
)
"""Why more runs in two reports made apart would not decide them."""

FLOOR_SHARE = 1 / 3
"""One run against one made apart: the least share of the median's move (log ratio) the
fastest call must make for a DIFFERENT (:func:`_slow_session`). Measured on real runs
(BENCHMARKS.md "The fastest call"): of the 12 A/A pairs beyond the tail in four runs, a
slow session moved the fastest call −0.10 to 0.23 as far in 10; the other two, one run
slow in every call, its fastest too (0.77), no rule on two runs tells from a change. A
slower model's fastest call moved 0.55–0.83 as far."""

MIN_RUNS_FOR_SPREAD = 3
"""What an UNKNOWN with no known spread asks for: the fewest runs a side that give one."""


@dataclass(frozen=True)
class Spread:
    """A run-to-run spread assumed by a verdict: the standard deviation of the log figure
    (≈ its CV), its degrees of freedom (None: taken as known) and where it came from."""

    sd: float
    df: float | None
    source: str
    tail: float | None = None
    """From history: the 99th percentile of ``|log(x_i / x_j)|`` over its run pairs
    (host/lab/noise.py ``pair_tail``). Two reports made apart are DIFFERENT only beyond it."""

    @classmethod
    def from_cv(
        cls, cv: float, df: float | None, source: str = HISTORY, tail: float | None = None
    ) -> Spread:
        """A spread from a CV (a noise score's): sd of the log figure = sqrt(log(1 + CV²))."""
        if not (cv >= 0 and math.isfinite(cv)):
            raise UsageError(f"a run-to-run spread must be a CV of at least 0, got {cv}")
        return cls(
            math.sqrt(math.log1p(cv * cv)),
            None if df is None else max(float(df), 1.0),
            source,
            tail,
        )

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    """SAME, DIFFERENT or UNKNOWN on two sets of runs, with everything that decided it."""

    verdict: str
    ratio: float | None
    """Candidate over baseline: the ratio of the runs' geometric means."""
    ci_low: float | None
    ci_high: float | None
    """The ratio's two-sided ``1 − alpha_different`` interval (99 %)."""
    same_low: float | None
    same_high: float | None
    """The ratio's ``1 − 2·alpha_same`` interval (90 %): SAME when inside ±min_effect."""
    min_effect: float
    n_baseline: int
    n_candidate: int
    spread: float | None
    """The run-to-run sd of the log figure assumed (≈ CV); None when none is known."""
    spread_source: str
    df: float | None
    """Degrees of freedom of the spread (None: taken as known, normal quantiles)."""
    why: str
    runs_needed: int | None = None
    """For UNKNOWN: the runs a side that would decide it at this spread and ratio."""
    baseline_runs: list[str] = field(default_factory=list)
    candidate_runs: list[str] = field(default_factory=list)
    alpha_different: float = VERDICT_DEFAULTS["alpha_different"]
    alpha_same: float = VERDICT_DEFAULTS["alpha_same"]

    def basis(self) -> str:
        """``3 vs 1 runs, spread 2.5 % (repeats, df 2)``: what the verdict stood on."""
        runs = f"{self.n_baseline} vs {self.n_candidate} runs"
        if self.spread is None:
            return f"{runs}, no known spread"
        df = "" if self.df is None else f", df {self.df:g}"
        return f"{runs}, spread {self.spread:.2%} ({self.spread_source}{df})"

    def text(self) -> str:
        """One line: the verdict, the ratio and its interval, the basis and why."""
        out = self.verdict
        if self.ratio is not None:
            out += f" ×{self.ratio:.3f}"
            if self.ci_low is not None:
                out += f" [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        return f"{out}; {self.basis()}; {self.why}"

    def to_json(self) -> dict:
        """JSON-ready fields, with the basis and the one-line text."""
        return {**asdict(self), "basis": self.basis(), "text": self.text()}


def effective_min_effect(min_effect: float, prior: Spread | None) -> float:
    """The policy's minimum effect, raised to the board's noise (history) up to the cap."""
    if min_effect < 0:
        raise UsageError(f"the minimum effect must be at least 0, got {min_effect}")
    if prior is not None and prior.source == HISTORY:
        cv = math.sqrt(math.expm1(prior.sd**2))
        return max(min_effect, min(cv, NOISE_EFFECT_CAP))
    return min_effect


def _percent(level: float) -> str:
    """``99%``, ``90%``, ``99.8%`` (a level divided over several looks)."""
    return f"{100 * level:.3g}%"


def _exp(x: float) -> float:
    """exp, held within floats: a level of 1e-12 on two runs has an interval of ±1e300."""
    return math.exp(max(-700.0, min(700.0, x)))


@lru_cache(maxsize=4096)
def _quantile(p: float, df: float | None) -> float:
    from scipy.stats import norm, t

    return float(norm.ppf(p) if df is None else t.ppf(p, df))


def pooled_spread(
    la: np.ndarray, lb: np.ndarray, prior: Spread | None
) -> tuple[float | None, float | None, str]:
    """(sd, df, source) of the log figures: the sides with ≥ 2 runs pooled, and the prior."""
    ss = sum(float(np.sum((x - x.mean()) ** 2)) for x in (la, lb) if x.size >= 2)
    df = sum(x.size - 1 for x in (la, lb) if x.size >= 2)
    if prior is None:
        return (math.sqrt(ss / df), float(df), REPEATS) if df else (None, None, NONE)
    if not df:
        return prior.sd, prior.df, prior.source
    if prior.df is None:  # a known spread outweighs any number of repeats
        return prior.sd, None, BOTH
    total = df + prior.df
    return math.sqrt((ss + prior.df * prior.sd**2) / total), float(total), BOTH


def apart_se(la: np.ndarray, lb: np.ndarray, prior: Spread) -> tuple[float, float | None, str]:
    """(se, df, source) of the difference of two sessions' mean log figures, the sides' runs
    made apart (two reports): each side is one session, whose conditions its runs share.
    The history's spread is night to night, a session's shift (σ_s) and a run's own (σ_r)
    together: σ_h² = σ_s² + σ_r². The difference of the means then varies by
    ``2σ_s² + σ_r²(1/na + 1/nb) = 2σ_h² − σ_r²(2 − 1/na − 1/nb)``, σ_r² from the repeats
    (up to σ_h²; without repeats 0, the most the history allows: ``2σ_h²``)."""
    ss = sum(float(np.sum((x - x.mean()) ** 2)) for x in (la, lb) if x.size >= 2)
    df = sum(x.size - 1 for x in (la, lb) if x.size >= 2)
    within = min(ss / df, prior.sd**2) if df else 0.0
    var = 2 * prior.sd**2 - within * (2 - 1 / la.size - 1 / lb.size)
    return math.sqrt(max(var, 0.0)), prior.df, BOTH if df else prior.source


def split_p(la: np.ndarray, lb: np.ndarray) -> float:
    """Two-sided p of the difference of the sides' mean log figures under every split of
    the runs into sides of these sizes (exact up to 9,999 splits, else 9,999 seeded random
    ones): what the runs' order alone says, whatever their distribution."""
    from scipy.stats import permutation_test

    if la.max() < lb.min() or lb.max() < la.min():  # apart: the most extreme of the splits
        return min(1.0, 2 / math.comb(la.size + lb.size, la.size))
    seed = {"rng" if "rng" in _permutation_params() else "random_state": 0}
    result = permutation_test(
        (la, lb),
        lambda x, y, axis: np.mean(y, axis=axis) - np.mean(x, axis=axis),
        permutation_type="independent",
        vectorized=True,
        n_resamples=9999,
        alternative="two-sided",
        **seed,
    )
    return float(result.pvalue)


@lru_cache(maxsize=1)
def _permutation_params() -> frozenset:
    import inspect

    from scipy.stats import permutation_test

    return frozenset(inspect.signature(permutation_test).parameters)


def split_min_runs(alpha: float) -> int:
    """The fewest runs a side (both alike) whose most extreme split reaches ``alpha``
    (two-sided: 2 of C(2n, n) splits): 5 at 0.01, 7 at 0.01 / 6."""
    n = 1
    while 2 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


def _decides(d: float, se: float, df: float | None, m_log: float, s: dict) -> str:
    hi = _quantile(1 - s["alpha_different"] / 2, df) * se
    if abs(d) >= m_log and abs(d) > hi:
        return DIFFERENT
    if abs(d) + _quantile(1 - s["alpha_same"], df) * se <= m_log:
        return SAME
    return UNKNOWN


def _runs_needed(d, se_at, df_at, m_log, s, min_split: int = 0) -> int | None:
    """Runs a side (both sides alike) that would decide a ratio ``exp(d)``, ``se_at(n)`` and
    ``df_at(n)`` the standard error and its degrees of freedom at n a side; DIFFERENT no
    sooner than ``min_split`` runs a side (the runs' split, from repeats)."""
    for n in range(2, MAX_RUNS_NEEDED + 1):
        decided = _decides(d, se_at(n), df_at(n), m_log, s)
        if decided == SAME or (decided == DIFFERENT and n >= min_split):
            return n
    return None


def _within_tail(d: float, tail: float | None) -> str | None:
    """Why a log ratio ``d`` between two reports made apart is not DIFFERENT, where it lies
    within the history's own tail (:attr:`Spread.tail`); None beyond it, or with no tail."""
    if tail is None or abs(d) > tail:
        return None
    return (
        f"×{math.exp(d):.3f} is no further apart than two sessions of this board fall in its "
        f"history (99 % of its runs' pairs within ×{math.exp(tail):.3f}); {CONFIRM_ASK}"
    )


def _slow_session(d: float, floors: tuple[float | None, float | None] | None) -> str | None:
    """Why a log ratio ``d`` between one run and one made apart is a slow session, not the
    model: the runs' fastest calls (``floors``, ms) moved less than :data:`FLOOR_SHARE` as
    far. None where they moved with it, or are not known."""
    if floors is None or d == 0 or not all(f is not None and f > 0 for f in floors):
        return None
    f = math.log(floors[1] / floors[0])
    if f / d >= FLOOR_SHARE:
        return None
    slow = "candidate" if d > 0 else "baseline"
    return (
        f"×{math.exp(d):.3f} at the median but ×{math.exp(f):.3f} at the fastest call: a "
        f"slower model slows its fastest call too, so this reads as a slow session of the "
        f"{slow}'s, not the model; {CONFIRM_ASK}"
    )


def _doubt(d: float, prior: Spread, one_a_side: bool, floors) -> str | None:
    """Why a DIFFERENT between two reports made apart is not one: the ratio lies within the
    history's tail, or (one run a side) the fastest calls did not move with the median."""
    return _within_tail(d, prior.tail) or (_slow_session(d, floors) if one_a_side else None)


def _apart_without_history(la, lb, sd, df, s, out) -> Verdict:
    """Two reports made apart, repeats in them and no history: their runs' spread is each
    session's own, so it says nothing of how far two sessions fall apart. DIFFERENT only
    when the whole interval lies beyond the session shift a board is taken to have
    (``session_shift``, 20 %) and the runs' split agrees; never SAME (a session's shift can
    hide a real change as well as make one)."""
    d = float(lb.mean() - la.mean())
    ratio = math.exp(d)
    half = _quantile(1 - s["alpha_different"] / 2, df) * sd * math.sqrt(1 / la.size + 1 / lb.size)
    ci = (_exp(d - half), _exp(d + half))
    shift = s["session_shift"]
    args = (ratio, ci, (None, None), sd, df, REPEATS)
    level = _percent(1 - s["alpha_different"])
    beyond = abs(d) - half > math.log1p(shift)
    if beyond and split_p(la, lb) <= s["alpha_different"]:
        way = "slower" if ratio > 1 else "faster"
        why = (
            f"{way}: two reports made apart, with no history, and the whole {level} interval "
            f"of their runs lies beyond ±{shift:.0%}, more than two sessions of a board are "
            "taken to differ by (session_shift)"
        )
        return out(DIFFERENT, why, *args)
    why = (
        "two reports made apart, and no known spread between sessions: a report's runs "
        "share its session (the board's speed that hour, its neighbours), so their spread "
        f"({sd:.2%}) does not say how far two sessions fall apart, and without history only a "
        f"change beyond ±{shift:.0%} (session_shift) in {split_min_runs(s['alpha_different'])}"
        f" runs a side or more is DIFFERENT; {APART_ASK}"
    )
    return out(UNKNOWN, why, *args)


def decide(
    baseline: Sequence[float],
    candidate: Sequence[float],
    min_effect: float,
    settings: dict | None = None,
    *,
    prior: Spread | None = None,
    baseline_runs: Sequence[str] = (),
    candidate_runs: Sequence[str] = (),
    split: bool = True,
    interleaved: bool = False,
    floors: tuple[float | None, float | None] | None = None,
) -> Verdict:
    """The verdict on ``candidate`` against ``baseline``: one positive figure per run on
    each side; ``prior`` the board's run-to-run spread from history (module docstring).
    ``split=False`` leaves out the runs' split test: for units that are not runs (the
    ABBA segments of one run, which share its workers and so their modes).
    ``interleaved``: the sides' runs alternated in one session (pairs, ABBA segments), so
    their spread is the spread of the difference. Two reports made apart are not: each is
    one session, and only the board's history says how far sessions fall apart
    (:func:`apart_se`); without it the verdict is UNKNOWN and says what decides it.
    ``floors``: each side's fastest call (ms), for one run a side (:func:`_slow_session`)."""
    s = {**VERDICT_DEFAULTS, **{k: v for k, v in (settings or {}).items() if k in VERDICT_DEFAULTS}}
    a = np.asarray(baseline, dtype=np.float64).ravel()
    b = np.asarray(candidate, dtype=np.float64).ravel()
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    m = effective_min_effect(min_effect, prior)
    raised = "" if m == min_effect else f" (raised to the board's noise from {min_effect:.0%})"

    def out(verdict, why, ratio=None, ci=(None, None), same=(None, None), sd=None, df=None,
            source=NONE, needed=None) -> Verdict:  # fmt: skip
        return Verdict(
            verdict, ratio, ci[0], ci[1], same[0], same[1], m, int(a.size), int(b.size), sd,
            source, df, why, needed, list(baseline_runs), list(candidate_runs),
            s["alpha_different"], s["alpha_same"],
        )  # fmt: skip

    if not a.size or not b.size:
        return out(UNKNOWN, "no runs on one side")
    if a.size == b.size and np.array_equal(np.sort(a), np.sort(b)):  # the same runs again
        return out(SAME, "identical values", 1.0, (1.0, 1.0), (1.0, 1.0), 0.0, None, NONE)
    if np.any(a <= 0) or np.any(b <= 0):
        return out(UNKNOWN, "a figure of 0 or below has no ratio")
    la, lb = np.log(a), np.log(b)
    d = float(lb.mean() - la.mean())
    ratio = math.exp(d)
    sd, df, source = pooled_spread(la, lb, prior)
    if sd is None and not interleaved:
        return out(UNKNOWN, f"one run a side and no known spread: {APART_ASK}", ratio)
    if sd is None:
        return out(
            UNKNOWN,
            "one run a side and no known spread (no repeats, no history): run at least "
            f"{MIN_RUNS_FOR_SPREAD - 1} more a side ({split_min_runs(s['alpha_different'])} "
            "a side to tell a difference) or give the board's history",
            ratio,
            needed=MIN_RUNS_FOR_SPREAD,
        )
    if not interleaved and prior is None:
        return _apart_without_history(la, lb, sd, df, s, out)
    if interleaved:
        se = sd * math.sqrt(1 / a.size + 1 / b.size)
    else:
        se, df, source = apart_se(la, lb, prior)
        sd = prior.sd
    m_log = math.log1p(m)
    half = _quantile(1 - s["alpha_different"] / 2, df) * se
    half_same = _quantile(1 - s["alpha_same"], df) * se
    ci = (_exp(d - half), _exp(d + half))
    same = (_exp(d - half_same), _exp(d + half_same))
    level = _percent(1 - s["alpha_different"])
    verdict = _decides(d, se, df, m_log, s)
    args = (ratio, ci, same, sd, df, source)
    split_at = None
    if split and verdict == DIFFERENT and source == REPEATS:
        split_at = split_p(la, lb)
        if split_at > s["alpha_different"]:
            verdict = UNKNOWN
    one_a_side = a.size == b.size == 1
    doubt = None if interleaved or verdict != DIFFERENT else _doubt(d, prior, one_a_side, floors)
    if doubt:
        return out(UNKNOWN, doubt, *args)
    if verdict == DIFFERENT:
        way = "slower" if ratio > 1 else "faster"
        why = f"{way}: the {level} interval excludes 1 and ×{ratio:.3f} is beyond ±{m:.0%}{raised}"
        if not interleaved:
            why += f"; two sessions: {CONFIRM_ASK}"
        return out(DIFFERENT, why, *args)
    if verdict == SAME:
        why = f"the {_percent(1 - 2 * s['alpha_same'])} interval lies inside ±{m:.0%}{raised}"
        return out(SAME, why, *args)
    if not interleaved:
        return out(UNKNOWN, f"neither DIFFERENT nor inside ±{m:.0%}{raised}: {APART_MORE}", *args)
    df_extra = None if df is None else max(df - (a.size - 1) - (b.size - 1), 0.0)
    if source == REPEATS:
        df_extra = 0.0
    min_split = split_min_runs(s["alpha_different"]) if split and source == REPEATS else 0
    needed = _runs_needed(
        d,
        lambda n: sd * math.sqrt(2 / n),
        lambda n: None if df_extra is None else 2 * (n - 1) + df_extra,
        m_log,
        s,
        min_split,
    )
    if needed is not None and needed <= min(a.size, b.size):
        needed = min(a.size, b.size) + 1  # the unequal sides' shortfall: one more each
    more = (
        f"about {needed} runs a side would decide it at this spread"
        if needed is not None
        else f"more than {MAX_RUNS_NEEDED} runs a side: the ratio sits at the ±{m:.0%} edge"
    )
    if split_at is not None:
        why = (
            f"the {level} interval excludes 1, but so few runs cannot reach it by their order "
            f"alone (p {split_at:.2g} over every {a.size} of these {a.size + b.size} as the "
            f"baseline; runs of one model can fall in modes, docs/gating.md); {more}"
        )
        return out(UNKNOWN, why, *args, needed)
    return out(UNKNOWN, f"neither DIFFERENT nor inside ±{m:.0%}{raised}: {more}", *args, needed)
