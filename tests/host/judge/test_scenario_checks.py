"""The service scenarios and energy on the report page, in compare, and under gate limits.

One real qualification (onnxruntime in workers, a board tree whose hwmon rail reads 3 W)
of the dynamic example with every scenario, shared with present/test_terminal_scenarios.py
(``scenario_measurement`` in tests/host/conftest.py); each limit is set from the measured
figure itself, once on the passing side and once on the failing side.
"""

from __future__ import annotations

import copy

import pytest
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.judge.compare import compare_reports
from edgequal.host.judge.gate import evaluate
from edgequal.host.judge.policy import STATUSES, parse_policy
from edgequal.host.judge.report_file import ReportFile, load_report
from edgequal.host.present.html.report import render_report_html

pytestmark = pytest.mark.slow
ALL_STATUSES = {"status": {"allowed": list(STATUSES)}}
RAIL_W = 3.0  # SCENARIO_RAIL_W of tests/host/conftest.py


@pytest.fixture
def measured(scenario_measurement) -> dict:
    """The shared measurement (tests/host/conftest.py): the dynamic example, every scenario."""
    assert not scenario_measurement["findings"], scenario_measurement["findings"]
    return copy.deepcopy(scenario_measurement)  # a test may change its own copy


@pytest.fixture
def signed(sign):
    """``signed(predicate, name)``: the measurement signed by a pinned device key and read
    back verified, as ``gate``, ``compare`` and ``report html`` read a report file."""

    def read(pred: dict, name: str = "a") -> ReportFile:
        path = sign(name, {**pred, "nonce": "1" * 32})
        return load_report(path, known=KnownDevices(), require=True)

    return read


def _checks(pred, section, limits):
    checks = evaluate(pred, parse_policy({**ALL_STATUSES, section: limits}))
    return {c.name: c for c in checks if c.section == section}


# (section, key, path under results, direction)
LIMITS = [
    ("batch", "min_best_items_per_s", ("batch_sweep", "best", "items_per_s"), "min"),
    (
        "batch",
        "min_best_items_per_s_per_core",
        ("batch_sweep", "best", "items_per_s_per_core"),
        "min",
    ),
    (
        "threads",
        "min_recommended_calls_per_s",
        ("thread_scaling", "recommended", "calls_per_s"),
        "min",
    ),
    ("threads", "max_recommended_p50_ms", ("thread_scaling", "recommended", "p50_ms"), "max"),
    ("server", "max_p99_ms_at_target", ("server", "at_target", "p99_ms"), "max"),
    (
        "energy",
        "max_mj_per_inference",
        ("sustained", "power", "summary", "mj_per_inference_median"),
        "max",
    ),
    ("energy", "max_power_w", ("sustained", "power", "summary", "power_w_median"), "max"),
]


@pytest.mark.parametrize(("section", "key", "path", "direction"), LIMITS)
def test_each_scenario_limit_passes_on_one_side_of_the_figure_and_fails_on_the_other(
    measured, section, key, path, direction
):
    figure = measured["results"]
    for p in path:
        figure = figure[p]
    assert figure is not None and figure > 0
    passing, failing = (
        (figure * 0.9, figure * 1.1) if direction == "min" else (figure * 1.1, figure * 0.9)
    )
    ok = _checks(measured, section, {key: passing})[f"{section}.{key}"]
    bad = _checks(measured, section, {key: failing})[f"{section}.{key}"]
    assert ok.passed and not bad.passed
    assert ("below" if direction == "min" else "above") in bad.message


def test_the_server_rate_and_the_fallback_limits(measured):
    server = measured["results"]["server"]
    held = server["max_rate_held_per_s"]
    check = _checks(measured, "server", {"min_rate_at_p99_per_s": 1e9})[
        "server.min_rate_at_p99_per_s"
    ]
    assert not check.passed
    if held is not None:
        ok = _checks(measured, "server", {"min_rate_at_p99_per_s": held * 0.9})
        assert ok["server.min_rate_at_p99_per_s"].passed
    at = _checks(measured, "server", {"require_held_at_target": True})[
        "server.require_held_at_target"
    ]
    assert at.passed is bool(server["at_target"]["held"])
    ops = _checks(measured, "operators", {"allow_cpu_fallback": False, "max_cpu_fallback_nodes": 0})
    # No accelerator was asked for: nothing can fall back.
    assert all(c.passed for c in ops.values()) and len(ops) == 2
    energy = _checks(measured, "energy", {"require_rails": True})
    assert energy["energy.require_rails"].passed


