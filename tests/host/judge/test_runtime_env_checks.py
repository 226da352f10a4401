"""``[runtime_envs]`` gate limits on a report's environments measured side by side (pure; the
end-to-end gate on a real report is in tests/test_runtime_envs.py)."""

from __future__ import annotations

import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.runtime_env_checks import runtime_env_checks
from edgequal.host.judge.runtime_envs import env_rows, ratio_text


def _entry(name, p50, version, status="ok", flips=None):
    entry = {"name": name, "runtime": "onnxruntime", "version": version, "status": status}
    if status == "ok":
        entry["latency"] = {"per_shape": [{"summary": {"p50_ms": p50, "p99_ms": p50 * 3}}]}
        entry["cold_load"] = {"total_ms": {"median": 300.0}, "first_inference_ms": {"median": 2.0}}
        entry["memory"] = {"peak_rss_bytes": 70 << 20}
        entry["drift"] = {"passed": True}
    else:
        entry["reason"] = f"runtime environment {name}: worker killed by SIGSEGV"
    return entry


def _results(ratio=1.3, flips=2, second_status="ok"):
    return {
        "runtime_envs": {
            "rounds": 4,
            "order": "ABBA",
            "baseline": "onnxruntime-1.20.1",
            "environments": [
                _entry("onnxruntime-1.20.1", 1.0, "1.20.1"),
                _entry("default", ratio, "1.32.0", status=second_status),
            ],
            "pairs": [
                {
                    "baseline": "onnxruntime-1.20.1",
                    "candidate": "default",
                    "measured": second_status == "ok",
                    "p50_ratio": ratio,
                    "p50_ratio_ci": [ratio - 0.05, ratio + 0.05],
                    "p99_ratio": None,
                    "p99_ratio_ci": None,
                    "cold_load_ratio": 1.1,
                    "flips_between": flips,
                    "flipped_cases": ["c3", "c7"][:flips],
                }
            ],
        }
    }


def _policy(**limits):
    return parse_policy({"runtime_envs": limits})


def test_a_slower_environment_fails_its_p50_ratio_and_flips_limits():
    checks = runtime_env_checks(
        _results(), _policy(max_p50_ratio=1.2, max_cold_load_ratio=1.2, max_flips_between=0)
    )
    by_name = {c.name: c for c in checks}
    p50 = by_name["runtime_envs.max_p50_ratio[default]"]
    assert not p50.passed and p50.measured == "1.3"
    assert p50.message == (
        "default: p50 / baseline p50 (onnxruntime-1.20.1) 1.3 is above the limit ≤ 1.2 "
        "(95 % interval [1.25–1.35])"
    )
    assert by_name["runtime_envs.max_cold_load_ratio[default]"].passed
    flips = by_name["runtime_envs.max_flips_between[default]"]
    assert not flips.passed and "cases c3, c7" in flips.message
    # Within the limits, the same environment passes.
    assert all(c.passed for c in runtime_env_checks(_results(1.1, 0), _policy(max_p50_ratio=1.2)))


def test_p99_ratio_without_enough_samples_is_not_measured():
    (check,) = runtime_env_checks(_results(), _policy(max_p99_ratio=2.0))
    assert not check.passed
    assert "p99 needs 368 samples in each environment" in check.message


def test_required_environments_and_a_failed_one():
    checks = runtime_env_checks(
        _results(second_status="failed"),
        _policy(required=["default", "onnxruntime-1.22.0"], max_p50_ratio=1.5),
    )
    by_name = {c.name: c for c in checks}
    assert not by_name["runtime_envs.required[default]"].passed
    assert "SIGSEGV" in by_name["runtime_envs.required[default]"].message
    missing = by_name["runtime_envs.required[onnxruntime-1.22.0]"]
    assert not missing.passed and "--runtime-env onnxruntime-1.22.0" in missing.message
    assert "not measured" in by_name["runtime_envs.max_p50_ratio[default]"].message


