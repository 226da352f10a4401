"""The nightly search's own rules (host/lab/change_state.py), in memory: a quiet series with
a full window is searched every DEFAULT_STRIDE nights, staggered over the series, and finds
a step at the same night, at most stride − 1 nights later; tails stored as base64 float64
(JSON tails of earlier versions still read)."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.host.lab.change_state import (
    DEFAULT_STRIDE,
    DEFAULT_WINDOW,
    FigureState,
    _pack,
    _unpack,
    nightly,
)
from edgequal.host.lab.changes import ChangeSettings

STEP = 70


def _series() -> np.ndarray:
    """70 quiet nights (CV 2 %), then a step to ×1.3 for 20 nights."""
    noise = 1.0 + 0.02 * np.random.default_rng(47).standard_normal(STEP + 20)
    return 10.0 * np.where(np.arange(STEP + 20) >= STEP, 1.3, 1.0) * noise


def _first_report(key: tuple, stride: int) -> tuple[int, list[int]]:
    """The night the step is first reported (one night at a time after a full window), and
    the changes found that night."""
    values = _series()
    state = FigureState(key)
    settings = nightly(ChangeSettings())
    assert state.advance(values[:DEFAULT_WINDOW], settings, stride=stride) == []
    for night in range(DEFAULT_WINDOW, values.size):
        new = state.advance(values[night : night + 1], settings, stride=stride)
        if new:
            return night, [c["index"] for c in new]
    raise AssertionError("the step was never reported")


# The three keys' turns (crc32 of the key, mod 3) are 0, 1 and 2: found the night the
# nightly search finds it, one night later, and (here) the same night again.
@pytest.mark.parametrize("model,late", [("face", 2), ("bert", 1), ("det", 0)])
def test_a_strided_search_finds_the_step_at_its_night_at_most_stride_minus_1_nights_later(
    model, late
):
    key = ("pi-a", model, "quick", "p50_ms")
    every_night, found_nightly = _first_report(key, stride=1)
    strided, found_strided = _first_report(key, stride=DEFAULT_STRIDE)
    assert found_nightly == found_strided == [STEP]
    assert every_night == STEP + 2  # its third night: min_points, and p 0.001 at CV 2 %
    assert strided == every_night + late


def test_quiet_series_take_turns_and_a_block_of_nights_is_always_searched():
    keys = [("pi-a", f"model-{i}", "quick", "p50_ms") for i in range(30)]
    states = [FigureState(k, points=DEFAULT_WINDOW) for k in keys]
    per_night = []
    for _ in range(6):
        due = [s for s in states if s._due(1, DEFAULT_STRIDE)]
        per_night.append(len(due))
        for s in states:
            s.points += 1
    # Every series is due once in any three consecutive nights; the 30 share the nights.
    assert sum(per_night[:3]) == sum(per_night[3:]) == 30
    assert all(4 <= n <= 16 for n in per_night), per_night
    assert all(s._due(DEFAULT_STRIDE, DEFAULT_STRIDE) for s in states)
    assert all(s._due(1, 1) for s in states)


def test_tails_are_stored_exactly_and_json_tails_still_read():
    tail = [0.1 * i + 1e-9 for i in range(60)] + [1 / 3]
    assert _unpack(_pack(tail)) == tail
    assert _unpack(_pack([])) == []
    assert _unpack("[1.5, 2, 3.25]") == [1.5, 2.0, 3.25]
