"""SAME / DIFFERENT / UNKNOWN (host/judge/verdict.py: one figure per run a side) and the
change-point detector (host/judge/change_points.py) on values with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.change_points import change_points
from edgequal.host.judge.verdict import (
    APART_ASK,
    BOTH,
    DIFFERENT,
    FLOOR_SHARE,
    HISTORY,
    NOISE_EFFECT_CAP,
    NONE,
    REPEATS,
    SAME,
    UNKNOWN,
    Spread,
    decide,
    split_min_runs,
    split_p,
)
from scipy.stats import t, ttest_ind


def test_the_interval_is_the_pooled_t_interval_of_the_log_ratio():
    base, cand = [1.00, 1.02, 0.98, 1.01], [1.10, 1.13, 1.08]
    v = decide(base, cand, min_effect=0.03, interleaved=True)
    # The same interval from scipy's pooled two-sample t-test on the log figures.
    ci = ttest_ind(np.log(cand), np.log(base)).confidence_interval(0.99)
    assert (v.ci_low, v.ci_high) == pytest.approx((np.exp(ci.low), np.exp(ci.high)))
    same = ttest_ind(np.log(cand), np.log(base)).confidence_interval(0.90)
    assert (v.same_low, v.same_high) == pytest.approx((np.exp(same.low), np.exp(same.high)))
    assert v.ratio == pytest.approx(np.exp(np.mean(np.log(cand)) - np.mean(np.log(base))))
    assert (v.n_baseline, v.n_candidate, v.df) == (4, 3, 5.0) and v.spread_source == REPEATS
    sd = np.sqrt((np.var(np.log(base), ddof=1) * 3 + np.var(np.log(cand), ddof=1) * 2) / 5)
    assert v.spread == pytest.approx(sd)
    assert "4 vs 3 runs" in v.text() and "repeats, df 5" in v.text()
    # The interval excludes 1, but 4 and 3 runs split 35 ways: the most extreme split is
    # p 2/35, short of 0.01, so the runs alone cannot make it DIFFERENT.
    assert v.ci_low > 1.0 and v.verdict == UNKNOWN and v.runs_needed == 5
    assert "p 0.057 over every 4 of these 7 as the baseline" in v.why
    # Five a side, as far apart: DIFFERENT (the split is p 2/252).
    v = decide(base + [0.99], cand + [1.11, 1.12], min_effect=0.03, interleaved=True)
    assert v.verdict == DIFFERENT and "slower" in v.why
    # The same runs as two reports made apart: each report is one session, and their own
    # spread cannot say how far two sessions fall apart. UNKNOWN, naming what decides it.
    apart = decide(base + [0.99], cand + [1.11, 1.12], min_effect=0.03)
    assert (apart.verdict, apart.runs_needed, apart.same_low) == (UNKNOWN, None, None)
    assert "two reports made apart" in apart.why and apart.why.endswith(APART_ASK)
    # Without history, only beyond the shift two sessions are taken to differ by (20 %),
    # the whole interval, and in 5 runs a side (the split): a model 1.5 times slower.
    slower = [1.5 * x for x in cand + [1.11, 1.12]]
    v = decide(base + [0.99], slower, min_effect=0.03)
    assert v.verdict == DIFFERENT and "beyond ±20%" in v.why and v.ci_low > 1.2
    assert decide(base[:3], slower[:3], min_effect=0.03).verdict == UNKNOWN
    assert decide(base + [0.99], slower, 0.03, {"session_shift": 0.65}).verdict == UNKNOWN
    assert decide(base + [0.99], cand + [1.11, 1.12], 0.03, {"session_shift": 0.05}).verdict == (
        DIFFERENT
    )
    assert split_p(np.log(base + [0.99]), np.log(cand + [1.11, 1.12])) == pytest.approx(2 / 252)


def test_runs_in_two_modes_are_not_different_from_few_runs_a_side():
    """The CI's false alarm: a rerun of the same model DIFFERENT from 2 runs a side. Runs of
    one model fall in modes (here 0.129-0.15 ms, and 0.16-0.18 ms in a quarter of the runs):
    two runs a side in different modes are tight within each side, and the t interval
    alone excluded 1 by a factor of twenty."""
    fast, slow = [0.1292, 0.1293, 0.1301], [0.1807, 0.1813, 0.1820]
    for n in (2, 3):
        v = decide(fast[:n], slow[:n], 0.03, interleaved=True)
        assert v.ci_low > 1.3 and v.verdict == UNKNOWN and v.runs_needed == 5, v.text()
    # Over many A/A comparisons of runs drawn from the two modes: no false DIFFERENT at 2,
    # 3 or 5 runs a side (the t interval alone: 6.9 % at 2, 1.4 % at 3, 0.9 % at 5).
    rng = np.random.default_rng(11)

    def runs(n):
        mode = np.where(rng.random(n) < 0.25, 1.38, 1.0)
        return 0.13 * mode * np.exp(rng.normal(0, 0.01, n))

    for n in (2, 3, 5):
        verdicts = [decide(runs(n), runs(n), 0.03, interleaved=True).verdict for _ in range(2000)]
        assert verdicts.count(DIFFERENT) / len(verdicts) <= 0.01, n
    assert split_min_runs(0.01) == 5 and split_min_runs(0.01 / 6) == 7


def test_one_run_a_side_without_a_known_spread_is_unknown_and_asks_for_runs():
    # The case: --repeat 3 (0.98-1.03 ms) against one plain run of 1.03 ms.
    # Two reports made apart: the repeats' spread is one session's, so UNKNOWN, asking for
    # the board's history or an interleaved re-run (more runs of the same kind would not do).
    v = decide([0.982, 1.011, 1.03], [1.03], 0.03, baseline_runs=["r/1", "r/2", "r/3"])
    assert v.verdict == UNKNOWN and v.spread_source == REPEATS and v.df == 2.0
    assert v.runs_needed is None and v.why.endswith(APART_ASK)
    assert v.baseline_runs == ["r/1", "r/2", "r/3"] and v.to_json()["basis"] == v.basis()
    # Interleaved in one session, the repeats are the spread: more runs would decide it.
    v = decide([0.982, 1.011, 1.03], [1.03], 0.03, interleaved=True)
    assert v.ci_low < 1.0 < v.ci_high and v.runs_needed > 3
    # One run a side, no history: nothing says how far apart two runs fall.
    v = decide([1.0], [1.5], 0.03, interleaved=True)
    assert (v.verdict, v.spread, v.spread_source, v.runs_needed) == (UNKNOWN, None, NONE, 3)
    assert "no known spread" in v.why and "run at least 2 more a side" in v.why
    v = decide([1.0], [1.5], 0.03)
    assert (v.verdict, v.spread, v.runs_needed) == (UNKNOWN, None, None)
    assert v.why == f"one run a side and no known spread: {APART_ASK}"
    assert decide([3.0], [3.0], 0.03).verdict == SAME  # identical values
    assert decide([1.0, 1.2, 0.9], [0.9, 1.0, 1.2], 0.03).why == "identical values"  # the same runs
    assert decide([1.0, 1.2, 0.9], [1.0, 1.2], 0.03).verdict == UNKNOWN
    assert decide([0.0], [1.0], 0.03).verdict == UNKNOWN  # no ratio of 0
    assert decide([], [1.0], 0.03).verdict == UNKNOWN
    # A test level no data can meet: an interval held within floats, and UNKNOWN.
    v = decide([1.0, 1.1], [2.0, 2.1], 0.03, {"alpha_different": 1e-300}, interleaved=True)
    assert v.verdict == UNKNOWN and v.ci_low > 0 and np.isfinite(v.ci_high)
    with pytest.raises(UsageError, match="minimum effect"):
        decide([1.0], [1.0], -0.1)


def test_one_run_a_side_is_different_only_beyond_the_history_spread():
    prior = Spread.from_cv(0.01, df=20)
    assert prior.sd == pytest.approx(np.sqrt(np.log1p(1e-4)))
    v = decide([1.0], [1.10], 0.03, prior=prior)
    assert (v.verdict, v.spread_source, v.df) == (DIFFERENT, HISTORY, 20.0)
    half = t.ppf(0.995, 20) * prior.sd * np.sqrt(2)
    assert (v.ci_low, v.ci_high) == pytest.approx((1.1 * np.exp(-half), 1.1 * np.exp(half)))
    # 2 %: inside what two runs of a 1 % board differ by, and under the minimum effect.
    # Two reports made apart: more runs in the same two sessions would not shrink the
    # history's session-to-session spread, so no run count is promised.
    v = decide([1.0], [1.02], 0.03, prior=prior)
    assert v.verdict == UNKNOWN and v.runs_needed is None and "interleaved" in v.why
    # Interleaved, the repeats and history pool: degrees of freedom add up.
    v = decide([1.0, 1.01, 0.99], [1.0], 0.03, prior=prior, interleaved=True)
    assert (v.spread_source, v.df) == (BOTH, 22.0)


def test_two_reports_made_apart_are_judged_by_the_history_s_session_spread():
    """se² = 2σ_h² − σ_r²(2 − 1/na − 1/nb): the history's night-to-night spread σ_h holds a
    session's shift and a run's own; the repeats measure the run's own, σ_r."""
    prior = Spread.from_cv(0.02, df=30)
    base, cand = [1.00, 1.02, 0.98, 1.01, 0.99], [1.12, 1.14, 1.10, 1.13, 1.11]
    v = decide(base, cand, 0.03, prior=prior)
    within = (np.var(np.log(base), ddof=1) + np.var(np.log(cand), ddof=1)) / 2
    se = np.sqrt(2 * prior.sd**2 - within * (2 - 2 / 5))
    d = np.mean(np.log(cand)) - np.mean(np.log(base))
    half = t.ppf(0.995, 30) * se
    assert (v.ci_low, v.ci_high) == pytest.approx((np.exp(d - half), np.exp(d + half)))
    assert (v.verdict, v.spread_source, v.df, v.spread) == (DIFFERENT, BOTH, 30.0, prior.sd)
    # The same runs interleaved would be far tighter: their own spread is the difference's.
    assert decide(base, cand, 0.03, prior=prior, interleaved=True).ci_high < v.ci_high
    # On a 5 % board the same 12 % lies within what two sessions differ by: UNKNOWN.
    assert decide(base, cand, 0.03, prior=Spread.from_cv(0.05, df=30)).verdict == UNKNOWN
    # Repeats spread wider than the history's count as the history's (σ_r ≤ σ_h).
    wide = decide([0.8, 1.2], [0.8, 1.2 * 1.01], 0.03, prior=prior)
    assert wide.ci_high == pytest.approx(
        np.exp(np.log(1.01) / 2 + t.ppf(0.995, 30) * np.sqrt(prior.sd**2)), rel=1e-9
    )


