"""``[repeat]`` gate limits on the spread of repeated runs (pure, on results as the agent
writes them: figures per run, spread from ``stats.repeat_spread``)."""

from __future__ import annotations

from edgequal.contract.stats import repeat_spread
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.repeat_checks import repeat_checks


def _results(p50s: list[float]) -> dict:
    runs = [{"run": i + 1, "cooldown": None, "figures": {"p50_ms": v}} for i, v in enumerate(p50s)]
    return {"repeats": {"n": len(runs), "runs": runs, "spread": {"p50_ms": repeat_spread(p50s)}}}


def test_max_cv_limits_the_spread_of_repeated_runs():
    policy = parse_policy({"repeat": {"max_cv": 0.03, "min_runs": 3}})
    steady = repeat_checks(_results([1.00, 1.01, 0.99]), policy)
    assert [c.passed for c in steady] == [True, True]
    (runs, cv) = repeat_checks(_results([1.0, 1.2, 0.9]), policy)
    assert runs.passed and not cv.passed
    assert cv.name == "repeat.max_cv[p50_ms]"
    # mean 1.0333, sample sd 0.15275: CV 0.1478.
    assert cv.message == (
        "CV of p50 over 3 runs 0.1478 is above the limit ≤ 0.03 (median 1, runs 1, 1.2, 0.9)"
    )


def test_a_report_of_one_run_is_not_measured_naming_the_flag():
    (check,) = repeat_checks({}, parse_policy({"repeat": {"max_cv": 0.03}}))
    assert not check.passed and "qualify with --repeat N" in check.message