def test_limits_on_a_phase_the_report_lacks_fail_and_say_how_to_run_it(measured):
    bare = {
        **measured,
        "results": {
            k: v
            for k, v in measured["results"].items()
            if k not in ("batch_sweep", "server", "thread_scaling", "operators", "sustained")
        },
    }
    for section, key, how in (
        ("batch", "min_best_items_per_s", "--batch-sizes"),
        ("threads", "min_recommended_calls_per_s", "--thread-scaling"),
        ("server", "min_rate_at_p99_per_s", "--server"),
        ("operators", "allow_cpu_fallback", "--operators"),
        ("energy", "max_mj_per_inference", "sustained phase"),
    ):
        [check] = _checks(bare, section, {key: False if key.startswith("allow") else 1.0}).values()
        assert not check.passed and how in check.message
    no_rails = {
        **measured,
        "results": {
            **measured["results"],
            "sustained": {"power": {"present": False, "reason": "no readable power rail"}},
        },
    }
    [check] = _checks(no_rails, "energy", {"max_power_w": 5.0}).values()
    assert not check.passed and "no readable power rail" in check.message


@pytest.mark.parametrize(
    ("toml_key", "closest"),
    [
        ({"server": {"min_rate_at_p99": 1}}, "server.min_rate_at_p99_per_s"),
        ({"batch": {"min_best_items_per_sec": 1}}, "batch.min_best_items_per_s"),
        ({"energy": {"max_mj_per_inferenc": 1}}, "energy.max_mj_per_inference"),
    ],
)
def test_unknown_scenario_keys_are_refused_with_the_closest_one(toml_key, closest):
    with pytest.raises(UsageError) as e:
        parse_policy(toml_key)
    assert f"did you mean '{closest}'?" in str(e.value)


def test_the_page_has_a_table_per_scenario_with_escaped_text(measured, signed):
    pred = {**measured}
    results = dict(pred["results"])
    rec = dict(results["thread_scaling"]["recommended"])
    rec["reason"] = "<script>alert(1)</script>"
    results["thread_scaling"] = {**results["thread_scaling"], "recommended": rec}
    pred["results"] = results
    page = render_report_html([signed(pred)])
    for heading in (
        "<h3>Batch sweep</h3>",
        "<h3>Thread scaling</h3>",
        "<h3>Server scenario (latency includes queueing)</h3>",
        "<h3>Operators</h3>",
        "<h3>Energy per inference</h3>",
    ):
        assert heading in page, heading
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    best = results["batch_sweep"]["best"]["batch"]
    assert f"{best} (best)" in page
    assert "ina226/power1" in page


def test_compare_puts_the_scenario_headlines_side_by_side(measured, signed):
    slower = {**measured, "results": {**measured["results"]}}
    sweep = measured["results"]["batch_sweep"]
    slower["results"]["batch_sweep"] = {
        **sweep,
        "best": {**sweep["best"], "items_per_s": sweep["best"]["items_per_s"] / 2},
    }
    cmp = compare_reports([signed(measured), signed(slower, "b")])
    rows = {row.figure: row for row in cmp.rows}
    for figure in (
        "batch: best items/s",
        "threads: recommended",
        "server: p99 at target (queueing incl.)",
        "operators: profiled time per inference",
        "energy per inference",
        "energy: board power",
    ):
        assert figure in rows, figure
    batch = rows["batch: best items/s"]
    assert batch.better == "higher" and batch.deltas[1] == pytest.approx(-0.5)
    assert rows["energy: board power"].values[0] == pytest.approx(RAIL_W)