def test_two_reports_made_apart_are_different_only_beyond_the_history_s_tail():
    """A board's sessions are not normal: a CV of 6 % says two runs fall within 20 % of each
    other 99 % of the time, but if one session in fifty is 60 % slower, pairs 60 % apart are
    among the history's too. Two reports made apart are DIFFERENT only beyond that tail."""
    from edgequal.host.lab.noise import pair_tail

    rng = np.random.default_rng(3)
    nights = np.exp(rng.normal(0, 0.05, 150))
    nights[[20, 90, 140]] *= 1.6  # three slow sessions
    tail = pair_tail([nights])
    logs = np.log(nights)
    pairs = np.abs(logs[:, None] - logs[None, :])[np.triu_indices(150, 1)]
    assert tail == pytest.approx(np.quantile(pairs, 0.99))
    assert np.log(1.3) < tail < np.log(1.7)  # the slow sessions' pairs set it
    cv = float(np.std(nights, ddof=1) / np.mean(nights))
    gauss = Spread.from_cv(cv, df=149)
    prior = Spread.from_cv(cv, df=149, tail=tail)
    # ×1.45: beyond the normal spread's interval, within the tail: not decided, and the
    # pairs that decide it are named.
    assert decide([1.0], [1.45], 0.03, prior=gauss).verdict == DIFFERENT
    v = decide([1.0], [1.45], 0.03, prior=prior)
    assert v.verdict == UNKNOWN and "--repeat-until-decided" in v.why
    assert f"within ×{np.exp(tail):.3f}" in v.why
    # Beyond the tail: DIFFERENT; interleaved runs are one session: the tail does not apply.
    assert decide([1.0], [np.exp(tail) * 1.05], 0.03, prior=prior).verdict == DIFFERENT
    runs = ([1.0, 1.01, 0.99, 1.0, 1.02], [1.45, 1.44, 1.46, 1.45, 1.47])
    assert decide(*runs, 0.03, prior=prior, interleaved=True).verdict == DIFFERENT
    # The tail is read within stretches: a real step between them is not noise.
    assert pair_tail([nights[:75], nights[75:] * 2.0]) == pytest.approx(tail, rel=0.15)


