"""``qualify MODEL --baseline REPORT --repeat-until-decided N`` on the local agent: the
candidate and the baseline's own model (found by its digest) run in pairs until
SAME / DIFFERENT decides their clean p50s, one per run."""

from __future__ import annotations

import json
import shutil

import pytest
from edgequal.cli.main import main as edgequal_main

SHORT = ["--cold-runs", "1", "--warmup", "0.1s", "--latency", "0.2s", "--threads", "1"]


@pytest.fixture(scope="module")
def board(tmp_path_factory, local_agents):
    """The module's host config and local-agent state: one agent serves it for the module
    (``--device local`` finds it serving rather than starting one per command), and the
    baseline's report is made once, signed by its key, for both tests."""
    home = tmp_path_factory.mktemp("repeat-board")
    agent = local_agents.serve(home / "local-agent")
    yield home
    agent.stop()


@pytest.fixture
def on_board(board, monkeypatch):
    """This test's ``--device local`` is the module's agent, pinned in the module's config."""
    monkeypatch.setenv("EDGEQUAL_LOCAL_STATE", str(board / "local-agent"))
    monkeypatch.setenv("EDGEQUAL_CONFIG_DIR", str(board / "config"))
    return board


@pytest.fixture(scope="module")
def baseline(board, test_helper):
    """chain8 (the baseline's model, with its report) and chain16 (twice the layers), made
    once for the module; the tests only read them."""
    chain_model = test_helper("gate_reports").chain_model
    base_dir, cand_dir = board / "approved", board / "candidate"
    base_dir.mkdir()
    cand_dir.mkdir()
    base = chain_model(base_dir / "chain8.onnx", 8, rows=8)
    heavy = chain_model(cand_dir / "chain16.onnx", 16, rows=8)
    report = base_dir / "chain8.report.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEQUAL_LOCAL_STATE", str(board / "local-agent"))
        mp.setenv("EDGEQUAL_CONFIG_DIR", str(board / "config"))
        mp.setenv("XDG_STATE_HOME", str(board / "state"))
        mp.delenv("EDGEQUAL_TOKEN", raising=False)
        assert edgequal_main(["qualify", str(base), "-o", str(report), "--json", *SHORT]) == 0
    return base, heavy, report


@pytest.fixture
def chains(baseline, on_board):
    """:func:`baseline`, for a test run on the module's board."""
    return baseline


@pytest.mark.slow
def test_a_model_with_twice_the_work_is_different_within_n_pairs(chains, capsys):
    base, heavy, report = chains
    capsys.readouterr()
    code = edgequal_main(
        ["qualify", str(heavy), "--baseline", str(report), "--repeat-until-decided", "7"]
        + ["--json", *SHORT]
    )
    out = json.loads(capsys.readouterr().out)
    v = out["verdict"]
    assert v["verdict"] == "DIFFERENT", out
    # From the pairs' own spread, DIFFERENT needs the runs' split too: six pairs at least.
    assert 6 <= out["pairs"] <= 7 and code == 1
    assert v["ratio"] > 1.4 and v["ci_low"] > 1.0
    assert (v["n_baseline"], v["n_candidate"], v["spread_source"]) == (
        out["pairs"],
        out["pairs"],
        "repeats",
    )
    assert len(out["baseline_runs"]) == out["pairs"] and v["baseline_runs"] == out["baseline_runs"]
    # Each look tests DIFFERENT at the level over the looks that can decide it: of seven
    # pairs, the sixth and seventh (0.01 / 2: the most extreme split of 6 against 6 runs is
    # p 2/924).
    assert v["alpha_different"] == pytest.approx(0.01 / 2)
    assert len(out["reports"]) == 2 * out["pairs"]
    # Interleaved: baseline first, then candidate first, ...
    assert [r["side"] for r in out["reports"][:4]] == [
        "baseline",
        "candidate",
        "candidate",
        "baseline",
    ]


@pytest.mark.slow
def test_the_same_model_is_never_different_and_a_missing_artifact_is_one_line(
    chains, tmp_path, capsys
):
    base, _, report = chains
    copy = tmp_path / "copy" / "chain8.onnx"
    copy.parent.mkdir()
    shutil.copy(base, copy)
    capsys.readouterr()
    code = edgequal_main(
        ["qualify", str(copy), "--baseline", str(report), "--repeat-until-decided", "3"]
        + ["--json", *SHORT]
    )
    out = json.loads(capsys.readouterr().out)
    # Three pairs can never be DIFFERENT from their own spread (two of the twenty splits
    # of six runs are as far apart as any: p 0.1); SAME they can be.
    assert out["verdict"]["verdict"] in ("SAME", "UNKNOWN") and 2 <= out["pairs"] <= 3
    assert out["verdict"]["n_candidate"] == out["pairs"]
    assert code == (0 if out["verdict"]["verdict"] == "SAME" else 1)
    # The baseline's model, given with --baseline-model, is not there: one line, exit 2.
    code = edgequal_main(
        ["qualify", str(copy), "--baseline", str(report), "--repeat-until-decided", "3"]
        + ["--baseline-model", str(tmp_path / "nowhere.onnx"), *SHORT]
    )
    err = capsys.readouterr().err
    assert code == 2 and "the baseline's chain8.onnx (sha256" in err and "--baseline-model" in err
