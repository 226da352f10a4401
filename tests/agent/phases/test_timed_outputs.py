"""Outputs checked during the timed phases, end to end through the agent's phases and real
onnxruntime workers: a clean run, a runtime whose outputs go wrong after N calls (the
fault injector, ``EDGEQUAL_OUTPUT_FAULT``), and a hot emulated board whose outputs go
wrong above a temperature."""

from __future__ import annotations

import os
import threading

import pytest
from edgequal.agent.measure.timed_outputs import checked_count
from edgequal.agent.phases.qualification import run_measurement
from edgequal.agent.phases.sustained import measure_sustained
from edgequal.contract.plan import make_plan
from edgequal.contract.summary import format_summary
from edgequal.host.judge.gate import evaluate
from edgequal.host.judge.policy import parse_policy

# Starts real worker processes (and the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow


def _first_due(start: int, every: int) -> int:
    """The first kept call index at or after ``start`` (kept calls are 0, k, 2k, ...)."""
    return -(-start // every) * every


def _timed_check(out: dict) -> list:
    return [
        c for c in evaluate(out, parse_policy({})) if c.name == "drift.timed_outputs_must_match"
    ]


def _page_and_screen(out: dict, capsys) -> tuple[str, str]:
    """The HTML page's drift section and the terminal's drift lines for a run's predicate."""
    from pathlib import Path

    from edgequal.host.judge.report_file import ReportFile
    from edgequal.host.present.html.sections import drift_section
    from edgequal.host.present.terminal.sections import print_drift

    page = drift_section([ReportFile(Path("report.json"), out)])
    capsys.readouterr()
    print_drift(out["results"])
    return page, " ".join(capsys.readouterr().out.split())


def test_a_clean_run_checks_every_kth_timed_call_and_all_match(
    example_models, golden_sets, fast_plan, capsys
):
    out = run_measurement(example_models["classifier"], golden_sets["classifier"], fast_plan)
    results = out["results"]
    timed = results["timed_outputs"]["latency"]
    calls = sum(e["summary"]["count"] for e in results["latency"]["per_shape"])
    assert timed["calls"] == calls > 0
    assert timed["checked"] == checked_count(calls, timed["every"]) <= 256
    # k is the smallest power of two keeping the count within the bound
    assert timed["every"] == 1 or checked_count(calls, timed["every"] // 2) > 256
    assert timed["mismatches"] == 0 and timed["mismatched"] == []
    assert timed["reference"] == "golden"
    assert "output_fault" not in out["fingerprint"]
    assert not [f for f in out["findings"] if f["kind"] == "timed_outputs_changed"]
    line = f"outputs checked during timing: {timed['checked']:,} of {calls:,} calls, all matched"
    assert line in format_summary(out).splitlines()
    [check] = _timed_check(out)
    assert check.passed and check.message == line
    page, screen = _page_and_screen(out, capsys)
    assert f'<span class="pass">{line}</span>' in page
    assert line in screen
    # A policy may switch the limit off.
    off = parse_policy({"drift": {"timed_outputs_must_match": False}})
    assert not [c for c in evaluate(out, off) if c.name == "drift.timed_outputs_must_match"]


def test_outputs_going_wrong_after_n_calls_are_a_finding_and_fail_the_gate(
    example_models, golden_sets, quick_plan, monkeypatch, capsys
):
    # At most 0.01 s of warm-up (1,000 calls of a fast machine) and 3,000 timed calls: the
    # fault starts inside the timed loop however fast the machine is.
    n = 1500
    monkeypatch.setenv("EDGEQUAL_OUTPUT_FAULT", f"after_calls:{n}")
    plan = quick_plan(
        warmup_min_s=0.0,
        warmup_max_s=0.01,
        latency_min_runs=3000,
        latency_min_s=0.05,
        latency_max_s=60.0,
    )
    out = run_measurement(example_models["classifier"], golden_sets["classifier"], plan)
    [entry] = out["results"]["latency"]["per_shape"]
    timed = out["results"]["timed_outputs"]["latency"]
    calls, every = entry["summary"]["count"], timed["every"]
    assert timed["calls"] == calls and timed["checked"] == checked_count(calls, every)
    # The worker's calls before the loop: one at rest, then the warm-up's.
    first_bad = max(0, n - 1 - entry["warmup"]["runs"])
    assert 0 < first_bad < calls
    kept_good = checked_count(first_bad, every)
    assert timed["mismatches"] == timed["checked"] - kept_good
    first = timed["mismatched"][0]
    assert first["call"] == _first_due(first_bad, every)
    assert 0 <= first["t_s"] <= entry["loop_s"] + 0.05
    assert first["outputs"][0]["output"] == "probs"
    if first["temp_sensor"] is False:
        assert first["temp_c"] is None  # absent, never made up
    finding = next(f for f in out["findings"] if f["kind"] == "timed_outputs_changed")
    assert finding["phase"] == "latency"
    assert finding["call"] == first["call"] and finding["output"] == "probs"
    assert f"call {first['call']:,}" in finding["message"]
    assert out["status"] == "failed"
    assert out["fingerprint"]["output_fault"] == f"after_calls:{n}"
    [check] = _timed_check(out)
    assert not check.passed
    assert check.measured == f"{timed['mismatches']} of {timed['checked']} changed"
    assert "CHANGED while timed: latency" in format_summary(out)
    page, screen = _page_and_screen(out, capsys)
    assert '<span class="fail">outputs checked during timing:' in page
    assert f"first at call {first['call']:,}" in screen


def test_a_hot_emulated_board_names_the_window_and_its_temperature(
    device_emulator, example_models, golden_sets, tmp_path, monkeypatch
):
    root = tmp_path / "board"
    # 8 °C per CPU second from 40 °C: the outputs go wrong from 44 °C, half a second of the
    # worker's CPU into the loop (however busy the machine); the trip point (95 °C) is out
    # of reach.
    emu = device_emulator.DeviceEmulator(
        root,
        watch_pid=os.getpid(),
        ambient_c=40.0,
        trip_c=95.0,
        heat_c_per_cpu_s=8.0,
        cool_rate=0.01,
        period_s=0.1,
    )
    monkeypatch.setenv("EDGEQUAL_OUTPUT_FAULT", "above_c:44")
    plan = make_plan("quick", threads=1, sustain_s=4.0, window_s=1.0, cooldown=False)
    findings: list = []
    with emu:
        result = measure_sustained(
            example_models["classifier"], golden_sets["classifier"], plan, "onnxruntime",
            root, lambda e: None, threading.Event(), findings,
        )  # fmt: skip
    assert not findings, findings
    timed = result["timed_outputs"]
    assert timed["mismatches"] > 0, timed
    assert timed["checked"] == checked_count(timed["calls"], timed["every"])
    first = timed["mismatched"][0]
    assert first["temp_sensor"] is True
    # The emulated board's temperature: the agent's 1 Hz sample nearest the first wrong
    # call, heated above the ambient 40 °C (at most a second, 8 °C, from the fault's 44).
    nearest = min(result["telemetry_samples"], key=lambda s: abs(s["t"] - first["t_s"]))
    assert first["temp_c"] == nearest["temp_c"]
    assert 40.0 < first["temp_c"] < 60.0, first
    window = next(w for w in result["windows_detail"] if w["index"] == first["window"])
    assert window["t0"] - result["loop_started_monotonic_s"] <= first["t_s"]
    from edgequal.agent.measure.timed_outputs import timed_outputs_finding

    finding = timed_outputs_finding("sustained", timed, "onnxruntime")
    assert finding["phase"] == "sustained"
    assert finding["window"] == first["window"] and finding["temp_c"] == first["temp_c"]
    assert f"window {first['window']}, {first['temp_c']:.1f} °C" in finding["message"]
