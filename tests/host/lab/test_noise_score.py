"""A board's noise score and a change's cause, on literal numbers: the pooled spread within
the stretches between a series' changes, and the line a change with no recorded culprit is
read with; and a tie in the change-point permutation test."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.host.lab.changes import Change, load_text, pooled_cv_with_interval


def test_the_spread_is_pooled_within_stretches_not_across_a_change():
    # Two levels, each ±2 %: across them the CV is about 40 %; within them, 2 %.
    low, high = [1.0, 1.02, 0.98], [2.0, 2.04, 1.96]
    cv, (lo, hi) = pooled_cv_with_interval([low, high])
    # Σ (x / mean − 1)² = 4 · 0.02² over 6 values less 2 means.
    assert cv == pytest.approx(0.02, rel=1e-9)
    assert lo <= cv <= hi
    everything = np.array(low + high)
    assert np.std(everything, ddof=1) / np.mean(everything) > 0.3


def test_one_stretch_is_the_sample_cv():
    x = [10.0, 10.5, 9.7, 10.2, 9.9]
    cv, (lo, hi) = pooled_cv_with_interval([x])
    assert cv == pytest.approx(np.std(x, ddof=1) / np.mean(x), rel=1e-12)
    assert lo <= cv <= hi


def _change(culprit, load) -> Change:
    return Change(
        device="pi5-a", model="det", preset="quick", figure="p50 x", unit="ms", kind="latency",
        better="lower", index=9, first_after={"measured_at": "2026-11-14T02:00:00Z"},
        last_before={}, median_before=10.0, median_after=10.6, ratio=1.06, ratio_ci=None,
        p_value=0.01, n_before=9, n_after=11, min_effect=0.05, culprit=culprit, load=load,
    )  # fmt: skip


def test_a_change_with_no_recorded_culprit_says_what_it_was_read_against():
    moved = {"other_cpus_before": 0.2, "other_cpus_after": 0.95, "separation": 0.8}
    assert (
        _change([], moved)
        .headline()
        .endswith(
            "; nothing recorded changed there; other processes' CPU use moved with it: "
            "0.20 → 0.95 CPUs"
        )
    )
    alike = {"other_cpus_before": 0.41, "other_cpus_after": 0.44, "separation": 0.2}
    assert (
        _change([], alike)
        .headline()
        .endswith(
            "; nothing recorded changed there (other processes' CPU use did not move with it, "
            "0.41 → 0.44 CPUs: unexplained)"
        )
    )
    # Other processes' CPU use fell where the figure got worse: not its cause.
    fell = {"other_cpus_before": 0.95, "other_cpus_after": 0.2, "separation": 0.9}
    assert (
        _change([], fell)
        .headline()
        .endswith("(other processes' CPU use did not move with it, 0.95 → 0.20 CPUs: unexplained)")
    )
    assert (
        _change([], None)
        .headline()
        .endswith("(other processes' CPU use not measured: unexplained)")
    )
    firmware = [{"field": "firmware", "before": "a", "after": "b", "separation": 1.0}]
    line = _change(firmware, moved).headline()
    assert "changed there: firmware a → b" in line and "nothing recorded" not in line
    assert load_text(moved, worse=True) in _change([], moved).headline()


def test_a_shuffle_that_splits_the_same_values_apart_is_a_tie():
    """3 runs against 3, perfectly apart: 2 of the 20 orders split as well, so p is about
    0.1 and never 0.05; the shuffles' gains differ from the real one only in the last
    units of place (the sums run in another order). A real night's first inference."""
    from edgequal.host.judge.change_points import change_points

    nights = [0.412374, 0.399224, 0.481051, 0.583212, 0.498023, 0.587216]
    assert change_points(nights, p_value=0.05, min_effect=0.25) == []
    [split] = change_points(nights, p_value=0.2, min_effect=0.25)
    assert split.index == 3 and 0.05 < split.p_value <= 0.2


def test_a_noise_score_is_the_spread_a_verdict_assumes_with_its_degrees_of_freedom():
    from edgequal.host.judge.verdict import DIFFERENT, HISTORY, decide
    from edgequal.host.lab.changes import NoiseScore
    from edgequal.host.lab.noise import noise_spread

    score = NoiseScore(
        device="pi5-a", model="det", preset="quick", figure="p50 x", cv=0.02,
        cv_ci=(0.015, 0.03), runs=24, min_effect=0.03, too_noisy=False, segments=2,
    )  # fmt: skip
    spread = noise_spread(score)
    assert spread.source == HISTORY and spread.df == 22.0  # 24 runs less two stretches' means
    assert spread.sd == pytest.approx(np.sqrt(np.log1p(0.02**2)))
    assert noise_spread(None) is None
    # One run a side: 15 % slower is beyond two runs of a 2 % board; 3 % is not.
    assert decide([1.0], [1.15], 0.03, prior=spread).verdict == DIFFERENT
    assert decide([1.0], [1.03], 0.03, prior=spread).verdict != DIFFERENT
