"""SAME / DIFFERENT / UNKNOWN (host/judge/verdict.py) and the change-point detector
(host/judge/change_points.py) on values with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.change_points import change_points
from edgequal.host.judge.verdict import DIFFERENT, SAME, UNKNOWN, decide, same_threshold


def test_the_same_threshold_tightens_as_samples_grow():
    assert same_threshold(10) == pytest.approx(0.5)
    assert same_threshold(40) == pytest.approx(0.25)
    assert same_threshold(250) == pytest.approx(0.1)
    assert same_threshold(1000) == pytest.approx(0.05)
    assert same_threshold(100_000) == 0.05  # the floor
    assert same_threshold(2) == 1.0  # capped: a large p from two values is no evidence
    assert same_threshold(40, {"same_p_start": 0.8, "same_p_floor": 0.3}) == pytest.approx(0.4)


def test_a_clear_shift_is_different_and_a_tiny_one_is_same():
    rng = np.random.default_rng(1)
    base = rng.normal(10.0, 0.2, 30)
    v = decide(base, rng.normal(11.0, 0.2, 30), min_effect=0.03)
    assert v.verdict == DIFFERENT and v.p_value <= 0.01 and v.ratio == pytest.approx(1.1, abs=0.02)
    assert v.p_value == min(v.ks_p, v.mann_whitney_p)
    # Thousands of samples make a 0.5 % shift significant; below the 3 % effect it is SAME.
    big = rng.normal(10.0, 0.2, 5000)
    v = decide(big, rng.normal(10.05, 0.2, 5000), min_effect=0.03)
    assert v.verdict == SAME and v.p_value <= 0.01 and "smaller than 3%" in v.why


def test_same_distribution_is_same_and_few_values_stay_unknown():
    rng = np.random.default_rng(2)
    x = rng.normal(5.0, 0.1, 2000)
    assert decide(x[:1000], x[1000:], 0.03).verdict == SAME
    # Four values a side 1 sd apart: neither significant nor a large p.
    v = decide([1.0, 1.1, 0.9, 1.05], [1.1, 1.2, 1.0, 1.15], 0.0)
    assert v.verdict == UNKNOWN and 0.01 < v.p_value <= v.same_threshold
    assert decide([3.0], [3.0], 0.03).verdict == SAME  # identical single values
    assert decide([3.0], [3.1], 0.03).verdict == UNKNOWN


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
