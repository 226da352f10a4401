"""Shared fixtures: a real OpenSSH sshd on 127.0.0.1, and small generic helpers.

Keep this file to fixtures many test folders need; folder-specific fixtures go
in that folder's own conftest.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent

# Bytecode is cached (in the gitignored __pycache__ folders) even where the environment
# says $PYTHONDONTWRITEBYTECODE, as some containers and CI images do: the suite starts
# some 1,500 Python processes (xdist workers, agents, measuring workers, runtime
# environments' Pythons, whose venvs are installed --no-compile), and without a cache each
# one compiles every module it imports again, and each xdist worker rewrites every test
# module's asserts again (collection: 10.7 CPU-s a worker against 3.4; docs/architecture.md).
# Set here, before xdist starts its workers, so they and every child inherit it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# numpy's BLAS on one thread in every process of the suite (the agent already starts its
# workers so, agent/runtimes child_env): numpy's OpenBLAS starts a thread per core at
# import, and each spins about 0.1 CPU-s before it sleeps, in each of the hundreds of host
# commands, agents and helper Pythons the tests start, beside xdist's one worker per core.
# No test multiplies matrices big enough for a second thread to help. The tests of
# child_env clear it to see the default.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def load_test_helper(name: str):
    """Import ``tests/<name>.py`` under a private module name (tests/ is not a package)."""
    module_name = f"_edgequal_tests_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, TESTS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


MAX_WORKERS = 4


def leaves_out_slow(config) -> bool:
    """Whether ``-m`` leaves out every test marked slow: the fast loop, ``-m "not slow"``,
    alone or as one term of an ``and`` (``-m "not slow and not compat"``)."""
    expr = (config.getoption("markexpr", "") or "").strip()
    if not expr or "(" in expr or " or " in f" {expr} ":
        return False
    return "not slow" in (" ".join(term.split()) for term in expr.split(" and "))


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for ``-n auto`` (pyproject's addopts): one per CPU this process may use, at
    most :data:`MAX_WORKERS`. One more would keep the CPUs busy while a worker waits on
    another clock (labgrid's reservation expiry, a 20 s probe, sshd: about 200
    worker-seconds): on a quiet 2-core machine the suite took 6 min 47 s on three workers
    against 7 min 29 s on two, but three copies at once then ran nine workers on two cores
    (load 13-17) and the device emulator's thread, starved, let hot cold loads through
    unthrottled; on two each, the three copies passed. Board tests (``--eq-device``,
    ``--eq-lab``) run in one process, so a board is never asked for two qualifications at
    once.

    The fast loop (:func:`leaves_out_slow`) runs in one process too: every worker imports
    and collects the whole suite and builds its own session fixtures (about 10 CPU seconds
    each, more where $PYTHONDONTWRITEBYTECODE stops pytest from caching its rewritten test
    modules), as much as a second worker would take off the fast tests' own 20; on a shared
    machine the CPU it costs is what everyone waits for. ``-n 2`` still asks for workers."""
    if config.getoption("eq_device", None) or config.getoption("eq_lab", None):
        return 0
    if leaves_out_slow(config):
        return 0
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS)


