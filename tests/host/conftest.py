"""Fixtures for host tests: real ``edgequal-agent serve`` processes on 127.0.0.1, and signed
reports from real runs for the gate, compare and report-page tests."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

TOKEN = "host-tests-token-" + "d" * 24


class Agent:
    """A real ``edgequal-agent serve`` subprocess (``--debug``: it logs every authorized call)."""

    def __init__(self, state: Path, *serve_args: str):
        self.state = state
        self.log_path = state.parent / f"{state.name}.log"
        port_file = state.parent / f"{state.name}.port"
        port_file.unlink(missing_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgequal.agent.cli", "--debug", "--state-dir", str(state)]
            + ["serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file), *serve_args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.05)
        self.address = f"grpc://127.0.0.1:{port_file.read_text()}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def public_key_raw(self) -> bytes:
        return base64.b64decode((self.state / "device_key.pub").read_text())

    def stored_files(self) -> list[str]:
        """Every artifact (committed or partial) and report the agent holds."""
        found = []
        for sub in ("artifacts", "reports", "runs"):
            root = self.state / sub
            if root.exists():
                found += [str(p) for p in root.rglob("*") if p.is_file()]
        return found

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def token_file(tmp_path) -> Path:
    """A private file holding :data:`TOKEN`."""
    path = tmp_path / "agent.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def start_agent(tmp_path):
    """``start_agent(name, *serve_args)``: an :class:`Agent` with state ``tmp_path/name``,
    stopped at the end of the test."""
    started = []

    def start(name: str, *serve_args: str) -> Agent:
        agent = Agent(tmp_path / name, *serve_args)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


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
    from edgequal.agent.plan import make_plan
    from edgequal.agent.qualification import run_measurement

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
