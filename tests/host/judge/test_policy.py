"""Policy files: every key checked, unknown keys refused with the closest valid one."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.host.errors import UsageError
from edgequal.host.judge.policy import BASELINE_DEFAULTS, load_policy, parse_policy

POLICIES = Path(__file__).resolve().parents[3] / "docs" / "policies"


@pytest.mark.parametrize("name", ["bench", "nightly", "firmware-release", "product-conditions"])
def test_the_example_policies_load(name):
    policy = load_policy(POLICIES / f"{name}.toml")
    assert policy.name
    assert set(policy.allowed_statuses) <= {"passed", "degraded"}
    assert policy.to_json()["status"]["allowed"] == list(policy.allowed_statuses)


def test_defaults_and_sections():
    p = parse_policy({})
    assert p.allowed_statuses == ("passed", "degraded")
    assert p.baseline == BASELINE_DEFAULTS
    p = parse_policy(
        {
            "name": "n",
            "latency": {"max_p99_ms": 5, "require_steady": True},
            "drift": {"min_psnr_db": 40, "outputs": {"probs": {"min_top1_agreement": 0.99}}},
            "baseline": {"min_effect": 0.05, "require_same": ["board_model", "runtime_version"]},
        }
    )
    assert p.latency == {"max_p99_ms": 5.0, "require_steady": True}
    assert p.drift == {"min_psnr_db": 40.0}
    assert p.drift_outputs == {"probs": {"min_top1_agreement": 0.99}}
    assert p.baseline["min_effect"] == 0.05 and p.baseline["iterations"] == 1000


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"latency": {"max_p99": 5}},
            "unknown key 'latency.max_p99' (did you mean 'latency.max_p99_ms'?)",
        ),
        ({"lattency": {}}, "unknown key 'lattency' (did you mean 'latency'?)"),
        ({"memory": {"max_rss_mb": 1}}, "did you mean 'memory.max_peak_rss_mb'?"),
        (
            {"drift": {"outputs": {"probs": {"min_psnr": 30}}}},
            "unknown key 'drift.outputs.probs.min_psnr' (did you mean 'drift.outputs.probs.min_psnr_db'?)",
        ),
        ({"sustained": {"allow_throttle": False}}, "did you mean 'sustained.allow_throttling'?"),
        (
            {"status": {"allowed": ["pased"]}},
            "unknown status 'pased' in status.allowed (did you mean 'passed'?)",
        ),
        ({"latency": {"max_p50_ms": "fast"}}, "'latency.max_p50_ms' must be a number"),
        ({"latency": {"max_p50_ms": -1}}, "must be a finite number >= 0"),
        ({"latency": {"require_steady": 1}}, "must be true or false"),
        ({"baseline": {"confidence": 1.5}}, "'baseline.confidence' must be between 0 and 1"),
        ({"baseline": {"require_same": ["kernal"]}}, "did you mean 'kernel'?"),
        ({"cold_load": {"statistic": "mean"}}, "must be median or max"),
        ({"latency": 3}, "'latency' must be a table"),
    ],
)
def test_bad_policies_are_refused_with_one_line(data, message):
    with pytest.raises(UsageError) as e:
        parse_policy(data, "gate.toml")
    assert message in str(e.value)
    assert "\n" not in str(e.value)
    assert e.value.exit_code == 2


def test_unreadable_or_invalid_files_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="cannot read policy"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[latency\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_policy(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not UTF-8"):
        load_policy(bad)


def test_gating_doc_shows_the_example_policies_as_they_are():
    import re

    doc = (POLICIES.parent / "gating.md").read_text()
    blocks = re.findall(
        r"### [^\n]*\(`docs/policies/([\w-]+)\.toml`\)\n\n```toml\n(.*?)```", doc, re.S
    )
    assert [name for name, _ in blocks] == [
        "bench",
        "nightly",
        "firmware-release",
        "product-conditions",
    ]
    for name, text in blocks:
        assert text == (POLICIES / f"{name}.toml").read_text(), name