def test_one_run_against_one_is_a_slow_session_where_its_fastest_call_kept_pace():
    """A slower model makes every call slower, its fastest too; a slow session slows the
    bulk of the calls and leaves the fastest near the board's pace. One run against one
    made apart, beyond the history's tail: DIFFERENT only where the fastest call moved at
    least FLOOR_SHARE as far as the median (log scale)."""
    prior = Spread.from_cv(0.05, df=149, tail=float(np.log(1.25)))
    # The median ×1.8 (beyond the ×1.25 tail), the fastest call ×1.15: its log share is
    # log 1.15 / log 1.8 = 0.24, a slow session.
    v = decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, 1.9 * 1.15))
    assert v.verdict == UNKNOWN
    assert "×1.800 at the median but ×1.150 at the fastest call" in v.why
    assert (
        "a slow session of the candidate's, not the model" in v.why
        and "--repeat-until-decided" in v.why
    )
    # The same with the baseline the slow one: the rule is the same both ways.
    v = decide([3.6], [2.0], 0.03, prior=prior, floors=(1.9 * 1.15, 1.9))
    assert v.verdict == UNKNOWN and "a slow session of the baseline's, not the model" in v.why
    # The fastest call moved with it (×1.25 of ×1.8: share 0.38 > 1/3): DIFFERENT.
    assert np.log(1.25) / np.log(1.8) > FLOOR_SHARE
    v = decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, 1.9 * 1.25))
    assert v.verdict == DIFFERENT and v.ratio == pytest.approx(1.8)
    # Just under the share: UNKNOWN; a fastest call that moved the other way: UNKNOWN.
    under = 1.8 ** (FLOOR_SHARE * 0.99)
    assert decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, 1.9 * under)).verdict == UNKNOWN
    assert decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, 1.7)).verdict == UNKNOWN
    # Not read where the fastest calls are not known, with repeats on a side (runs 2..N
    # keep no fastest call) or for runs interleaved in one session.
    assert decide([2.0], [3.6], 0.03, prior=prior).verdict == DIFFERENT
    assert decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, None)).verdict == DIFFERENT
    runs = ([2.0, 2.02, 1.98], [3.6, 3.62, 3.58])
    assert decide(*runs, 0.03, prior=prior, floors=(1.9, 1.9)).verdict == DIFFERENT
    assert (
        decide([2.0], [3.6], 0.03, prior=prior, floors=(1.9, 1.9), interleaved=True).verdict
        == DIFFERENT
    )


