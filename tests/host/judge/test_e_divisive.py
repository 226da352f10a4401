"""E-Divisive (host/judge/change_points.py) against its published definition (Matteson &
James 2014): Q̂ with its exponent alpha computed by hand on literal series, the split it must
return, and the fast search against the formula written out."""

from __future__ import annotations

import math

import numpy as np
import pytest
from edgequal.host.judge.change_points import (
    _q_grid,
    best_split,
    change_points,
    e_divisive,
    q_hat,
)


def test_q_hat_of_a_literal_split_with_alpha_1():
    # X = 1 3 2, Y = 10 12 11. Between: Σ|x−y| = 30 + 24 + 27 = 81, × 2/(3·3) = 18.
    # Within X: 2 + 1 + 1 = 4 over C(3,2) = 3 pairs; within Y the same. Ê = 18 − 8/3 = 46/3.
    # Q̂ = nm/(n+m) · Ê = 9/6 · 46/3 = 23.
    assert q_hat([1, 3, 2], [10, 12, 11]) == pytest.approx(23.0, abs=1e-12)


def test_q_hat_of_a_literal_split_with_alpha_one_half():
    # X = 0 1, Y = 4 9, α = 0.5. Between: √4 + √9 + √3 + √8, × 2/(2·2). Within X: √1 over 1
    # pair; within Y: √5 over 1 pair. Q̂ = 4/4 · Ê.
    by_hand = (2 + 3 + math.sqrt(3) + math.sqrt(8)) / 2 - 1 - math.sqrt(5)
    assert by_hand == pytest.approx(1.544171, abs=1e-6)
    assert q_hat([0, 1], [4, 9], alpha=0.5) == pytest.approx(by_hand, abs=1e-12)


def test_the_best_split_of_a_literal_series_is_the_step():
    # Every (τ, κ) with two or more points either side: (3, 6) gives the largest Q̂, 23.
    assert best_split([1, 3, 2, 10, 12, 11], min_points=2) == (3, 6, pytest.approx(23.0))
    # A bad week: κ ends Y at the week's end, so Y holds only the week's nights.
    week = [10, 11, 10, 11, 10, 30, 31, 30, 10, 11, 10, 11]
    tau, kappa, _ = best_split(week, min_points=3)
    assert (tau, kappa) == (5, 8)


def test_the_fast_search_equals_the_published_formula_everywhere():
    z = np.random.default_rng(3).normal(100.0, 5.0, 14)
    z[8:] += 9.0
    for alpha in (0.5, 1.0, 1.5):
        grid = _q_grid(z, 2, alpha)
        for tau in range(2, 13):
            for kappa in range(tau + 2, 15):
                assert grid[tau, kappa] == pytest.approx(
                    q_hat(z[:tau], z[tau:kappa], alpha), rel=1e-9, abs=1e-9
                )
        assert grid[1, 5] == -np.inf and grid[4, 5] == -np.inf  # fewer than 2 points a side


def test_e_divisive_locates_a_literal_step_and_its_permutation_p_value():
    z = [10, 11, 10, 12, 11, 20, 21, 20, 22, 21]
    # Orders as extreme as the observed: the low five first or last, 2 of C(10,5) = 252.
    [(index, p)] = e_divisive(z, p_value=0.05, permutations=199, seed=1)
    assert index == 5 and 1 / 200 <= p <= 0.05
    [split] = change_points(z, p_value=0.05, min_effect=0.05, seed=1)
    assert (split.index, split.median_before, split.median_after) == (5, 11.0, 21.0)


def test_no_change_in_a_literal_flat_series():
    assert e_divisive([5.0] * 12) == []
    assert e_divisive([10, 11, 10, 12, 11, 10, 11, 12, 10, 11], p_value=0.05) == []


def test_alpha_outside_0_2_is_a_usage_error():
    from edgequal.host.errors import UsageError

    with pytest.raises(UsageError, match="alpha"):
        change_points([1.0] * 10, alpha=2.0)