_SLOW_MODULE = re.compile(r"^pytestmark = pytest\.mark\.slow$", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    """Under the fast loop, a test module marked slow as a whole (a top-level
    ``pytestmark = pytest.mark.slow`` line) is not imported: every test in it would be
    deselected, and importing it costs every run its imports (hypothesis) and pytest's
    assertion rewriting. None (pytest decides) otherwise."""
    if (
        collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and leaves_out_slow(config)
        and _SLOW_MODULE.search(collection_path.read_text(encoding="utf-8"))
    ):
        return True
    return None


CPU_LOG_ENV = "EDGEQUAL_TEST_CPU_LOG"
"""When set to a file path, every pytest process that collects and runs tests (the only
one, or each xdist worker) appends one JSON line per test to that file: the test's CPU seconds (setup, call and
teardown; this process, its children and their descendants) and wall-clock seconds, and one line when its
collection is done (the CPU seconds the process had used by then). scripts/bench/fast_loop.py
reads it; unset, nothing is measured."""


def _cpu_seconds() -> float:
    """CPU seconds of this process, of the children it has reaped, and of its descendants
    still running (each one's own and what it reaped), user and system.

    The live descendants count so that a long-lived child's CPU lands on the tests that
    used it: sshd (session-scoped) reaps every SSH test's agent and workers, and a
    module's agents run all its tests; counted only when reaped, their whole CPU landed on
    whichever test stopped them (the session's last test carried 50 CPU-s of SSH runs).
    Finding them reads every process's /proc entry: about 2.5 ms a call, twice a test, so
    the log costs a full run some 8 CPU-s of its own."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    import psutil

    try:
        live = psutil.Process().children(recursive=True)
    except psutil.Error:
        live = []
    for child in live:
        try:
            t = child.cpu_times()
        except psutil.Error:  # ended meanwhile: counted once its parent reaps it
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _log_cpu(record: dict) -> None:
    """Append ``record`` as one line to $EDGEQUAL_TEST_CPU_LOG (one write: processes share it)."""
    line = (json.dumps({**record, "pid": os.getpid()}) + "\n").encode()
    fd = os.open(os.environ[CPU_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def pytest_collection_finish(session) -> None:
    """Unregister hypothesis's pytest plugin when no collected module imported hypothesis
    (the fast loop does not import tests/test_fuzz.py): it has nothing to report, yet its
    terminal summary imports hypothesis, which pytest rewrites as a plugin's package, 1 to
    2 CPU-s on every run. With $EDGEQUAL_TEST_CPU_LOG: what start-up and collection cost
    this process."""
    if "hypothesis" not in sys.modules:
        plugin = session.config.pluginmanager.get_plugin("hypothesispytest")
        if plugin is not None:
            session.config.pluginmanager.unregister(plugin)
    if os.environ.get(CPU_LOG_ENV):
        _log_cpu({"collected": len(session.items), "cpu_s": round(_cpu_seconds(), 3)})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With $EDGEQUAL_TEST_CPU_LOG: each test's CPU seconds and wall-clock seconds, fixtures
    it set up or tore down included (a module-scoped fixture's setup lands on the module's
    first test, its teardown on the last)."""
    if not os.environ.get(CPU_LOG_ENV):
        yield
        return
    start, started = _cpu_seconds(), time.monotonic()
    yield
    cpu = round(_cpu_seconds() - start, 3)
    _log_cpu({"test": item.nodeid, "cpu_s": cpu, "wall_s": round(time.monotonic() - started, 3)})


@pytest.fixture(scope="session")
def test_helper():
    """:func:`load_test_helper`, for the conftest.py files of test folders."""
    return load_test_helper


@pytest.fixture(scope="session")
def corrupt_model_bytes():
    """tests/corrupt_models.py's ``corrupt_model_bytes(kind, src, dst)``: a broken model file."""
    return load_test_helper("corrupt_models").corrupt_model_bytes


@pytest.fixture(scope="session")
def sshd_helpers():
    """The tests/sshd.py module (start_sshd, known_hosts_line, make_ed25519_key...)."""
    return load_test_helper("sshd")


@pytest.fixture(scope="session")
def make_pki():
    """tests/pki.py's ``make_pki(dir)``: a CA, a server certificate for 127.0.0.1 and a
    client certificate, PEM files in ``dir``."""
    return load_test_helper("pki").make_pki


@pytest.fixture(scope="session")
def chromium():
    """tests/chromium.py: ``find_chromium()``, ``headless(binary, tmp_path, *args)`` and
    ``layout_at(binary, page, tmp_path, width)``, for the tests that open pages."""
    return load_test_helper("chromium")


@pytest.fixture(scope="session")
def chain_model():
    """tests/gate_reports.py's ``chain_model(path, layers, rows=1)``: a MatMul chain of set cost."""
    return load_test_helper("gate_reports").chain_model


@pytest.fixture(scope="session")
def reference_outputs():
    """``reference_outputs(model, cases, path)``: ``model``'s outputs on ``cases`` (``{case:
    feeds}``) from onnxruntime here, written as a golden set's ``--outputs`` NPZ
    (``CASE/OUTPUT``); returns the output names."""
    import numpy as np

    def write(model: Path, cases: dict, path: Path) -> list[str]:
        import onnxruntime as ort

        session = ort.InferenceSession(str(model))
        names = [o.name for o in session.get_outputs()]
        arrays = {
            f"{case}/{n}": v
            for case, feeds in cases.items()
            for n, v in zip(names, session.run(None, feeds), strict=True)
        }
        np.savez(path, **arrays)
        return names

    return write


@pytest.fixture(scope="session")
def local_agents():
    """The tests/local_agents.py module: ``serve(state, ...)`` and ``start_agent(base, name)``,
    the one way tests start ``edgequal-agent serve`` processes."""
    return load_test_helper("local_agents")


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory, sshd_helpers):
    """A real sshd on 127.0.0.1 (tests/sshd.py): one per test session, stopped at the end.

    Outside CI a machine without sshd skips the SSH tests with that reason; in CI
    (``$CI`` set) a missing sshd fails them, because .ci/run installs it.
    """
    sshd = sshd_helpers.find_sshd()
    if sshd is None:
        reason = "sshd not found: install openssh-server to run the SSH tests"
        if os.environ.get("CI"):
            pytest.fail(reason + " ($CI is set, so this is an error)")
        pytest.skip(reason)
    server = sshd_helpers.start_sshd(tmp_path_factory.mktemp("sshd"), sshd)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def agent_cmd() -> str:
    """The ``edgequal-agent`` console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "edgequal-agent"
    if script.exists():
        return str(script)
    return f"{sys.executable} -m edgequal.agent.cli"


@pytest.fixture
def runs(tmp_path):
    """A stand-in ``Runs`` (tests/stand_in_runs.py) for Qualify plumbing tests.

    An ``agent`` fixture hands it to ``build_server(runs=...)`` when a test asks for it.
    """
    fake = load_test_helper("stand_in_runs").StandInRuns(tmp_path / "stand-in-runs")
    yield fake
    fake.release.set()


@pytest.fixture
def agent_runs(request):
    """What an ``agent`` fixture passes as ``runs``: the stand-in when the test asked for
    ``runs``, else None (the agent's real runs)."""
    return request.getfixturevalue("runs") if "runs" in request.fixturenames else None


@pytest.fixture(autouse=True)
def isolated_config(tmp_path_factory, monkeypatch):
    """Every test gets its own host config, agent state and local-agent state dirs."""
    base = tmp_path_factory.mktemp("edgequal-home")
    monkeypatch.setenv("EDGEQUAL_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("EDGEQUAL_AGENT_STATE", str(base / "agent-state"))
    monkeypatch.setenv("EDGEQUAL_LOCAL_STATE", str(base / "local-agent"))
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))  # reports, the runs ledger
    monkeypatch.delenv("EDGEQUAL_TOKEN", raising=False)
    monkeypatch.delenv("EDGEQUAL_ROOT", raising=False)
    # The terminal output every test reads is a CI log's: 120 columns (host/present/terminal/
    # sections.py), whatever an earlier test in this worker did to the shared console, and
    # whatever width the console took when this worker's first test imported it.
    from edgequal.host.present.terminal import sections as terminal

    monkeypatch.setattr(terminal.console, "width", 120)
    return base


