"""``edgequal gate`` on signed reports from real runs (a real local agent, real runtimes).

Each limit is set from the measured figure itself, once on the passing side and once on
the failing side, so the tests assert the decision rather than the machine's speed.
"""

from __future__ import annotations

import base64
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.preemption import decided_on_clean, decisive_summary
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.judge.baseline import fingerprint_changes
from edgequal.host.judge.gate import evaluate, run_gate
from edgequal.host.judge.policy import STATUSES, parse_policy
from edgequal.host.judge.report_file import load_report, read_report_bytes

ALL_STATUSES = {"status": {"allowed": list(STATUSES)}}
# Where the status is not what a test is about: a run on this shared machine may be
# inconclusive (other processes took the CPU) once the agent reports interference.
NOT_FAILED = '[status]\nallowed = ["passed", "degraded", "inconclusive"]\n'


def _predicate(path: Path) -> dict:
    envelope = json.loads(path.read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def _check(result, name):
    matches = [c for c in result.checks if c.name == name]
    assert len(matches) == 1, [c.name for c in result.checks]
    return matches[0]


def _shape(pred) -> str:
    return pred["results"]["latency"]["per_shape"][0]["shape"]


def _shape_entry(pred) -> dict:
    return pred["results"]["latency"]["per_shape"][0]


# (section, key, measured figure, direction, check name) on the classifier report.
def _limits(pred):
    r = pred["results"]
    s = decisive_summary(r["latency"]["per_shape"][0])  # the clean figures where they decide
    shape = _shape(pred)
    sus = r["sustained"]
    d = r["drift"]
    score = d["outputs"]["score"]
    mb = 1 << 20
    return [
        (
            "cold_load",
            "max_first_inference_ms",
            r["cold_load"]["first_inference_ms"]["median"],
            "max",
            None,
        ),
        ("cold_load", "max_load_ms", r["cold_load"]["load_ms"]["median"], "max", None),
        ("cold_load", "max_total_ms", r["cold_load"]["total_ms"]["median"], "max", None),
        ("latency", "max_p50_ms", s["p50_ci_ms"][1], "max", f"latency.max_p50_ms[{shape}]"),
        ("latency", "max_p99_ms", s["p99_ci_ms"][1], "max", f"latency.max_p99_ms[{shape}]"),
        ("latency", "max_p90_ms", s["p90_ms"], "max", f"latency.max_p90_ms[{shape}]"),
        ("latency", "max_cv", s["cv"], "max", f"latency.max_cv[{shape}]"),
        ("sustained", "min_sustained_per_s", sus["sustained_per_s"], "min", None),
        ("sustained", "min_peak_per_s", sus["peak_per_s"], "min", None),
        ("sustained", "min_stability", sus["stability"], "min", None),
        ("drift", "max_abs", score["max_abs"], "max", "drift.max_abs[score]"),
        ("drift", "min_psnr_db", score["psnr_db"], "min", "drift.min_psnr_db[score]"),
        (
            "drift",
            "max_near_threshold_flip_rate",
            d["decisions"]["near_threshold_flip_rate"],
            "max",
            None,
        ),
        ("drift", "max_flip_rate", d["decisions"]["flip_rate"], "max", None),
        ("memory", "max_peak_rss_mb", r["memory"]["peak_rss_bytes"] / mb, "max", None),
        (
            "memory",
            "max_rss_added_by_load_mb",
            r["memory"]["rss_added_by_load_bytes"] / mb,
            "max",
            None,
        ),
    ]


_RETRYABLE = {
    "max_p50_ms",
    "max_p99_ms",
    "max_p90_ms",
    "max_cv",
    "min_sustained_per_s",
    "min_stability",
}


def _interfered(pred, section) -> bool:
    """Whether the agent attributed this section's figures to interference (newer reports)."""
    results = pred["results"]
    if section == "latency":
        # Interference the clean calls could not measure through (too few kept the CPU).
        entry = results["latency"]["per_shape"][0]
        return entry.get("cause") == "interference" and not decided_on_clean(entry)
    if section == "sustained":
        return results["sustained"].get("cause") == "interference"
    return False


def _without_attribution(value):
    """The predicate as an older agent wrote it: no cause or interference keys."""
    if isinstance(value, dict):
        return {
            k: _without_attribution(v)
            for k, v in value.items()
            if k not in ("cause", "cause_detail", "interference")
        }
    if isinstance(value, list):
        return [_without_attribution(v) for v in value]
    return value


@pytest.mark.slow
def test_each_limit_passes_above_and_fails_below_the_measured_figure(reports, known):
    pred = _predicate(reports.classifier)
    for section, key, value, direction, name in _limits(pred):
        assert value and value > 0, (key, value)
        name = name or f"{section}.{key}"
        loose, tight = (
            (value * 1.5, value / 1.5) if direction == "max" else (value / 1.5, value * 1.5)
        )
        for limit, should_pass in ((loose, True), (tight, False)):
            policy = parse_policy({**ALL_STATUSES, section: {key: limit}})
            result = run_gate(read_report_bytes(reports.classifier), policy, known=known)
            check = _check(result, name)
            assert check.passed is should_pass, (key, limit, value, check.message)
            assert result.passed is should_pass, (key, [c.message for c in result.failed_checks])
            assert check.limit and check.measured != "—"
            if not should_pass:
                # Retry only where the agent measured interference on that very figure.
                assert check.retry is (key in _RETRYABLE and _interfered(pred, section))
                assert result.retry is check.retry


@pytest.mark.slow
def test_integer_limits_on_flips_and_findings(reports, known):
    pred = _predicate(reports.classifier)
    decisions = pred["results"]["drift"]["decisions"]
    # The shifted reference flips a case just below the threshold: a real decision flip.
    assert decisions["flip_count"] >= 1 and decisions["flips_near_threshold_count"] >= 1
    flips = decisions["flip_count"]
    near = decisions["flips_near_threshold_count"]
    for key, value in (("max_flip_count", flips), ("max_near_threshold_flips", near)):
        ok = run_gate(
            read_report_bytes(reports.classifier),
            parse_policy({**ALL_STATUSES, "drift": {key: value}}),
            known=known,
        )
        bad = run_gate(
            read_report_bytes(reports.classifier),
            parse_policy({**ALL_STATUSES, "drift": {key: value - 1}}),
            known=known,
        )
        assert ok.passed and not bad.passed
        assert decisions["flips"][0] in _check(bad, f"drift.{key}").message

    rejected = _predicate(reports.rejected)
    assert rejected["findings"][0]["kind"] == "model_rejected"
    for findings, should_pass in (
        ({"allowed_kinds": ["model_rejected"]}, True),
        ({"allowed_kinds": []}, False),
        ({"max_count": 1}, True),
        ({"max_count": 0}, False),
    ):
        result = run_gate(
            read_report_bytes(reports.rejected),
            parse_policy({**ALL_STATUSES, "findings": findings}),
            known=known,
        )
        assert result.passed is should_pass, findings
    bad = run_gate(
        read_report_bytes(reports.rejected),
        parse_policy({**ALL_STATUSES, "findings": {"allowed_kinds": []}}),
        known=known,
    )
    assert "Frobnicate" in bad.failed_checks[0].message


@pytest.mark.slow
def test_statuses_drift_passed_and_absent_phases(reports, known):
    pred = _predicate(reports.classifier)
    assert pred["status"] == "failed" and "drift" in pred["reason"]
    default = run_gate(read_report_bytes(reports.classifier), parse_policy({}), known=known)
    assert not default.passed and not default.retry
    assert "status failed is not allowed" in _check(default, "status").message
    assert run_gate(
        read_report_bytes(reports.classifier), parse_policy(ALL_STATUSES), known=known
    ).passed

    # drift.require_passed names the output out of tolerance.
    result = run_gate(
        read_report_bytes(reports.classifier),
        parse_policy({**ALL_STATUSES, "drift": {"require_passed": True}}),
        known=known,
    )
    assert not result.passed and "score" in _check(result, "drift.require_passed").message
    # Per-output limits: probs is bit-exact, score moved by the shift.
    per_output = {"drift": {"outputs": {"probs": {"max_abs": 0.0}, "score": {"max_abs": 0.01}}}}
    assert run_gate(
        read_report_bytes(reports.classifier),
        parse_policy({**ALL_STATUSES, **per_output}),
        known=known,
    ).passed
    missing = {"drift": {"outputs": {"logits": {"max_abs": 1.0}}}}
    result = run_gate(
        read_report_bytes(reports.classifier),
        parse_policy({**ALL_STATUSES, **missing}),
        known=known,
    )
    assert "logits is not in the report" in result.failed_checks[0].message

    # A rejected model measured nothing: a latency limit fails as "not measured", not as a pass.
    result = run_gate(
        read_report_bytes(reports.rejected),
        parse_policy({**ALL_STATUSES, "latency": {"max_p50_ms": 1e9}}),
        known=known,
    )
    assert not result.passed and "not measured" in result.failed_checks[0].message
    # A run without a sustained phase fails a sustained limit, saying so.
    result = run_gate(
        read_report_bytes(reports.chain_a),
        parse_policy({**ALL_STATUSES, "sustained": {"required": True}}),
        known=known,
    )
    # (On a machine shared throughout, chain_a may be inconclusive: the limit is then not
    # judged, and still says why.)
    unpassed = [c for c in result.checks if not c.passed]
    assert "no sustained phase" in unpassed[0].message
    # No sensor on this machine: a temperature limit is not measured, so it fails.
    result = run_gate(
        read_report_bytes(reports.classifier),
        parse_policy({**ALL_STATUSES, "sustained": {"max_peak_temp_c": 90}}),
        known=known,
    )
    assert "no temperature sensor" in result.failed_checks[0].message
    # p99 needs 368 samples; a percentile that was not reported is not a pass.
    pred_small = json.loads(json.dumps(pred))
    small = pred_small["results"]["latency"]["per_shape"][0]
    small["summary"]["p99_ms"] = None
    small.pop("preemption", None)  # untagged: the as-measured figures decide
    checks = evaluate(pred_small, parse_policy({**ALL_STATUSES, "latency": {"max_p99_ms": 1e9}}))
    [p99] = [c for c in checks if c.section == "latency"]  # the drift section checks timed outputs
    assert not p99.passed and "368 needed" in p99.message


@pytest.mark.slow
def test_percentiles_are_judged_on_the_upper_end_of_their_interval(reports, known):
    pred = _predicate(reports.classifier)
    s = decisive_summary(pred["results"]["latency"]["per_shape"][0])
    lo, hi = s["p99_ci_ms"]
    assert lo < s["p99_ms"] <= hi or lo <= s["p99_ms"] < hi
    # A limit between the point p99 and the upper end of its CI fails: a lucky run cannot pass.
    between = (s["p99_ms"] + hi) / 2
    if between >= hi:
        pytest.skip("p99 equals the upper end of its interval in this run")
    result = run_gate(
        read_report_bytes(reports.classifier),
        parse_policy({**ALL_STATUSES, "latency": {"max_p99_ms": between}}),
        known=known,
    )
    check = _check(result, f"latency.max_p99_ms[{_shape(pred)}]")
    assert not check.passed and "95 % CI" in check.message


@pytest.mark.slow
def test_baseline_two_runs_of_the_same_model_pass_a_heavier_graph_fails(reports, known):
    # The minimum effect is wider than the 3 % default: this machine is shared with other
    # test runs and is itself a guest of a shared host. Two runs of one model differed by
    # 25-30 % here beside other suites, and once by 74 % with no process on this machine to
    # blame (a whole CPU for the worker, no run-queue wait, no steal): a quiet board stays
    # within 1-2 %. So the same model is held to a 100 % minimum effect, and the heavier
    # graph, four times the work, to 50 %.
    policy = parse_policy({**ALL_STATUSES, "baseline": {"min_effect": 0.5}})
    loose = parse_policy({**ALL_STATUSES, "baseline": {"min_effect": 1.0}})
    same = run_gate(
        read_report_bytes(reports.chain_b),
        loose,
        known=known,
        baseline=read_report_bytes(reports.chain_a),
    )
    # The three-way verdict decides, run against run: chain_a's five runs against chain_b's
    # one, the spread from chain_a's repeats. A ratio under 2 cannot be DIFFERENT beyond a
    # 100 % minimum effect, so two reports of one model are SAME (a pass) or UNKNOWN (not
    # judged, run more: the gate neither passes nor calls it a regression).
    three = same.baseline["latency"][0]["three_way"]
    check = _check(same, "baseline.latency[x=1x256]")
    assert (three["n_baseline"], three["n_candidate"], three["spread_source"]) == (5, 1, "repeats")
    run_a = _predicate(reports.chain_a)["run_id"]
    assert three["baseline_runs"] == [f"{run_a}/{k}" for k in range(1, 6)]
    assert three["verdict"] in ("SAME", "UNKNOWN") and three["ratio"] < 2.0
    assert "5 vs 1 runs" in check.measured and "(repeats, df 4)" in check.message
    if three["verdict"] == "SAME":
        assert same.passed, [c.message for c in same.failed_checks]
        assert check.passed and check.measured.startswith("SAME ×")
        assert three["same_low"] >= 0.5 and three["same_high"] <= 2.0
    else:
        assert three["runs_needed"] is None or three["runs_needed"] > 1
        assert not same.passed and same.retry and not check.judged
        assert same.summary.startswith("gate not decided, run more pairs")
    assert same.baseline["fingerprint_changes"] == []
    # A report against itself: the same runs, SAME, passed.
    itself = run_gate(
        read_report_bytes(reports.chain_a),
        loose,
        known=known,
        baseline=read_report_bytes(reports.chain_a),
    )
    assert itself.passed and itself.baseline["latency"][0]["three_way"]["verdict"] == "SAME"

    slow = run_gate(
        read_report_bytes(reports.chain_heavy),
        policy,
        known=known,
        baseline=read_report_bytes(reports.chain_a),
    )
    # A regression, not a retry, unless the agent blamed this run's latency on other
    # processes and had too few clean calls to measure through them (then the gate says
    # to re-run rather than call it a regression).
    interfered = _interfered(_predicate(reports.chain_heavy), "latency")
    assert not slow.passed and slow.retry == interfered
    check = _check(slow, "baseline.latency[x=1x256]")
    assert "a regression" in check.message and check.judged
    cmp = slow.baseline["latency"][0]
    # DIFFERENT on five runs a side (the 99 % interval of the ratio above 1) and slower
    # beyond 50 %.
    three = cmp["three_way"]
    assert three["verdict"] == "DIFFERENT" and three["ratio"] >= 1.5 and three["ci_low"] > 1.0
    assert (three["n_baseline"], three["n_candidate"], three["df"]) == (5, 5, 8.0)
    assert check.measured.startswith("DIFFERENT ×") and "5 vs 5 runs" in check.measured
    # The first runs' own calls, shown beside it, agree.
    assert cmp["median_ratio"]["ci_low"] > 1.25
    # What changed is listed beside the verdict: here, the model itself.
    assert [c["category"] for c in slow.baseline["fingerprint_changes"]] == ["model"]
    # require_same refuses a comparison across models.
    strict = parse_policy(
        {**ALL_STATUSES, "baseline": {"min_effect": 0.5, "require_same": ["model"]}}
    )
    assert not run_gate(
        read_report_bytes(reports.chain_heavy),
        strict,
        known=known,
        baseline=read_report_bytes(reports.chain_a),
    ).passed
    strict_same = parse_policy(
        {**ALL_STATUSES, "baseline": {"min_effect": 1.0, "require_same": ["model"]}}
    )
    # ... and lets two reports of the same model through to the verdict, as without it (a
    # pass when SAME, not decided when UNKNOWN).
    both_same = run_gate(
        read_report_bytes(reports.chain_b),
        strict_same,
        known=known,
        baseline=read_report_bytes(reports.chain_a),
    )
    assert (both_same.passed, both_same.retry) == (same.passed, same.retry)


@pytest.mark.slow
def test_fingerprint_changes_name_firmware_kernel_runtime_power_mode_governor_clocks(
    reports, known, sign
):
    base = load_report(reports.chain_a, known=known)
    pred = json.loads(json.dumps(base.predicate))
    pred["fingerprint"]["kernel"] = "6.6.31+rpt-rpi-2712"
    pred["fingerprint"]["cpu_governors"] = {"policy0": "powersave"}
    pred["fingerprint"]["jetson"] = {
        "l4t": {"release": "36.4.0"},
        "nvpmodel": {"mode": "15W"},
        "jetson_clocks": {"active": True},
    }
    pred["fingerprint"]["thermal_trip_c"] = 45.0  # a board whose trip point was lowered
    pred["results"]["runtime"]["version"] = "1.99.0"
    cand = load_report(sign("cand", pred), known=known, require=True)
    categories = {c["category"] for c in fingerprint_changes(base, cand)}
    assert {"kernel", "governor", "firmware", "power mode", "clocks", "runtime"} <= categories
    assert "thermal" in categories


@pytest.mark.slow
def test_tampered_and_foreign_key_reports_fail_the_gate(reports, known, tmp_path, capsys):
    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.contract.signing import sign_envelope

    policy_file = tmp_path / "p.toml"
    policy_file.write_text('[status]\nallowed = ["passed", "degraded", "failed", "inconclusive"]\n')
    assert edgequal_main(["gate", str(reports.chain_a), "--policy", str(policy_file)]) == 0

    data = bytearray(reports.chain_a.read_bytes())
    i = data.index(b'"payload":"') + 60
    data[i] = ord("A") if data[i] != ord("A") else ord("B")
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(bytes(data))
    junit = tmp_path / "t.xml"
    capsys.readouterr()
    assert (
        edgequal_main(["gate", str(tampered), "--policy", str(policy_file), "--junit", str(junit)])
        == 1
    )
    assert "signature" in capsys.readouterr().out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1" and suite.find("testcase").get("name") == "verify"

    # The same statement signed by a key no known device has.
    envelope = json.loads(reports.chain_a.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    stranger = load_or_create_device_key(tmp_path / "stranger")
    foreign = tmp_path / "foreign.json"
    foreign.write_bytes(sign_envelope(stranger, statement))
    result = run_gate(read_report_bytes(foreign), parse_policy(ALL_STATUSES), known=known)
    assert not result.passed and not result.verified and "no known device" in result.signature
    assert edgequal_main(["gate", str(foreign), "--policy", str(policy_file), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["verified"] is False and out["retry"] is False
    # A tampered baseline fails the gate too.
    result = run_gate(
        read_report_bytes(reports.chain_b),
        parse_policy(ALL_STATUSES),
        known=known,
        baseline=read_report_bytes(tampered),
    )
    assert not result.passed and _check(result, "baseline.verify").passed is False


@pytest.mark.slow
def test_inconclusive_fails_with_retry_distinct_from_a_regression(reports, known):
    """The interference contract: status inconclusive, sustained and per-shape causes."""
    pred = json.loads(json.dumps(_predicate(reports.classifier)))
    pred["status"] = "inconclusive"
    pred["reason"] = "throughput dropped 12 % while other processes took 60 % of the CPU"
    pred["results"]["drift"]["passed"] = True
    pred["results"]["sustained"]["cause"] = "interference"
    for entry in pred["results"]["latency"]["per_shape"]:
        entry["cause"] = "interference"
    # The contract's figures: a drop interference explains (the run's own stability may be
    # 1.0 once the agent left the windows interference took out of its scoring).
    pred["results"]["sustained"]["stability"] = 0.6
    policy = parse_policy({"sustained": {"min_stability": 0.9}})
    checks = evaluate(pred, policy)
    failed = [c for c in checks if not c.passed]
    assert {c.name for c in failed} == {"status", "sustained.min_stability"}
    assert all(c.retry for c in failed)
    assert (
        "re-run on a quiet board" in failed[0].message and "not a regression" in failed[0].message
    )

    from edgequal.host.judge.gate import GateResult

    result = GateResult("r.json", "p", True, "verified", checks)
    assert not result.passed and result.retry
    assert result.to_json()["retry"] is True and "re-run" in result.summary
    # A real regression beside the interference is not a retry.
    real = GateResult(
        "r.json",
        "p",
        True,
        "verified",
        [*checks, *evaluate(pred, parse_policy({"memory": {"max_peak_rss_mb": 0.001}}))],
    )
    assert not real.retry
    # Older reports have none of the interference keys: nothing is marked retry.
    old = _without_attribution(_predicate(reports.classifier))
    assert not any(c.retry for c in evaluate(old, policy))
    # A policy may allow inconclusive explicitly (a bench policy).
    assert evaluate(pred, parse_policy({"status": {"allowed": ["inconclusive"]}}))[0].passed


@pytest.mark.slow
def test_junit_has_one_testcase_per_check_with_the_required_attributes(reports, known, tmp_path):
    pred = _predicate(reports.classifier)
    shape = _shape(pred)
    policy_file = tmp_path / "p.toml"
    policy_file.write_text(
        'name = "nightly"\n' + NOT_FAILED + "[latency]\nmax_p50_ms = 1e-6\nmax_p99_ms = 1000.0\n"
        "[drift]\nmax_abs = 1.0\n[memory]\nmax_peak_rss_mb = 4096\n"
    )
    junit = tmp_path / "out" / "gate.xml"
    code = edgequal_main(
        [
            "gate",
            str(reports.classifier),
            "--policy",
            str(policy_file),
            "--junit",
            str(junit),
            "--baseline",
            str(reports.classifier),
        ]
    )
    assert code == 1
    validate_junit(junit)
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    for attr in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp"):
        assert suite.get(attr) is not None, attr
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == int(root.get("tests"))
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures")) == len(failures) == int(root.get("failures"))
    names = [c.get("name") for c in cases]
    assert len(set(names)) == len(names)
    assert {
        "verify",
        "status",
        f"latency.max_p50_ms[{shape}]",
        f"latency.max_p99_ms[{shape}]",
        "drift.max_abs[score]",
        "memory.max_peak_rss_mb",
        f"baseline.latency[{shape}]",
    } <= set(names)
    # Ant/Jenkins schema order: properties before the test cases. A failed check says its
    # limit and measured value once, in the failure (readers show system-out beside it).
    children = [c.tag for c in suite]
    assert children[0] == "properties" and set(children[1:]) == {"testcase"}
    for case in cases:
        assert case.get("classname", "").startswith("edgequal.gate.") and case.get("time") == "0"
        tags = [c.tag for c in case]
        assert tags in (["system-out"], ["failure"]), tags
        body = case.find(tags[0]).text
        assert "limit: " in body and "measured: " in body
    p50 = next(c for c in cases if c.get("name") == f"latency.max_p50_ms[{shape}]")
    failure = p50.find("failure")
    # A limit crossed is a failure; a retry when the agent blamed this latency on other
    # processes and could not measure through them (the report's own evidence says which).
    interfered = _interfered(pred, "latency")
    assert failure.get("type") == ("retry" if interfered else "GateFailed")
    assert "above the limit" in failure.get("message")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (
        props["policy"] == "nightly"
        and props["run_id"] == pred["run_id"]
        and props["passed"] == "false"
    )


@pytest.mark.slow
def test_exit_codes_and_unknown_policy_keys(reports, known, tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_text("[latency]\nmax_p99 = 5\n")
    assert edgequal_main(["gate", str(reports.chain_a), "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'latency.max_p99'" in err and "latency.max_p99_ms" in err
    assert len(err.strip().splitlines()) == 1
    assert (
        edgequal_main(["gate", str(reports.chain_a), "--policy", str(tmp_path / "none.toml")]) == 2
    )
    policy.write_text("[latency\n")
    assert edgequal_main(["gate", str(reports.chain_a), "--policy", str(policy)]) == 2
    policy.write_text(NOT_FAILED)
    assert edgequal_main(["gate", str(tmp_path / "missing.json"), "--policy", str(policy)]) == 2
    assert edgequal_main(["gate", str(reports.chain_a), "--policy", str(policy)]) == 0
    assert edgequal_main(["gate", str(reports.rejected), "--policy", str(policy)]) == 1
    # --device: a device that is not the signer fails verification.
    assert (
        edgequal_main(["gate", str(reports.chain_a), "--policy", str(policy), "--device", "pi5"])
        == 1
    )


@pytest.mark.slow
def test_qualify_with_gate_and_html_in_one_command(reports, short_plan, tmp_path, capsys):
    # No `known` fixture: qualify starts its own local agent (its own key) and pins it.
    policy = tmp_path / "p.toml"
    policy.write_text(NOT_FAILED + "[latency]\nmax_p50_ms = 1e-6\n")
    page = tmp_path / "page.html"
    junit = tmp_path / "j.xml"
    base = [
        "qualify",
        str(reports.models["chain"]),
        "--threads",
        "1",
        *short_plan,
        "--sustain",
        "0",
        "-o",
        str(tmp_path / "r.json"),
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text("[latency]\nmax_p50 = 1\n")
    # A bad policy is refused before any device is contacted.
    assert edgequal_main([*base, "--gate", str(bad)]) == 2
    assert not (tmp_path / "r.json").exists()
    assert (
        edgequal_main([*base, "--gate", str(policy), "--html", str(page), "--junit", str(junit)])
        == 1
    )
    assert ET.parse(junit).getroot().get("failures") == "1"
    out = capsys.readouterr().out
    assert "gate failed" in out and "latency.max_p50_ms" in out
    html = page.read_text()
    assert "<img" in html and "gate failed" in html
    # The same report passes a policy it meets.
    policy.write_text(NOT_FAILED + "[latency]\nmax_p50_ms = 1e6\n")
    assert (
        edgequal_main(
            ["gate", str(tmp_path / "r.json"), "--policy", str(policy), "--junit", str(junit)]
        )
        == 0
    )
    assert ET.parse(junit).getroot().get("failures") == "0"


def test_unknown_keys_are_refused_with_the_closest_valid_one():
    with pytest.raises(
        UsageError, match=r"unknown key 'drift\.min_psnr' \(did you mean 'drift\.min_psnr_db'\?\)"
    ):
        parse_policy({"drift": {"min_psnr": 30}})
    with pytest.raises(UsageError, match=r"'sustained'\?"):
        parse_policy({"sustain": {"min_stability": 0.9}})


@pytest.fixture(scope="module")
def throttled_report(tmp_path_factory, example_models, device_emulator):
    """A signed report of a run on the device emulator (scripts/device_emulator.py): the
    agent reads a sysfs tree that heats with its workers' CPU use and, past 60 °C,
    throttles them from outside; the agent has no code for the emulator."""
    from edgequal.contract.plan import make_plan
    from edgequal.host.devices.qualify import pin_device_key, qualify
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.transport.local import LocalTransport

    base = tmp_path_factory.mktemp("throttled")
    out = base / "throttled.report.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEQUAL_CONFIG_DIR", str(base / "config"))
        mp.setenv("EDGEQUAL_AGENT_STATE", str(base / "agent-state"))
        mp.setenv("EDGEQUAL_LOCAL_STATE", str(base / "local-agent"))
        mp.setenv("EDGEQUAL_ROOT", str(base / "board"))
        mp.delenv("EDGEQUAL_TOKEN", raising=False)
        known = KnownDevices()
        # The tree must exist before the agent starts reading it.
        # The board heats by the CPU time of the agent's workers and barely cools, so it
        # trips after about 2.5 CPU seconds and the run stops at 66 °C, a CPU second
        # later: however busy this machine is, the run is as long as it takes to get there.
        emu = device_emulator.DeviceEmulator(
            base / "board", os.getpid(), trip_c=60.0, heat_c_per_cpu_s=8.0, cool_rate=0.01
        )
        with LocalTransport() as transport:
            pin_device_key(transport, known, "local", "local")
            raw = base64.b64decode(transport.info()["public_key_b64"])
            emu.watch_pid = transport._proc.pid  # heat and throttle the agent's workers only
            plan = make_plan(
                "quick",
                cold_runs=1,
                warmup_min_runs=5,
                warmup_min_s=0.05,
                warmup_max_s=0.5,
                latency_min_runs=50,
                latency_min_s=0.1,
                threads=1,
                sustain_s=120.0,
                window_s=1.0,
                cooldown=False,
                max_temp_c=66.0,
            )
            with emu:
                qualify(
                    transport,
                    example_models["mid"],
                    None,
                    plan,
                    known=known,
                    device_name="local",
                    out=out,
                )
    return out, raw


@pytest.mark.slow
def test_throttling_and_temperature_limits_on_an_emulated_board(throttled_report, tmp_path):
    from edgequal.host.devices.trust import KnownDevices

    path, raw = throttled_report
    known = KnownDevices()
    known.trust("local", "local", raw)
    s = _predicate(path)["results"]["sustained"]
    # The 1 Hz samples may miss the instant of the trip; the emulator's 2 °C hysteresis
    # keeps a throttled board within 2 °C of it.
    assert s["throttled"] is True and s["peak_temp_c"] >= 58.0 and s["trip_c"] == 60.0
    t = s["time_to_first_throttle_s"]
    peak = s["peak_temp_c"]
    headroom = s.get("headroom_c")
    cases = [
        ({"allow_throttling": True}, True),
        ({"allow_throttling": False}, False),
        ({"max_peak_temp_c": peak + 5}, True),
        ({"max_peak_temp_c": peak - 5}, False),
        ({"min_time_to_first_throttle_s": t / 2}, True),
        ({"min_time_to_first_throttle_s": t + 60}, False),
    ]
    if headroom is not None and headroom >= 5:
        cases += [
            ({"min_headroom_c": headroom - 5}, True),
            ({"min_headroom_c": headroom + 5}, False),
        ]
    elif headroom is not None:  # it ran past the trip point: no headroom limit is met
        cases += [({"min_headroom_c": 0.0}, headroom >= 0)]
    for limits, should_pass in cases:
        result = run_gate(
            read_report_bytes(path),
            parse_policy({**ALL_STATUSES, "sustained": limits}),
            known=known,
        )
        messages = (limits, [c.message for c in result.checks])
        if should_pass:
            # Passed, unless the agent blamed some windows on other processes on this
            # shared machine: then the only failed checks are retries, never a verdict.
            assert result.passed or all(c.retry for c in result.failed_checks), messages
        else:
            assert not result.passed, messages
    failed = run_gate(
        read_report_bytes(path),
        parse_policy({**ALL_STATUSES, "sustained": {"allow_throttling": False}}),
        known=known,
    )
    assert "throttled" in failed.failed_checks[0].message
    # The page shades the throttled windows and lists them.
    page = tmp_path / "throttled.html"
    assert edgequal_main(["report", "html", str(path), "-o", str(page)]) == 0
    html = page.read_text()
    assert "Windows with a cause" in html and "throttling" in html
    assert "no sensor" not in html


def test_require_same_golden_goes_by_the_subjects_role_not_the_file_name(
    device_key, tmp_path, capsys
):
    """Golden sets called ``*.golden`` (as ``golden make -o g.golden`` writes them), signed by
    the agent's own report code: a different golden set fails ``require_same[golden]`` and
    is a fingerprint change; a report whose subjects carry no roles cannot pass it."""
    from edgequal.agent.run_request import RunRequest
    from edgequal.agent.runs import sign_report
    from edgequal.contract.plan import Plan, make_plan
    from edgequal.contract.signing import build_statement, sign_envelope

    plan = make_plan("quick").to_json()
    measurement = {"status": "passed", "plan": plan, "results": {}, "findings": []}
    model, golden_a, golden_b = "a" * 64, "b" * 64, "c" * 64

    def report(name: str, golden: str) -> Path:
        request = RunRequest(
            f"run-{name}", model, golden, Plan.from_json(plan), f"n-{name}", "m.onnx", "g.golden"
        )
        path = tmp_path / f"{name}.report.json"
        path.write_bytes(sign_report(device_key, request, measurement))
        return path

    base, same, other = (
        report("base", golden_a),
        report("same", golden_a),
        report("other", golden_b),
    )
    policy = tmp_path / "p.toml"
    policy.write_text(NOT_FAILED + '[baseline]\nrequire_same = ["model", "golden"]\n')
    argv = ["gate", "--policy", str(policy), "--baseline", str(base)]
    assert edgequal_main([*argv[:1], str(same), *argv[1:]]) == 0
    capsys.readouterr()
    assert edgequal_main([*argv[:1], str(other), *argv[1:]]) == 1
    out = capsys.readouterr().out
    assert "golden differs from the baseline's" in out
    known = KnownDevices()
    changes = fingerprint_changes(load_report(base, known=known), load_report(other, known=known))
    assert changes == [
        {
            "field": "golden",
            "category": "golden",
            "baseline": f"g.golden sha256 {golden_a[:12]}",
            "candidate": f"g.golden sha256 {golden_b[:12]}",
        }
    ]
    # A report without roles (an older agent's) cannot show which subject is its golden set.
    predicate = {"nonce": "n-old", "run_id": "run-old", **measurement}
    subjects = [{"name": "m.onnx", "sha256": model}, {"name": "g.golden", "sha256": golden_a}]
    old = tmp_path / "old.report.json"
    old.write_bytes(sign_envelope(device_key, build_statement(subjects, predicate)))
    assert edgequal_main([*argv[:1], str(old), *argv[1:]]) == 1
    assert "golden differs from the baseline's" in capsys.readouterr().out


def test_the_quiet_board_advice_is_given_once():
    """The agent's reason already ends with the advice; the check and the summary keep one."""
    from edgequal.host.judge.checks import status_checks
    from edgequal.host.judge.gate import GateResult

    pred = {
        "status": "inconclusive",
        "reason": "latency for x=1x4 has a heavy tail while other processes took the CPU; "
        "re-run on a quiet board",
    }
    (check,) = status_checks(pred, parse_policy({}))
    assert check.message == (
        "inconclusive: latency for x=1x4 has a heavy tail while other processes took the CPU; "
        "re-run on a quiet board (interference, not a regression)"
    )
    summary = GateResult("r.json", "p", True, "verified", [check]).summary
    assert summary.count("re-run on a quiet board") == 1
    # Not decided, in words, and what the exit code is until a run decides it.
    assert summary == (
        "gate not decided: the run was inconclusive: latency for x=1x4 has a heavy tail while "
        "other processes took the CPU; re-run on a quiet board (interference, not a "
        "regression); exit 1 until a run decides it"
    )
    assert "gate failed" not in summary and "failed: inconclusive" not in summary


JUNIT_XSD = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit-10.xsd"


def validate_junit(path: Path) -> None:
    """``path`` is valid against Jenkins' junit-10.xsd (tests/fixtures/junit, vendored)."""
    import xmlschema

    xmlschema.XMLSchema(JUNIT_XSD).validate(str(path))


@pytest.mark.slow  # the session's signed reports: several real runs
def test_a_limit_an_inconclusive_run_did_not_measure_is_not_judged(
    reports, known, sign, tmp_path, capsys, test_helper
):
    """``gate`` on a run interference cut short (309 calls, a p99 needs 368): the status says
    re-run, the p99 limit is not judged (no FAIL), and the screen, --json and JUnit say retry."""
    helpers = test_helper("gate_reports")
    pred = helpers.cut_short_by_interference(_predicate(reports.classifier))
    shape = _shape(pred)
    path = sign("cut-short", pred)
    policy = tmp_path / "p.toml"
    policy.write_text('name = "nightly"\n[latency]\nmax_p50_ms = 1000.0\nmax_p99_ms = 50.0\n')
    junit = tmp_path / "gate.xml"
    argv = ["gate", str(path), "--policy", str(policy)]
    capsys.readouterr()
    assert edgequal_main([*argv, "--junit", str(junit)]) == 1
    screen = " ".join(capsys.readouterr().out.split())
    assert "RETRY" in screen and "not judged" in screen and "FAIL" not in screen
    assert "gate not decided: the run was inconclusive: " in screen
    assert "exit 1 until a run decides it" in screen and "gate failed" not in screen
    assert (
        "not judged: " + shape + ": p99 (upper end of its 95 % CI): p99 not measured: 309 "
        "samples, 368 needed; the run was inconclusive: other processes took the CPU; "
        "re-run on a quiet board"
    ) in screen
    assert edgequal_main([*argv, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["retry"] is True
    by_name = {c["name"]: c for c in out["checks"]}
    p99 = by_name[f"latency.max_p99_ms[{shape}]"]
    assert (p99["judged"], p99["passed"], p99["retry"]) == (False, False, True)
    assert by_name[f"latency.max_p50_ms[{shape}]"]["passed"] is True  # measured: judged
    assert by_name["status"]["retry"] is True
    validate_junit(junit)
    suite = ET.parse(junit).getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["retry"] == "true" and props["passed"] == "false"
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["status"].find("failure").get("type") == "retry"
    skipped = cases[f"latency.max_p99_ms[{shape}]"]
    assert skipped.find("failure") is None
    assert skipped.find("skipped").get("message").startswith("not judged: ")
    # The same limit on a passed run that lacked the figure still fails: it is not excused.
    pred["status"], pred["reason"] = "passed", None
    assert edgequal_main(["gate", str(sign("short", pred)), "--policy", str(policy)]) == 1
    screen = " ".join(capsys.readouterr().out.split())
    assert "FAIL" in screen and "not judged" not in screen


def test_every_policy_section_has_its_checks_in_the_gate():
    """A section the policy accepts is one the gate checks (its registry, GATE_SECTIONS)."""
    from edgequal.host.judge.gate import GATE_SECTIONS
    from edgequal.host.judge.policy import SCHEMA

    sections = [name for name, _ in GATE_SECTIONS]
    assert len(sections) == len(set(sections))
    # "" holds the policy's own keys; the baseline is judged against another report;
    # [changes] sets history changes' sensitivity (host/lab/changes.py), no gate check.
    assert set(sections) == set(SCHEMA) - {"", "baseline", "changes"}