def test_report_without_environments_fails_each_limit_as_not_measured():
    checks = runtime_env_checks({}, _policy(max_p50_ratio=1.2, required=["onnxruntime-1.20.1"]))
    assert [c.name for c in checks] == ["runtime_envs.max_p50_ratio", "runtime_envs.required"]
    assert not any(c.passed for c in checks)
    assert checks[0].message == (
        "runtime_envs.max_p50_ratio: not measured: the report has no runtime environments "
        "(qualify with --runtime-env onnxruntime-1.20.1)"
    )
    # No limits: nothing is checked.
    assert runtime_env_checks({}, parse_policy({})) == []


def test_policy_keys_are_checked():
    with pytest.raises(UsageError, match="max_p50_ratios"):
        _policy(max_p50_ratios=1.2)
    with pytest.raises(UsageError):
        _policy(max_flips_between=0.5)
    assert _policy(max_p50_ratio=1.2).to_json()["runtime_envs"] == {"max_p50_ratio": 1.2}


def test_rows_side_by_side():
    rows = env_rows(_results())
    assert [r["name"] for r in rows] == ["onnxruntime-1.20.1", "default"]
    assert rows[0]["baseline"] and not rows[1]["baseline"]
    assert rows[1]["runtime"] == "onnxruntime 1.32.0" and rows[1]["peak_rss_mb"] == 70.0
    assert ratio_text(rows[1]["p50_ratio"], rows[1]["p50_ratio_ci"]) == "1.3× [1.25–1.35]"
    assert env_rows({}) == []


def _with_pair(results: dict, **extra) -> dict:
    results["runtime_envs"]["pairs"][0].update(extra)
    return results


_DRIFT = {
    "outputs": {
        "probs": {"max_abs": 3.1e-6, "psnr_db": 96.24, "exact": False},
        "score": {"max_abs": 0.0, "psnr_db": None, "exact": True},
    }
}


def test_between_version_drift_is_limited_by_max_abs_and_psnr():
    results = _with_pair(_results(1.0, 0), drift_between=_DRIFT)
    (row,) = [r for r in env_rows(results) if not r["baseline"]]
    assert row["drift_between_max_abs"] == 3.1e-6 and row["drift_between_psnr_db"] == 96.24
    from edgequal.host.judge.runtime_envs import drift_between_text

    assert drift_between_text(row) == "max abs 3.1e-06, PSNR 96.2 dB"
    checks = runtime_env_checks(
        results, _policy(max_drift_abs_between=1e-6, min_psnr_db_between=90.0)
    )
    by_name = {c.name: c for c in checks}
    abs_check = by_name["runtime_envs.max_drift_abs_between[default]"]
    assert not abs_check.passed and "is above the limit ≤ 1e-06" in abs_check.message
    assert by_name["runtime_envs.min_psnr_db_between[default]"].passed
    # Without a golden set nothing was compared: not measured, saying what measures it.
    (missing,) = runtime_env_checks(_results(1.0, 0), _policy(max_drift_abs_between=1e-6))
    assert not missing.passed and "a golden set gives the outputs compared" in missing.message


def test_identical_outputs_pass_a_psnr_limit():
    identical = {"outputs": {"y": {"max_abs": 0.0, "psnr_db": None, "exact": True}}}
    results = _with_pair(_results(1.0, 0), drift_between=identical)
    (check,) = runtime_env_checks(results, _policy(min_psnr_db_between=40.0))
    assert check.passed and check.measured == "identical"


def test_an_interfered_comparison_decides_no_latency_limit():
    interference = {
        "segments": 8, "interfered": 2, "max_runq_wait_share": 0.31, "decisive": False,
    }  # fmt: skip
    results = _with_pair(_results(0.75, 0), interference=interference)
    checks = runtime_env_checks(results, _policy(max_p50_ratio=1.2, max_flips_between=0))
    by_name = {c.name: c for c in checks}
    p50 = by_name["runtime_envs.max_p50_ratio[default]"]
    assert not p50.passed and p50.measured == "—"
    assert p50.message == (
        "default: p50 / baseline p50 (onnxruntime-1.20.1): 2 of 8 segments waited for a CPU "
        "(up to 31% of their runnable time): not decisive, re-run on a quiet board"
    )
    # The outputs still compare: flips are not timing.
    assert by_name["runtime_envs.max_flips_between[default]"].passed
