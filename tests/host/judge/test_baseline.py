"""The gate's baseline rule (host/judge/baseline.py) on samples with known answers: the
three-way verdict decides pass, fail or not judged. A unit test of the rule: the samples
are drawn here; tests/host/judge/test_gate.py runs it on real reports of a real agent."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
from edgequal.host.judge.baseline import baseline_checks
from edgequal.host.judge.gate import GateResult
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.report_file import ReportFile


def _report(samples_ns: np.ndarray, name: str) -> ReportFile:
    """A verified report file holding one latency shape with these raw samples."""
    entry = {
        "shape": "x=1x8",
        "samples_ns_b64": base64.b64encode(samples_ns.astype("<i8").tobytes()).decode(),
        "summary": {"p50_ms": float(np.median(samples_ns)) / 1e6, "count": samples_ns.size},
    }
    predicate = {"run_id": name, "results": {"latency": {"per_shape": [entry]}}}
    return ReportFile(Path(f"{name}.json"), predicate, [], True, "verified")


def _samples(n: int, median_ns: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (median_ns * rng.lognormal(0.0, 0.05, n)).astype(np.int64)


def _gate(base, cand, **baseline) -> GateResult:
    # 200 resamples: the interval is only shown beside the verdict here.
    policy = parse_policy({"baseline": {"iterations": 200, **baseline}})
    checks, summary = baseline_checks(base, cand, policy)
    return GateResult("cand.json", "p", True, "verified", checks, baseline=summary)


def test_different_and_slower_fails_same_passes_faster_passes():
    base = _report(_samples(500, 100_000, 1), "base")
    slower = _gate(base, _report(_samples(500, 110_000, 2), "slow"))
    (check,) = slower.checks
    three = slower.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "DIFFERENT" and three["ratio"] > 1.08
    assert not slower.passed and not slower.retry and check.judged
    assert "a regression" in check.message and check.measured == f"DIFFERENT ×{three['ratio']:.3f}"
    assert check.limit == "not DIFFERENT and ≥ 3% slower"
    # The same distribution again (seeded; about one draw in 15 lands between 0.01 and the
    # 0.071 threshold at 500 values: UNKNOWN, below): SAME.
    same = _gate(base, _report(_samples(500, 100_000, 5), "same"))
    assert same.passed and same.baseline["latency"][0]["three_way"]["verdict"] == "SAME"
    # Faster by 10 %: DIFFERENT, and a pass.
    faster = _gate(base, _report(_samples(500, 90_000, 6), "fast"))
    assert faster.baseline["latency"][0]["three_way"]["verdict"] == "DIFFERENT"
    assert faster.passed and "faster than the baseline" in faster.checks[0].message
    # 10 % slower under a 20 % minimum effect: real, too small to matter: SAME.
    wide = _gate(base, _report(_samples(500, 110_000, 2), "slow"), min_effect=0.2)
    assert wide.passed and "smaller than 20%" in wide.checks[0].message


def test_unknown_is_not_judged_and_asks_to_run_more():
    # Six values a side, one sd apart: neither significant nor a large p.
    base = _report(np.array([100, 104, 96, 102, 98, 101]) * 1000, "base")
    cand = _report(np.array([103, 107, 99, 105, 101, 104]) * 1000, "cand")
    result = _gate(base, cand, min_effect=0.0)
    (check,) = result.checks
    three = result.baseline["latency"][0]["three_way"]
    assert three["verdict"] == "UNKNOWN" and 0.01 < three["p_value"] <= three["same_threshold"]
    assert not check.passed and not check.judged and check.retry
    assert not result.passed and result.retry  # the gate's inconclusive exit: 1, "retry": true
    assert result.to_json()["retry"] is True
    assert result.summary.startswith("gate not decided, run more pairs to decide")
    assert result.summary.endswith("; exit 1 until they decide")
    assert "--repeat-until-decided" in check.message
    # A policy's SAME threshold decides it: a lower floor and start call the same values SAME.
    relaxed = _gate(base, cand, min_effect=0.0, same_p_start=0.01, same_p_floor=0.01)
    assert relaxed.passed and relaxed.baseline["latency"][0]["three_way"]["verdict"] == "SAME"