def test_the_board_noise_raises_the_minimum_effect_up_to_the_cap():
    assert decide([1.0], [1.0], 0.03, prior=Spread.from_cv(0.04, 30)).min_effect == (
        pytest.approx(0.04)
    )
    assert decide([1.0], [1.0], 0.03, prior=Spread.from_cv(0.20, 30)).min_effect == (
        pytest.approx(NOISE_EFFECT_CAP)
    )
    assert decide([1.0], [1.0], 0.03, prior=Spread.from_cv(0.01, 30)).min_effect == 0.03


def test_same_is_an_equivalence_claim_and_needs_enough_runs():
    rng = np.random.default_rng(2)
    runs = np.exp(rng.normal(0.0, 0.01, 20))
    v = decide(runs[:10], runs[10:], 0.03, interleaved=True)
    assert v.verdict == SAME and v.same_low >= 1 / 1.03 and v.same_high <= 1.03
    # Two reports made apart, a board whose sessions agree to 1 %: SAME by its history.
    v = decide(runs[:10], runs[10:], 0.03, prior=Spread.from_cv(0.01, df=20))
    assert v.verdict == SAME and v.spread_source == BOTH
    # Two runs a side of a noisy board prove nothing either way: UNKNOWN, not SAME.
    v = decide([1.0, 1.08], [1.04, 0.97], 0.03, interleaved=True)
    assert v.verdict == UNKNOWN and v.runs_needed is not None and v.runs_needed > 2


