"""Fixtures for host tests in more than one folder: signed reports from real runs for the gate,
compare and report-page tests, and the device key that signs them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _gate_reports():
    """tests/gate_reports.py, imported once under a private name (tests/ is not a package)."""
    name = "_edgequal_tests_gate_reports"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "gate_reports.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


SCENARIO_RAIL_W = 3.0
"""What the hwmon rail of :func:`scenario_measurement`'s board tree reads, in watts."""


@pytest.fixture(scope="session")
def scenario_measurement(example_models, golden_sets, tmp_path_factory) -> dict:
    """One real measurement of the dynamic example with every service scenario (batch sweep
    1, 2, 4; thread scaling; server; operators) and a 2 s sustained phase on a board tree
    whose ina226 rail reads :data:`SCENARIO_RAIL_W`; the predicate (run id "scenarios").

    Shared by the summary, report-page, compare and gate tests of the scenarios; they only
    read it (copy before changing anything).
    """
    from edgequal.agent.phases.qualification import run_measurement
    from edgequal.contract.plan import make_plan

    root = tmp_path_factory.mktemp("board")
    hwmon = root / "sys/class/hwmon/hwmon0"
    hwmon.mkdir(parents=True)
    (hwmon / "name").write_text("ina226\n")
    (hwmon / "power1_input").write_text(f"{round(SCENARIO_RAIL_W * 1e6)}\n")
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=50,
        latency_min_s=0.1,
        sustain_s=2.0,
        window_s=1.0,
        idle_power_s=1.0,
        cooldown=False,
        batch_sizes=[1, 2, 4],
        thread_scaling=True,
        server=True,
        server_search_steps=2,
        operator_profile=True,
        scenario_s=0.2,
    )
    out = run_measurement(example_models["dynamic"], golden_sets["dynamic"], plan, root=root)
    return {**out, "run_id": "scenarios"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory, example_models):
    """Signed reports from real runs (tests/gate_reports.py), produced once per session."""
    return _gate_reports().produce(tmp_path_factory, example_models)


@pytest.fixture
def known(reports):
    """The local agent's key pinned as device 'local' in this test's own config."""
    return _gate_reports().trust_local(reports)


@pytest.fixture
def device_key():
    """A device key pinned as device 'board' in this test's own config."""
    from edgequal.contract.keys import DeviceKey
    from edgequal.host.devices.trust import KnownDevices

    key = DeviceKey.generate()
    KnownDevices().trust("board", "local", key.public_key_raw())
    return key


@pytest.fixture
def sign(device_key, tmp_path):
    """``sign(name, predicate, subjects=None)``: the predicate signed by the device key, as a
    report file (pinned as device 'board')."""

    from edgequal.contract.signing import build_statement, sign_envelope

    def write(name: str, predicate: dict, subjects: list[dict] | None = None) -> Path:
        subjects = subjects or [{"name": "model.onnx", "sha256": "cd" * 32}]
        statement = build_statement(subjects, predicate)
        path = tmp_path / f"{name}.report.json"
        path.write_bytes(sign_envelope(device_key, statement))
        return path

    return write
