"""The change state kept in the history (host/lab/change_state.py): night by night it finds
what the full recompute and ``history changes`` find, on a real history of signed nights."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # 36 signed reports recorded night by night: about 3 CPU-s

NIGHTS = 20
STEP_NIGHT = 9


def _table(nights, first: int, last: int) -> dict:
    """pi-a's p50 steps up 30 % at STEP_NIGHT; pi-b stays; a 1 % wobble on both."""
    wobble = [0.0, 0.01, -0.01, 0.005, -0.005, 0.0]
    table = {}
    for n in range(first, last):
        w = 1.0 + wobble[n % len(wobble)]
        table[(n, "pi-a")] = nights.Night(p50_ms=(1.3 if n >= STEP_NIGHT else 1.0) * w)
        table[(n, "pi-b")] = nights.Night(p50_ms=2.0 * w)
    return table


def _night_by_night(url: str, tmp_path, nights) -> list[list[dict]]:
    from edgequal.host.lab.change_state import update
    from edgequal.host.lab.history import History

    boards = [nights.Board("pi-a", "raspberry-pi/5"), nights.Board("pi-b", "raspberry-pi/5")]
    found = []
    for n in range(NIGHTS):
        nights.record_nights(url, tmp_path / "reports", boards, _table(nights, n, n + 1))
        history = History.open(url)
        try:
            found.append(update(history).changes)
        finally:
            history.close()
    return found


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, test_helper):
    tmp_path = tmp_path_factory.mktemp("state")
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    nights = test_helper("signed_nights")
    with pytest.MonkeyPatch.context() as mp:  # the boards' keys pinned in this module's config
        mp.setenv("EDGEQUAL_CONFIG_DIR", str(tmp_path / "config"))
        per_night = _night_by_night(url, tmp_path, nights)
    return {"url": url, "per_night": per_night}


def test_the_step_is_new_once_on_the_night_it_can_first_be_called(recorded):
    per_night = recorded["per_night"]
    new = [(n, c) for n, found in enumerate(per_night) for c in found]
    assert [(c["device"], c["figure"], c["index"]) for _, c in new] == [
        ("pi-a", "p50_ms", STEP_NIGHT)
    ]
    night, change = new[0]
    # Three nights after it (min_points) at the earliest; the nightly p 0.001 (999 shuffles)
    # needs about six: 9 nights against 3 split as well in 2 of C(12, 3) = 220 orders.
    assert STEP_NIGHT + 2 <= night <= STEP_NIGHT + 7
    assert change["median_after"] / change["median_before"] == pytest.approx(1.3, rel=0.02)


def test_incremental_state_equals_the_full_recompute_and_history_changes(recorded):
    from edgequal.host.lab.change_state import rebuild, state_changes
    from edgequal.host.lab.changes import find_changes
    from edgequal.host.lab.history import History

    history = History.open(recorded["url"])
    try:
        incremental = state_changes(history)
        full = rebuild(history)
        rebuilt = state_changes(history)
        analysed = find_changes(history.runs())
    finally:
        history.close()
    assert full.points == 2 * NIGHTS * 3  # p50, cold load, peak memory per run
    index = {k: [c["index"] for c in v] for k, v in incremental.items()}
    assert index == {k: [c["index"] for c in v] for k, v in rebuilt.items()}
    assert index[("pi-a", "det", "quick", "p50_ms")] == [STEP_NIGHT]
    assert not any(v for k, v in index.items() if k != ("pi-a", "det", "quick", "p50_ms"))
    # history changes (every figure, decoded from the reports) finds the same p50 change.
    p50 = [(c.device, c.index) for c in analysed.changes if c.figure.startswith("p50")]
    assert p50 == [("pi-a", STEP_NIGHT)]


def test_an_update_with_nothing_new_changes_nothing(recorded):
    from edgequal.host.lab.change_state import update
    from edgequal.host.lab.history import History

    history = History.open(recorded["url"])
    try:
        again = update(history)
    finally:
        history.close()
    assert (again.series, again.points, again.changes) == (0, 0, [])


def test_history_update_command(recorded, capsys):
    from edgequal.cli.main import main

    assert main(["history", "update", "--db", recorded["url"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"series": 0, "points": 0, "changes": []}
    assert main(["history", "update", "--db", recorded["url"], "--rebuild", "--json"]) == 0
    rebuilt = json.loads(capsys.readouterr().out)
    assert [(c["device"], c["figure"], c["index"]) for c in rebuilt["changes"]] == [
        ("pi-a", "p50_ms", STEP_NIGHT)
    ]
