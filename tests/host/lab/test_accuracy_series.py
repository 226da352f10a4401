"""History follows the device's accuracy on a labelled golden set (docs/accuracy.md): each
night's top-1 is a series of its own (kind ``accuracy``, higher is better), and a drop
is found where it happened. Real signed reports recorded into a real SQLite history
(tests/signed_nights.py); the per-case results are given, the series and the change are
computed."""

from __future__ import annotations

import pytest
from edgequal.host.lab.changes import find_changes
from edgequal.host.lab.history import History

pytestmark = pytest.mark.slow  # signs and records 16 reports, E-Divisive's shuffles

NIGHTS, DROP_NIGHT, CASES = 16, 10, 200


def _labelled(correct: int) -> dict:
    """``drift.labelled`` of 200 classification cases, the first ``correct`` right."""
    cases = [
        {"case": f"c{i:03d}", "label": i % 10, "device": [i % 10 if i < correct else (i + 1) % 10]}
        for i in range(CASES)
    ]
    return {"drift": {"labelled": {"task": "classification", "cases": cases}}}


def test_a_drop_in_top1_is_a_change_of_the_accuracy_series(tmp_path, test_helper):
    nights = test_helper("signed_nights")
    board = nights.Board("pi5-a", "raspberrypi/pi5")
    # About 92 % for ten nights, then about 84 %: eight points lower (the latency unchanged).
    right = [184, 186, 183, 185, 184, 186, 185, 183, 184, 185, 168, 167, 169, 168, 166, 168]
    runs = {
        (n, "pi5-a"): nights.Night(1.0 + 0.01 * (n % 3), extra=_labelled(right[n]))
        for n in range(NIGHTS)
    }
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    nights.record_nights(db, tmp_path / "r", [board], runs)
    history = History.open(db)
    try:
        report = find_changes(history.runs())
    finally:
        history.close()
    accuracy = [c for c in report.changes if c.figure == "accuracy top-1"]
    assert [(c.index, c.worse) for c in accuracy] == [(DROP_NIGHT, True)]
    (change,) = accuracy
    assert change.median_before == pytest.approx(92.25) and change.median_after == 84.0
    # The latency, which did not move, has no change.
    assert not [c for c in report.changes if c.figure.startswith("p50")]