@pytest.mark.slow  # about 3 CPU-seconds of decisions
def test_the_rule_s_error_rates_at_a_known_spread():
    """On log-normal runs of CV 2 %: A/A is DIFFERENT at most at the 1 % level, and a 10 %
    slowdown is never SAME, at 3, 5 and 10 runs a side (DIFFERENT from 5: the runs' split)."""
    rng = np.random.default_rng(7)
    for n in (3, 5, 10):
        aa = [
            decide(
                np.exp(rng.normal(0, 0.02, n)),
                np.exp(rng.normal(0, 0.02, n)),
                0.03,
                interleaved=True,
            ).verdict
            for _ in range(2000)
        ]
        assert aa.count(DIFFERENT) / len(aa) <= 0.01
        ab = [
            decide(
                np.exp(rng.normal(0, 0.02, n)),
                1.10 * np.exp(rng.normal(0, 0.02, n)),
                0.03,
                interleaved=True,
            ).verdict
            for _ in range(500)
        ]
        assert ab.count(SAME) == 0
        assert ab.count(DIFFERENT) / len(ab) >= {3: 0.0, 5: 0.9, 10: 0.95}[n]
        assert n >= 5 or ab.count(DIFFERENT) == 0


@pytest.mark.slow  # about 2 CPU-seconds of decisions
def test_two_sessions_apart_do_not_cry_wolf():
    """Runs in sessions, as this machine's were: each session shifted by σ_s 5 % (the
    stretches), runs inside it spread by σ_r 2 %. Two reports' repeats alone called an A/A
    pair DIFFERENT in about half the comparisons at 10 runs a side; the history's spread
    (night to night, σ_h² = σ_s² + σ_r², known from 30 nights) keeps it within the level."""
    rng = np.random.default_rng(5)
    prior = Spread.from_cv(float(np.sqrt(np.expm1(0.05**2 + 0.02**2))), df=30)

    def session(n, shift=1.0):
        return shift * np.exp(rng.normal(0, 0.05) + rng.normal(0, 0.02, n))

    for n in (1, 5, 10):
        pairs = [(session(n), session(n)) for _ in range(800)]
        apart = [decide(a, b, 0.03, prior=prior).verdict for a, b in pairs]
        assert apart.count(DIFFERENT) / len(apart) <= 0.015, n
        assert decide(*pairs[0], 0.03).verdict == UNKNOWN  # no history: not decided
        if n > 1:  # the repeats taken for the spread between sessions: false alarms
            own = [decide(a, b, 0.03, interleaved=True).verdict for a, b in pairs[:200]]
            assert own.count(DIFFERENT) / len(own) >= 0.2, n
    # A 30 % slowdown stands out of a 5 % board's sessions at 5 runs a side.
    slow = [decide(session(5), session(5, 1.3), 0.03, prior=prior).verdict for _ in range(200)]
    assert slow.count(DIFFERENT) / len(slow) >= 0.8 and SAME not in slow


def test_change_points_find_a_step_and_ignore_noise_and_small_steps():
    rng = np.random.default_rng(3)
    noise = rng.normal(1.0, 0.03, 20)
    assert change_points(noise) == []
    step = np.concatenate([rng.normal(1.0, 0.03, 12), rng.normal(1.5, 0.03, 8)])
    (s,) = change_points(step)
    assert s.index == 12 and s.p_value <= 0.01 and s.ratio == pytest.approx(1.5, abs=0.05)
    assert (s.n_before, s.n_after) == (12, 8)
    # A real but 2 % step is below the 5 % minimum effect.
    small = np.concatenate([rng.normal(1.0, 0.002, 12), rng.normal(1.02, 0.002, 8)])
    assert change_points(small, min_effect=0.05) == []
    assert [c.index for c in change_points(small, min_effect=0.01)] == [12]
    # Two steps: both, each measured between its neighbours.
    two = np.concatenate([np.full(8, 1.0), np.full(8, 2.0), np.full(8, 1.0)])
    two = two + rng.normal(0, 0.02, 24)
    found = change_points(two)
    assert [c.index for c in found] == [8, 16]
    assert found[0].n_after == 8 and found[1].n_before == 8
    # Same values and seed, same answer.
    assert change_points(two, seed=5) == change_points(two, seed=5)
    with pytest.raises(UsageError, match="p_value"):
        change_points(two, p_value=0)
