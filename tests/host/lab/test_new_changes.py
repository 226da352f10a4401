"""Which changes a fleet run brought: each change the history already showed accounts for
one change of the new analysis, the nearest within ``min_points`` runs."""

from __future__ import annotations

from types import SimpleNamespace

from edgequal.host.lab.fleet_changes import new_changes


def _change(index: int, worse: bool = True, figure: str = "p50 x=1x3", device: str = "pi-1"):
    return SimpleNamespace(
        device=device, model="det", preset="quick", figure=figure, worse=worse, index=index
    )


def test_a_change_right_after_a_known_one_is_new():
    # Night 11 a load event (known since night 13); night 14 the slower model, seen at 16.
    known = [_change(11)]
    found = [_change(11), _change(14)]
    assert new_changes(found, known, window=3) == [found[1]]
    # The known one moved a run later as more nights came: still known, the other new.
    found = [_change(12), _change(14)]
    assert new_changes(found, known, window=3) == [found[1]]


def test_a_known_change_moved_within_the_window_is_not_new():
    assert new_changes([_change(13)], [_change(11)], window=3) == []
    assert new_changes([_change(15)], [_change(11)], window=3) == [_change(15)]


def test_only_the_same_series_figure_and_direction_match():
    known = [_change(10)]
    for other in (
        _change(10, worse=False),
        _change(10, figure="p99 x=1x3"),
        _change(10, device="pi-2"),
    ):
        assert new_changes([other], known, window=3) == [other]
    assert new_changes([], known, window=3) == []
