"""A runtime environment whose import hangs never stalls Info, and its probe dies with the
agent: a real ``edgequal-agent serve`` on 127.0.0.1 and a real environment (a venv whose
``onnxruntime`` package sleeps on import), probed by the agent in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edgequal.host.transport.grpc import GrpcTransport

pytestmark = pytest.mark.slow  # agents and a venv: seconds each

HUNG_ENV = "onnxruntime-0.0.3"


def hung_env(state: Path) -> Path:
    """``runtimes/onnxruntime-0.0.3``: a venv (no pip) whose ``import onnxruntime`` sleeps for
    an hour, with the manifest ``runtime add`` writes last."""
    target = state / "runtimes" / HUNG_ENV
    venv = target / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "onnxruntime").mkdir()
    (site / "onnxruntime" / "__init__.py").write_text("import time\ntime.sleep(3600)\n")
    manifest = {
        "name": HUNG_ENV,
        "runtime": "onnxruntime",
        "distribution": "onnxruntime",
        "version": "0.0.3",
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "python_executable": str(venv / "bin" / "python"),
        "path": str(target),
        "wheels": [],
        "created_unix": 1.0,
    }
    (target / "env.json").write_text(json.dumps(manifest))
    return venv / "bin" / "python"


def _children_running(parent: int, python: Path) -> list[int]:
    """Processes whose parent is ``parent`` running ``python`` (the environment's probe)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmdline = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and cmdline and cmdline[0] == os.fsencode(python):
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _env_state(transport) -> str:
    envs = {e["name"]: e for e in transport.info()["fingerprint"]["runtime_envs"]}
    env = envs[HUNG_ENV]
    return "ok" if env["available"] else env["reason"]


def test_a_hung_environment_does_not_stall_info_and_its_probe_dies_with_the_agent(
    tmp_path, local_agents
):
    state = tmp_path / "board" / "state"
    python = hung_env(state)
    agent = local_agents.serve(state)
    try:
        # Within the host's own 10 s deadline, at once: the last known state.
        with GrpcTransport(agent.address, timeout_s=10) as transport:
            assert _env_state(transport) == "probing"
            assert transport.info()["key_fingerprint"]
        deadline = time.monotonic() + 60
        while not (probes := _children_running(agent.proc.pid, python)):
            assert time.monotonic() < deadline, "the agent never probed the environment"
            time.sleep(0.2)
        (probe,) = probes
    finally:
        agent.stop()  # SIGTERM
    deadline = time.monotonic() + 30
    while _alive(probe):
        assert time.monotonic() < deadline, f"probe {probe} outlived the agent"
        time.sleep(0.2)

    # A second agent on the same state, its probes bounded by agent.toml (20 s by default):
    # the probe gives up after its bounded time, and Info says so, answering at once all along.
    (state / "agent.toml").write_text("[runtimes]\nprobe_timeout_s = 2\n")
    agent = local_agents.serve(state)
    try:
        with GrpcTransport(agent.address, timeout_s=10) as transport:
            deadline = time.monotonic() + 120
            while (seen := _env_state(transport)) == "probing":
                assert time.monotonic() < deadline, "the probe never gave up"
                time.sleep(0.25)
            assert seen == "broken: importing onnxruntime hung > 2 s"
    finally:
        agent.stop()


def test_runtime_list_bounds_each_probe_as_agent_toml_says(tmp_path):
    """``runtime list`` waits for its probes, each bounded as ``serve``'s are."""
    state = tmp_path / "state"
    hung_env(state)
    (state / "agent.toml").write_text("[runtimes]\nprobe_timeout_s = 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "edgequal.agent.cli", "--state-dir", str(state)]
        + ["runtime", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [env] = json.loads(done.stdout)
    assert (env["available"], env["reason"]) == (False, "broken: importing onnxruntime hung > 2 s")
