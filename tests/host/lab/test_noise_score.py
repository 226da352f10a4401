"""A board's noise score and a change's cause, on literal numbers: the pooled spread within
the stretches between a series' changes, and the line a change with no recorded culprit is
read with; and a tie in the change-point permutation test."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from edgequal.host.lab.change_causes import machine_evidence
from edgequal.host.lab.changes import Change, ChangeSettings
from edgequal.host.lab.noise import pooled_cv_with_interval


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


def _change(culprit, machine, ratio=1.06) -> Change:
    return Change(
        device="pi5-a", model="det", preset="quick", figure="p50 x", unit="ms", kind="latency",
        better="lower", index=9, first_after={"measured_at": "2026-11-14T02:00:00Z"},
        last_before={}, median_before=10.0, median_after=10.0 * ratio, ratio=ratio,
        ratio_ci=None, p_value=0.01, n_before=9, n_after=11, min_effect=0.05, culprit=culprit,
        machine=machine,
    )  # fmt: skip


# Nine nights before, eleven after: each run's own readings of the machine, as
# ``change_causes.machine_readings`` takes them from its report.
QUIET = [{"other_cpus": 0.2 + 0.01 * i, "clean_share": 0.97, "bare_import_ms": 300.0 + i}
         for i in range(9)]  # fmt: skip
BUSY = [{"other_cpus": 0.9 + 0.01 * i, "clean_share": 0.97, "bare_import_ms": 300.0 + i}
        for i in range(11)]  # fmt: skip


def test_a_change_only_the_machine_moved_with_is_a_machine_change_not_a_failure():
    machine = machine_evidence(QUIET, BUSY, worse=True)
    other = next(m for m in machine if m["signal"] == "other_cpus")
    assert other["separation"] == 1.0 and other["moved_with"]
    assert other["before"] == 0.24 and other["after"] == 0.95  # medians
    # The clean-call share and the bare import time did not move: not what moved with it.
    assert [m["signal"] for m in machine if m["moved_with"]] == ["other_cpus"]
    change = _change([], machine)
    assert change.cause == "machine"
    assert change.headline().endswith(
        "; nothing recorded changed there: a machine change (other processes' CPU use "
        "0.24 → 0.95 CPUs)"
    )
    # Shown, not failed by default; the lab's fail_on_machine fails it.
    assert not change.fails(ChangeSettings())
    assert change.fails(ChangeSettings(fail_on_machine=True))
    assert change.to_json()["cause"] == "machine"


def test_fewer_clean_calls_or_a_slower_bare_import_is_the_machine_too():
    fewer = [{**r, "clean_share": 0.6 + 0.001 * i} for i, r in enumerate(QUIET + BUSY)][9:]
    machine = machine_evidence(QUIET, fewer, worse=True)
    assert [m["signal"] for m in machine if m["moved_with"]] == ["other_cpus", "clean_share"]
    slower = [{**r, "other_cpus": 0.2, "bare_import_ms": 420.0 + i} for i, r in enumerate(BUSY)]
    machine = machine_evidence(QUIET, slower, worse=True)
    assert [m["signal"] for m in machine if m["moved_with"]] == ["bare_import_ms"]
    assert "the runtime's import (bare speed) 304 ms → 425 ms" in _change([], machine).headline()


def test_a_change_the_machine_did_not_move_with_is_unexplained_and_fails():
    alike = machine_evidence(QUIET, QUIET[:5] + QUIET[:6], worse=True)
    assert not any(m["moved_with"] for m in alike)
    change = _change([], alike)
    assert change.cause == "unexplained" and change.fails(ChangeSettings())
    assert "(the machine did not move with it: other processes' CPU use 0.24 → " in (
        change.headline()
    )
    assert change.headline().endswith(": unexplained)")
    # Other processes' CPU use fell where the figure got worse: not its cause.
    fell = machine_evidence(BUSY, QUIET, worse=True)
    assert _change([], fell).cause == "unexplained"
    # ... for a timing figure. Memory or drift moves with the machine with no fixed sign:
    # moving at the same point is enough there.
    assert _change([], machine_evidence(BUSY, QUIET, worse=True, directed=False)).cause == (
        "machine"
    )
    # ... but it explains a change for the better.
    better = _change([], machine_evidence(BUSY, QUIET, worse=False), ratio=0.8)
    assert better.cause == "machine" and not better.worse and not better.fails(ChangeSettings())
    # Not measured at all (a board without /proc/stat, no cold load): unexplained.
    none = _change([], machine_evidence([{}] * 9, [{}] * 11, worse=True))
    assert none.cause == "unexplained"
    assert none.headline().endswith("(the machine's load and speed not measured: unexplained)")


def test_a_recorded_field_makes_it_recorded_whatever_the_machine_did():
    firmware = [{"field": "firmware", "before": "a", "after": "b", "separation": 1.0}]
    change = _change(firmware, machine_evidence(QUIET, BUSY, worse=True))
    line = change.headline()
    assert change.cause == "recorded" and change.fails(ChangeSettings())
    assert "changed there: firmware a → b" in line and "nothing recorded" not in line
    # Better is never a failure.
    assert not _change(firmware, [], ratio=0.9).fails(ChangeSettings())


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
    from edgequal.host.lab.board_noise import noise_spread
    from edgequal.host.lab.noise import NoiseScore

    score = NoiseScore(
        device="pi5-a", model="det", preset="quick", figure="p50 x", cv=0.02,
        cv_ci=(0.015, 0.03), runs=24, min_effect=0.03, too_noisy=False, segments=2,
    )  # fmt: skip
    spread = noise_spread(score)
    assert spread.source == HISTORY and spread.df == 22.0  # 24 runs less two stretches' means
    assert spread.sd == pytest.approx(np.sqrt(np.log1p(0.02**2)))
    assert noise_spread(None) is None
    # The score's session tail goes with it: two reports ×1.15 apart are within a tail of
    # ×1.2 (a board whose history holds slow sessions), so not DIFFERENT.
    assert spread.tail is None
    tailed = noise_spread(replace(score, session_tail=float(np.log(1.2))))
    assert tailed.tail == pytest.approx(np.log(1.2))
    assert decide([1.0], [1.15], 0.03, prior=tailed).verdict == "UNKNOWN"
    # One run a side: 15 % slower is beyond two runs of a 2 % board; 3 % is not.
    assert decide([1.0], [1.15], 0.03, prior=spread).verdict == DIFFERENT
    assert decide([1.0], [1.03], 0.03, prior=spread).verdict != DIFFERENT
