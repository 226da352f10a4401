"""The gate's baseline rule (host/judge/baseline.py) on runs with known answers: the
three-way verdict on the runs' clean p50s decides pass, fail or not judged. A unit test of the rule: the samples
are drawn here; tests/host/judge/test_gate.py runs it on real reports of a real agent."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.baseline import baseline_checks
from edgequal.host.judge.gate import GateResult
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.report_file import ReportFile
from edgequal.host.judge.verdict import Spread


def _report(
    samples_ns: np.ndarray, name: str, runs: list[float] | None = None, fastest: bool = False
) -> ReportFile:
    """A verified report file holding one latency shape with these raw samples (run 1), and
    with ``runs``, the clean p50 (ms) of each of its ``--repeat`` runs; ``fastest``: with
    the fastest call (``min_ms``) as the agent writes it."""
    entry = {
        "shape": "x=1x8",
        "samples_ns_b64": base64.b64encode(samples_ns.astype("<i8").tobytes()).decode(),
        "summary": {"p50_ms": float(np.median(samples_ns)) / 1e6, "count": samples_ns.size},
    }
    if fastest:
        entry["summary"]["min_ms"] = float(samples_ns.min()) / 1e6
    results = {"latency": {"per_shape": [entry]}}
    if runs:
        results["repeats"] = {
            "n": len(runs),
            "runs": [{"run": i + 1, "figures": {"p50_ms": v}} for i, v in enumerate(runs)],
        }
    predicate = {"run_id": name, "results": results}
    return ReportFile(Path(f"{name}.json"), predicate, [], True, "verified")


def _samples(n: int, median_ns: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (median_ns * rng.lognormal(0.0, 0.05, n)).astype(np.int64)


def _gate(base, cand, prior=None, **baseline) -> GateResult:
    # 200 resamples: the interval is only shown beside the verdict here.
    policy = parse_policy({"baseline": {"iterations": 200, **baseline}})
    checks, summary = baseline_checks(base, cand, policy, prior)
    return GateResult("cand.json", "p", True, "verified", checks, baseline=summary)


def test_one_run_a_side_is_not_judged_however_many_calls_it_holds(tmp_path):
    """Pseudo-replication: 500 calls a run say how precise that run's p50 is, not whether
    another run would agree. Two single runs 10 % apart are UNKNOWN without a spread."""
    base = _report(_samples(500, 100_000, 1), "base")
    result = _gate(base, _report(_samples(500, 110_000, 2), "slow"))
    (check,) = result.checks
    three = result.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "UNKNOWN" and three["spread_source"] == "none"
    assert (three["n_baseline"], three["n_candidate"]) == (1, 1)
    assert not check.judged and check.retry and "--repeat-until-decided" in check.message
    assert "1 vs 1 runs, no known spread" in check.measured
    # The runs' own calls still give their interval, shown beside the verdict.
    ratio = result.baseline["latency"][0]["median_ratio"]
    assert ratio["ci_low"] > 1.05 and "the runs' calls ×" in check.message
    # With the board's history (1 % run-to-run CV over 20 runs), 10 % is beyond its spread.
    known = _gate(base, _report(_samples(500, 110_000, 2), "slow"), Spread.from_cv(0.01, 20))
    three = known.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "DIFFERENT" and three["spread_source"] == "history"
    assert not known.passed and "a regression" in known.checks[0].message
    assert "spread 1.00% (history, df 20)" in known.checks[0].message
    # The JUnit carries the same: the runs, the spread and its source.
    import xml.etree.ElementTree as ET

    from edgequal.host.judge.junit import write_junit

    write_junit(tmp_path / "gate.xml", [result, known])
    cases = ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")
    texts = [" ".join(el.get("message", "") for el in case) for case in cases]
    assert any("1 vs 1 runs, no known spread" in t for t in texts)
    assert any("1 vs 1 runs, spread 1.00% (history, df 20)" in t for t in texts)


def test_one_run_against_one_whose_fastest_calls_kept_pace_is_a_slow_session():
    """gate --baseline of two files, one run a side, with the board's history: a candidate
    whose calls are 50 % slower while its fastest kept the baseline's pace is one slow
    session (UNKNOWN: retried, pairs named), not a regression; one whose every call, the
    fastest too, is 50 % slower is DIFFERENT and fails."""
    board = Spread.from_cv(0.01, 20)
    base = _report(_samples(500, 100_000, 1), "base", fastest=True)
    session = _samples(500, 150_000, 2)
    session[:5] = _samples(5, 100_000, 3)  # the board's pace, in a few calls
    result = _gate(base, _report(session, "session", fastest=True), board)
    three = result.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "UNKNOWN" and three["ratio"] == pytest.approx(1.5, rel=0.02)
    assert "at the median but ×" in three["why"] and "at the fastest call" in three["why"]
    (check,) = result.checks
    assert not check.judged and check.retry and "--repeat-until-decided" in check.message
    slower = _report(_samples(500, 150_000, 2), "slower", fastest=True)
    known = _gate(base, slower, board)
    three = known.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "DIFFERENT" and not known.passed


def test_repeated_runs_decide_different_slower_fails_same_passes_faster_passes():
    # Two reports are two sessions: the board's history says how far sessions fall apart
    # (here 1 %, from 30 nights); the repeats say how far runs in one fall apart.
    board = Spread.from_cv(0.01, df=30)
    base = _report(_samples(500, 100_000, 1), "base", [0.100, 0.101, 0.099, 0.1005, 0.0998])
    slow = _report(_samples(500, 110_000, 2), "slow", [0.110, 0.111, 0.109, 0.1104, 0.1097])
    # Without the history, 10 % is inside what two sessions are taken to differ by (20 %).
    alone = _gate(base, slow).baseline["latency"][0]["three_way"]
    assert alone["verdict"] == "UNKNOWN" and "--history" in alone["why"]
    slower = _gate(base, slow, board)
    (check,) = slower.checks
    three = slower.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "DIFFERENT" and three["ratio"] == pytest.approx(1.1, abs=0.005)
    assert three["baseline_runs"] == ["base/1", "base/2", "base/3", "base/4", "base/5"]
    assert three["spread_source"] == "repeats+history" and three["df"] == 30.0
    assert not slower.passed and not slower.retry and check.judged
    assert "a regression" in check.message
    assert check.measured.startswith(f"DIFFERENT ×{three['ratio']:.3f} (5 vs 5 runs, spread")
    assert check.limit == "not DIFFERENT and ≥ 3% slower"
    # The same level again, five runs a side: SAME (the 90 % interval inside ±3 %).
    same = _gate(
        _report(_samples(500, 100_000, 1), "a", [0.100, 0.101, 0.099, 0.1005, 0.0995]),
        _report(_samples(500, 100_000, 5), "b", [0.1002, 0.0998, 0.1008, 0.0993, 0.1001]),
        board,
    )
    assert same.passed and same.baseline["latency"][0]["three_way"]["verdict"] == "SAME"
    # Faster by 10 %: DIFFERENT, and a pass.
    faster = _gate(
        base,
        _report(_samples(500, 90_000, 6), "fast", [0.090, 0.0905, 0.0895, 0.0901, 0.0898]),
        board,
    )
    assert faster.baseline["latency"][0]["three_way"]["verdict"] == "DIFFERENT"
    assert faster.passed and "faster than the baseline" in faster.checks[0].message
    # 10 % slower under a 20 % minimum effect: real, inside what the policy calls the same.
    wide = _gate(
        base, _report(_samples(500, 110_000, 2), "s", [0.110, 0.111, 0.109]), board, min_effect=0.2
    )
    assert wide.passed and "inside ±20%" in wide.checks[0].message


def test_unknown_is_not_judged_and_asks_to_run_more():
    # Three runs a side of a noisy board, 3 % apart: neither beyond its spread nor inside ±3 %.
    base = _report(_samples(500, 100_000, 1), "base", [0.100, 0.104, 0.096])
    cand = _report(_samples(500, 103_000, 2), "cand", [0.103, 0.107, 0.099])
    result = _gate(base, cand)
    (check,) = result.checks
    three = result.baseline["latency"][0]["three_way"]
    # Two sessions and no history: more runs in them would not decide it.
    assert three["verdict"] == "UNKNOWN" and three["runs_needed"] is None
    assert three["ci_low"] < 1.0 < three["ci_high"] and "--history" in three["why"]
    assert not check.passed and not check.judged and check.retry
    assert not result.passed and result.retry  # the gate's inconclusive exit: 1, "retry": true
    assert result.to_json()["retry"] is True
    assert result.summary.startswith("gate not decided, run more pairs to decide")
    assert result.summary.endswith("; exit 1 until they decide")
    assert "--repeat-until-decided" in check.message
    assert "no known spread between sessions" in check.message
    # A policy's test level decides it: a DIFFERENT test at 50 % calls this slower (the
    # board's sessions known to agree within 1 %).
    loose = _gate(base, cand, Spread.from_cv(0.01, 30), alpha_different=0.5, min_effect=0.02)
    assert loose.baseline["latency"][0]["three_way"]["verdict"] == "DIFFERENT"


def test_retired_verdict_keys_are_refused_with_what_replaced_them():
    with pytest.raises(UsageError, match="same_p_start' is retired: SAME is an equivalence"):
        parse_policy({"baseline": {"same_p_start": 0.5}})
    with pytest.raises(UsageError, match="alpha_different"):
        parse_policy({"baseline": {"different_p": 0.01}})
    with pytest.raises(UsageError, match="alpha_same"):
        parse_policy({"baseline": {"alpha_same": 0.7}})
