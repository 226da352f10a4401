"""``requires_plan``: a policy names the plan it needs, and the gate fails a report from a
plan without that plan's sustained phase with one check saying so.

Reports are signed predicates whose plan is a real ``make_plan`` JSON, judged by the real
gate against the example policies under docs/policies/.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.plan import make_plan
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.judge.gate import run_gate
from edgequal.host.judge.junit import junit_xml
from edgequal.host.judge.policy import load_policy, parse_policy
from edgequal.host.judge.report_file import read_report_bytes

POLICIES = Path(__file__).resolve().parents[3] / "docs" / "policies"
NEEDS = "this policy needs plan standard (sustained phase); the report ran quick"


def _predicate(plan, *, sustained: bool) -> dict:
    """A passed report of ``plan`` meeting nightly.toml's limits (cv, drift, stability)."""
    results: dict = {
        "latency": {"per_shape": [{"shape": "x=1x4", "summary": {"cv": 0.05}}]},
        "drift": {
            "passed": True,
            "outputs": {"y": {"passed": True, "max_abs": 0.0}},
            "decisions": {"flip_count": 0, "flip_rate": 0.0},
        },
    }
    if sustained:
        results["sustained"] = {
            "duration_s": plan.sustain_s,
            "peak_per_s": 1000.0,
            "sustained_per_s": 990.0,
            "stability": 0.98,
            "throttled": False,
            "cause": "none",
        }
    return {
        "run_id": "20261130T120000Z-0000000a",
        "nonce": "0" * 32,
        "status": "passed",
        "plan": plan.to_json(),
        "results": results,
        "findings": [],
    }


def _gate(sign, name, predicate, policy):
    return run_gate(read_report_bytes(sign(name, predicate)), policy, known=KnownDevices())


def test_a_quick_report_fails_a_standard_policy_with_one_message(sign):
    nightly = load_policy(POLICIES / "nightly.toml")
    assert nightly.requires_plan == "standard"
    result = _gate(sign, "quick", _predicate(make_plan("quick"), sustained=False), nightly)
    assert not result.passed and not result.retry
    assert [c.message for c in result.failed_checks] == [NEEDS]
    assert result.summary == f"gate failed: {NEEDS}"
    # The sustained limit is not listed beside it as "not measured".
    assert not any(c.section == "sustained" for c in result.checks)
    check = result.failed_checks[0]
    assert (check.name, check.section, check.limit) == (
        "plan.requires_plan",
        "plan",
        "plan standard",
    )
    assert check.measured == "quick, no sustained phase"


def test_a_standard_report_meets_the_requirement(sign):
    nightly = load_policy(POLICIES / "nightly.toml")
    result = _gate(sign, "std", _predicate(make_plan("standard"), sustained=True), nightly)
    assert result.passed, [c.message for c in result.failed_checks]
    check = next(c for c in result.checks if c.name == "plan.requires_plan")
    assert check.passed and check.measured == "standard, sustained 10 min"
    assert (
        check.message
        == "the report ran standard with a 10 min sustained phase, as plan standard needs"
    )
    # Its sustained limits are checked as usual.
    assert any(c.name == "sustained.min_stability" and c.passed for c in result.checks)


def test_a_quick_report_with_a_long_enough_sustain_flag_meets_it(sign):
    nightly = load_policy(POLICIES / "nightly.toml")
    plan = make_plan("quick", sustain_s=600.0)
    assert _gate(sign, "q600", _predicate(plan, sustained=True), nightly).passed


def test_a_sustained_phase_shorter_than_the_plan_s_fails_naming_both_lengths(sign):
    result = _gate(
        sign,
        "q120",
        _predicate(make_plan("quick", sustain_s=120.0), sustained=True),
        load_policy(POLICIES / "firmware-release.toml"),
    )
    messages = [c.message for c in result.failed_checks]
    assert messages[0] == (
        "this policy needs plan standard (sustained phase of 10 min); "
        "the report ran quick with a 2 min sustained phase (--sustain)"
    )
    soak = parse_policy({"requires_plan": "soak", "sustained": {"min_stability": 0.9}})
    result = _gate(sign, "std", _predicate(make_plan("standard"), sustained=True), soak)
    assert [c.message for c in result.failed_checks] == [
        "this policy needs plan soak (sustained phase of 30 min); "
        "the report ran standard with a 10 min sustained phase"
    ]


def test_quick_policies_take_a_quick_report(sign):
    bench = load_policy(POLICIES / "bench.toml")
    assert bench.requires_plan == "quick"
    result = _gate(sign, "quick", _predicate(make_plan("quick"), sustained=False), bench)
    check = next(c for c in result.checks if c.name == "plan.requires_plan")
    assert (
        check.passed
        and check.message == "plan quick needs no sustained phase; the report ran quick"
    )
    assert load_policy(POLICIES / "product-conditions.toml").requires_plan == "quick"
    assert load_policy(POLICIES / "firmware-release.toml").requires_plan == "standard"


def test_the_junit_file_carries_the_requirement_as_the_failed_case(sign):
    nightly = load_policy(POLICIES / "nightly.toml")
    result = _gate(sign, "quick", _predicate(make_plan("quick"), sustained=False), nightly)
    suite = ET.fromstring(junit_xml([result])).find("testsuite")
    assert suite.get("failures") == "1"
    failed = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["plan.requires_plan"]
    assert failed[0].get("classname") == "edgequal.gate.plan"
    assert failed[0].find("failure").get("message") == NEEDS
    assert failed[0].find("failure").get("type") == "GateFailed"


def test_gate_cli_exits_1_with_the_message(sign, tmp_path, capsys):
    report = sign("quick", _predicate(make_plan("quick"), sustained=False))
    junit = tmp_path / "gate.xml"
    args = ["gate", str(report), "--policy", str(POLICIES / "nightly.toml")]
    assert edgequal_main([*args, "--junit", str(junit)]) == 1
    assert NEEDS in capsys.readouterr().out
    assert ET.parse(junit).getroot().get("failures") == "1"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"requires_plan": "standrad"}, "'requires_plan' must name a plan, got 'standrad'"),
        ({"requires_plan": "standrad"}, "did you mean 'standard'?"),
        ({"requires_plan": "nightly"}, "one of quick, standard, soak"),
        ({"requires_plan": 600}, "'requires_plan' must be a string"),
        (
            {"requires_plan": "quick", "sustained": {"min_stability": 0.9}},
            "[sustained] limits need a sustained phase, which plan quick does not run",
        ),
        (
            {"requires_plan": "quick", "energy": {"require_rails": True}},
            "[energy] limits need a sustained phase",
        ),
        ({"require_plan": "standard"}, "did you mean 'requires_plan'?"),
    ],
)
def test_a_bad_requires_plan_is_refused(data, message):
    with pytest.raises(UsageError) as e:
        parse_policy(data, "gate.toml")
    assert message in str(e.value)
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_a_policy_without_requires_plan_has_no_plan_check(sign):
    policy = parse_policy({"sustained": {"required": True}})
    assert policy.requires_plan is None and "requires_plan" not in policy.to_json()
    result = _gate(sign, "quick", _predicate(make_plan("quick"), sustained=False), policy)
    assert [c.name for c in result.failed_checks] == ["sustained.measured"]
    assert parse_policy({"requires_plan": "soak"}).to_json()["requires_plan"] == "soak"
