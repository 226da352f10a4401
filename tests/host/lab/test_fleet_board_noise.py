"""`fleet run --baseline`: a cell's report and its baseline are two nights, made apart, so
the gate judges them by the spread between nights of that board × model, the noise score of
the lab's history (host/lab/fleet_judging.py ``CellJudge.board_noise``), as ``gate
--history`` does. Real signed reports recorded into a real SQLite history
(tests/signed_nights.py); the figures are given, the verdict and its spread are computed."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.judge.policy import parse_policy
from edgequal.host.lab.fleet_judging import CellJudge
from edgequal.host.lab.history import History
from edgequal.host.lab.results import RunRecord

pytestmark = pytest.mark.slow  # signs and records 15 reports (about 2 CPU-s)

# A board whose nights agree within about 1 %: the 13 nights of its history.
P50S = [1.00, 1.01, 0.99, 1.005, 0.995, 1.012, 0.988, 1.0, 1.003, 0.997, 1.008, 0.992, 1.0]


@pytest.fixture
def lab(tmp_path, monkeypatch, test_helper):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    nights = test_helper("signed_nights")
    board = nights.Board("pi5-a", "raspberrypi/pi5")
    db = f"sqlite:///{tmp_path / 'history.db'}"
    recorded = nights.record_nights(
        db,
        tmp_path / "nights",
        [board],
        {(n, "pi5-a"): nights.Night(p) for n, p in enumerate(P50S)},
    )
    KnownDevices().trust("pi5-a", "grpc://127.0.0.1:1", board.key.public_key_raw())
    baseline = tmp_path / "baseline" / "reports" / "det@pi5-a.json"
    baseline.parent.mkdir(parents=True)
    shutil.copy(recorded[-1], baseline)

    def tonight(p50: float):
        """Tonight's report of the same board and model, not yet in the history."""
        (path,) = nights.record_nights(
            f"sqlite:///{tmp_path / 'scratch.db'}",
            tmp_path / f"tonight-{p50}",
            [board],
            {(len(P50S), "pi5-a"): nights.Night(p50)},
        )
        return path

    return SimpleNamespace(
        db=db, baseline_dir=baseline.parent.parent, tonight=tonight, out=tmp_path
    )


def _judge(lab, report, with_history: bool) -> tuple:
    history = History.open(lab.db) if with_history else None

    def record_report(path, device, cell):  # the fleet run's recorder, its history beside it
        pass

    record_report.history = history
    options = SimpleNamespace(baseline_dir=lab.baseline_dir, html_pages=False)
    judge = CellJudge(
        options, KnownDevices(), parse_policy({}), lab.out, None, record_report, "lab/tonight"
    )
    gate = judge.judge(RunRecord("det", "pi5-a"), report, {"status": "passed"}, resumed=True)[0]
    try:
        return gate["baseline_verdict"], judge.board_noise(
            RunRecord("det", "pi5-a"), report.read_bytes(), report
        )
    finally:
        if history is not None:
            history.close()


def test_a_night_against_the_last_is_judged_by_the_board_s_noise(lab):
    slower = lab.tonight(1.12)
    verdict, spread = _judge(lab, slower, with_history=True)
    # The history's night-to-night spread: about 1 %, from the 13 nights' runs.
    assert spread is not None and spread.source == "history" and 0.003 < spread.sd < 0.02
    assert verdict == "DIFFERENT"
    # The same night within the board's noise: SAME (its sessions agree within ±3 %).
    assert _judge(lab, lab.tonight(1.004), with_history=True)[0] == "SAME"
    # Without the history, one run a side and no spread: not decided.
    assert _judge(lab, slower, with_history=False) == ("UNKNOWN", None)


def test_a_regression_between_two_nights_is_what_pairs_confirm(lab):
    """A night's regression against the last night is two sessions apart: a session can be
    slow in every run with nothing else moving (docs/gating.md "Confirming a regression"),
    so with ``--repeat-until-decided N`` the fleet confirms it by interleaved pairs before
    the gate fails; SAME is left as it is, an UNKNOWN is decided by pairs as before."""
    from edgequal.host.judge.gate import undecided_against_baseline

    def picked(report, with_history: bool):
        asked = []

        def decide_more(gate, baseline, predicate, prior):  # the fleet's hook: pairs run here
            asked.append((undecided_against_baseline(gate), prior))
            return gate

        history = History.open(lab.db) if with_history else None

        def record_report(path, device, cell):
            pass

        record_report.history = history
        options = SimpleNamespace(baseline_dir=lab.baseline_dir, html_pages=False)
        judge = CellJudge(
            options, KnownDevices(), parse_policy({}), lab.out, None, record_report, "lab/x"
        )
        try:
            fields = judge.judge(
                RunRecord("det", "pi5-a"), report, {"status": "passed"}, True, decide_more
            )[0]
        finally:
            if history is not None:
                history.close()
        return fields["baseline_verdict"], *asked[0]

    verdict, check, prior = picked(lab.tonight(1.12), with_history=True)
    assert verdict == "DIFFERENT" and check is not None
    # The pairs are judged with the board's noise too, so they can decide from the first.
    assert prior is not None and prior.source == "history"
    assert check.name.startswith("baseline.latency[") and not check.passed and check.judged
    assert "a regression" in check.message
    assert picked(lab.tonight(1.004), with_history=True)[:2] == ("SAME", None)
    verdict, check, prior = picked(lab.tonight(1.12), with_history=False)
    assert verdict == "UNKNOWN" and check is not None and not check.judged and prior is None