@pytest.fixture(scope="session")
def example_models(tmp_path_factory) -> dict[str, Path]:
    """Every example model (host/examples/catalog.py), built once per session."""
    from edgequal.host.examples.catalog import build_all

    return build_all(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def golden_sets(tmp_path_factory, example_models) -> dict[str, Path]:
    """A golden set per runnable example model, reference outputs from the host runtime."""
    from edgequal.host.examples.catalog import EXAMPLES, example_inputs
    from edgequal.host.golden import make_golden

    out = tmp_path_factory.mktemp("golden")
    sets = {}
    for name in (
        "classifier",
        "dynamic",
        "multi_input",
        "classifier_fp16",
        "classifier_tflite",
        "classifier_int8",
    ):
        cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs(name, 12))}
        sets[name] = out / f"{name}.npz"
        make_golden(example_models[name], cases, sets[name], decision=EXAMPLES[name].decision_rule)
    return sets


@pytest.fixture(scope="session")
def device_emulator():
    """The device emulator module (``edgequal.host.examples.device_emulator``)."""
    from edgequal.host.examples import device_emulator

    return device_emulator


QUICK_TEST_PLAN = {
    "cold_runs": 1,
    "warmup_min_runs": 5,
    "warmup_min_s": 0.05,
    "warmup_max_s": 0.5,
    "latency_min_runs": 50,
    "latency_min_s": 0.1,
    "sustain_s": 0.0,
}


SHORT_PLAN_FLAGS = ("--cold-runs", "1", "--warmup", "0.2s", "--latency", "0.2s")
"""``qualify`` and ``fleet run`` flags for tests about plumbing: one cold load, 0.2 s of
warm-up and 0.2 s of latency (the quick plan's 10 warm-up and 200 timed runs still apply)."""


@pytest.fixture(scope="session")
def short_plan() -> list[str]:
    """:data:`SHORT_PLAN_FLAGS`, for CLI and fleet tests about plumbing (names, pinning,
    skips, outputs): they need a signed report, not the preset's 3 cold loads and 3 s of
    latency."""
    return list(SHORT_PLAN_FLAGS)


@pytest.fixture
def quick_plan():
    """``make_plan("quick")`` shortened for tests (every phase, real runtimes), as the plan's
    JSON (what the wire and the report carry); overrides as keywords."""
    from edgequal.contract.plan import make_plan

    def build(**overrides) -> dict:
        return make_plan("quick", **{**QUICK_TEST_PLAN, **overrides}).to_json()

    return build


@pytest.fixture
def fast_plan(quick_plan) -> dict:
    """The shortened quick plan as it is."""
    return quick_plan()
