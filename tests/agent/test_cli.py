"""``edgequal-agent`` as a process: one agent per state directory, the token file,
runtime detection that survives a crashing runtime, and ``run-plan`` (the SSH mode)
ending and describing itself as gRPC does.

Every test runs the real console script in a subprocess, with real runtimes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from edgequal.agent.service.store import ArtifactStore
from edgequal.contract.info import MAX_RECEIVE_MESSAGE_BYTES, PROTOCOL, AgentInfo, Limits
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.lease import Lease
from edgequal.contract.runtimes import RuntimeStatus
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

AGENT = [sys.executable, "-m", "edgequal.agent.cli"]

CRASHING_RUNTIME = """
import os, signal
os.kill(os.getpid(), signal.SIGSEGV)  # as onnxruntime's import does on some CPUs
"""


def agent_cmd(state: Path, *args: str) -> list[str]:
    return [*AGENT, "--state-dir", str(state), *args]


def run_agent(state: Path, *args: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        agent_cmd(state, *args), capture_output=True, text=True, env=env, timeout=timeout
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The stderr line of a failed command, asserting it is one line and no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    errors = [line for line in lines if line.startswith("edgequal-agent: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def info_over_grpc(port: int) -> pb.InfoResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return pb_grpc.AgentStub(channel).Info(pb.InfoRequest(), timeout=10)


def put(state: Path, path: Path) -> str:
    """Store a model in the agent's store the way the SSH transport does (partial, then commit)."""
    store = ArtifactStore(state / "artifacts")
    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    store.partial_path(digest).write_bytes(data)
    store.commit(digest)
    return digest


def plan_file(tmp_path: Path, digest: str, plan, name: str = "m.onnx") -> Path:
    spec = {
        "model_digest": digest,
        "nonce": "n-" + digest[:8],
        "plan": plan,
        "model_name": name,
    }
    path = tmp_path / f"plan-{digest[:8]}.json"
    path.write_text(json.dumps(spec))
    return path


def predicate_of(envelope: bytes) -> dict:
    return json.loads(base64.b64decode(json.loads(envelope)["payload"]))["predicate"]


# -- defect 3: one agent per state directory ---------------------------------------


@pytest.mark.slow
def test_a_second_agent_on_one_state_directory_refuses_and_the_first_keeps_serving(
    tmp_path, local_agents
):
    state = tmp_path / "state"
    first = local_agents.serve(state)
    port = first.port
    try:
        second = subprocess.run(
            agent_cmd(state, "serve", "--listen", "127.0.0.1:0"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 3
        line = one_line_error(second)
        assert (
            f"another agent (pid {first.proc.pid}, edgequal-agent serve) is using the state "
            in line
        )
        assert "its own --state-dir" in line
        # run-plan hands its plan to the serving agent, which refuses an unknown model.
        plan = plan_file(tmp_path, "a" * 64, {})
        one_shot = run_agent(state, "run-plan", str(plan))
        assert one_shot.returncode == 3
        assert "the agent serving this state directory refused the run" in one_line_error(one_shot)
        assert not (state / "runs").exists() or not any((state / "runs").iterdir())
        # The lock file says where the running agent listens, for a second local host.
        holder = json.loads((state / "agent.lock").read_text())
        assert (holder["pid"], holder["command"], holder["port"]) == (first.proc.pid, "serve", port)
        assert holder["lease"] is None
        assert info_over_grpc(port).protocol == PROTOCOL
    finally:
        first.stop()
    # Once the first has gone, the state directory is free again.
    again = local_agents.serve(state)
    try:
        assert (
            info_over_grpc(again.port).key_fingerprint
            == load_or_create_device_key(state).fingerprint()
        )
    finally:
        again.stop()


@pytest.mark.slow
def test_run_plan_beside_a_serving_agent_runs_through_it(
    tmp_path, local_agents, example_models, quick_plan
):
    """An agent installed as a service holds the state directory: an SSH host's run-plan
    hands its plan to that agent over loopback gRPC (with the service's token) and prints
    the same event lines and signed envelope it would print itself."""
    state = tmp_path / "state"
    token = tmp_path / "agent.token"
    token.write_text("service-token-" + "e" * 24 + "\n")
    token.chmod(0o600)
    serving = local_agents.serve(state, token_file=token)
    port = serving.port
    try:
        digest = put(state, example_models["micro"])
        proc = run_agent(state, "run-plan", str(plan_file(tmp_path, digest, quick_plan())))
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        run_id = lines[0]["event"]["run_id"]
        assert lines[0]["event"]["type"] == "run" and lines[-1]["run_id"] == run_id
        assert any(line.get("event", {}).get("phase") == "cold_load" for line in lines)
        envelope = base64.b64decode(lines[-1]["envelope"])
        key = load_or_create_device_key(state)
        predicate = json.loads(base64.b64decode(json.loads(envelope)["payload"]))["predicate"]
        assert predicate["run_id"] == run_id and predicate["status"] in MEASURED_STATUSES
        # The service ran it: its stored report is the same bytes, and it is free again.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            auth = (("authorization", "Bearer " + token.read_text().strip()),)
            stored = stub.GetReport(pb.GetReportRequest(run_id=run_id), metadata=auth, timeout=10)
            assert bytes(stored.envelope) == envelope
            assert not stub.Info(pb.InfoRequest(), metadata=auth, timeout=10).busy
        assert predicate["device_key"] == key.fingerprint()  # signed by this device's key
    finally:
        serving.stop()


# -- defect 12: the token file -----------------------------------------------------


@pytest.mark.parametrize(
    "content, mode, message",
    [
        (b"t0ken-" + b"a" * 32, 0o644, "is readable by other users (mode 0644) (hint: chmod 600"),
        (b"\xff\xfe tok\xe9n", 0o600, "is not UTF-8 text"),
        (b"two tokens\n", 0o600, "must hold one token on one line"),
    ],
    ids=["world-readable", "not-utf8", "two-words"],
)
def test_serve_refuses_a_bad_token_file_in_one_line(tmp_path, content, mode, message):
    token = tmp_path / "token"
    token.write_bytes(content)
    token.chmod(mode)
    proc = run_agent(
        tmp_path / "state", "serve", "--listen", "127.0.0.1:0", "--token-file", str(token)
    )
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert line.startswith(f"edgequal-agent: error: token file {token} ") and message in line


# -- defect 9: a runtime whose import crashes ---------------------------------------


@pytest.fixture
def crashing_onnxruntime(tmp_path) -> dict:
    """An environment where ``import onnxruntime`` dies with SIGSEGV (a stand-in package)."""
    site = tmp_path / "crashing-site"
    (site / "onnxruntime").mkdir(parents=True)
    (site / "onnxruntime" / "__init__.py").write_text(CRASHING_RUNTIME)
    dist = site / "onnxruntime-99.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime\nVersion: 99.0.0\n")
    return {**os.environ, "PYTHONPATH": str(site)}


@pytest.mark.slow
def test_info_reports_a_runtime_whose_import_crashes_and_still_answers(
    tmp_path, crashing_onnxruntime
):
    proc = run_agent(tmp_path / "state", "info", "--json", env=crashing_onnxruntime)
    assert proc.returncode == 0, proc.stderr
    info = AgentInfo.from_json(json.loads(proc.stdout))
    runtimes = {r.name: r for r in info.runtimes}
    assert runtimes["onnxruntime"] == RuntimeStatus(
        name="onnxruntime",
        available=False,
        version="99.0.0",
        reason="broken: importing onnxruntime kills the process with SIGSEGV",
        distribution="onnxruntime",
    )
    assert runtimes["litert"].available and runtimes["litert"].version
    text = run_agent(tmp_path / "state", "info", env=crashing_onnxruntime)
    assert text.returncode == 0
    assert "onnxruntime: missing: broken: importing onnxruntime kills the process with SIGSEGV" in (
        text.stdout
    )


@pytest.mark.slow
def test_a_model_for_the_crashing_runtime_fails_signed_and_the_other_runtime_qualifies(
    tmp_path, crashing_onnxruntime, example_models, quick_plan
):
    state = tmp_path / "state"
    onnx = put(state, example_models["micro"])
    tflite = put(state, example_models["classifier_tflite"])
    proc = run_agent(
        state, "run-plan", str(plan_file(tmp_path, onnx, quick_plan())), env=crashing_onnxruntime
    )
    assert proc.returncode == 0, proc.stderr
    p = predicate_of(base64.b64decode(json.loads(proc.stdout.splitlines()[-1])["envelope"]))
    assert (p["status"], p["reason"]) == ("failed", "worker killed by SIGSEGV")
    crash = p["findings"][0]
    assert (crash["runtime"], crash["signal"], crash["worker_phase"]) == (
        "onnxruntime",
        "SIGSEGV",
        "import",
    )
    # The version of the runtime installed there (the crashing stand-in's package metadata),
    # read without importing it: the summary names it.
    assert crash["runtime_version"] == "99.0.0"
    proc = run_agent(
        state,
        "run-plan",
        str(plan_file(tmp_path, tflite, quick_plan(), name="c.tflite")),
        env=crashing_onnxruntime,
    )
    assert proc.returncode == 0, proc.stderr
    p = predicate_of(base64.b64decode(json.loads(proc.stdout.splitlines()[-1])["envelope"]))
    assert p["status"] in MEASURED_STATUSES


# -- defect 10: run-plan ends and describes itself as gRPC does ------------------------


def start_run_plan(state: Path, plan: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        agent_cmd(state, "run-plan", str(plan)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = json.loads(proc.stdout.readline())
    run_id = first["event"]["run_id"]
    # Wait until the run measures (a phase started).
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if json.loads(line).get("event", {}).get("type") == "phase":
            return proc, run_id


@pytest.mark.slow
def test_run_plan_cancelled_by_a_closed_pipe_is_signed_incomplete_cancelled(
    tmp_path, example_models, quick_plan
):
    state = tmp_path / "state"
    digest = put(state, example_models["micro"])
    proc, run_id = start_run_plan(state, plan_file(tmp_path, digest, quick_plan(latency_min_s=60)))
    proc.stdout.close()  # the SSH session went away
    started = time.monotonic()
    assert proc.wait(timeout=60) == 3
    assert time.monotonic() - started < 30, "the run must stop, not measure for its full minute"
    assert "BrokenPipeError" not in proc.stderr.read()
    report = run_agent(state, "report", run_id)
    assert report.returncode == 0
    p = predicate_of(report.stdout.encode())
    assert (p["status"], p["reason"]) == ("incomplete", "cancelled")  # as gRPC's Cancel signs it


@pytest.mark.slow
def test_run_plan_cancelled_by_a_hang_up_sends_the_signed_report(
    tmp_path, example_models, quick_plan
):
    state = tmp_path / "state"
    digest = put(state, example_models["micro"])
    proc, run_id = start_run_plan(state, plan_file(tmp_path, digest, quick_plan(latency_min_s=60)))
    # While it runs, info (what the SSH transport reads) shows the lease, as gRPC Info does.
    busy = AgentInfo.from_json(json.loads(run_agent(state, "info", "--json").stdout))
    assert busy.busy and busy.lease.run_id == run_id and busy.lease.holder == "ssh"
    assert busy.lease.expires_unix_ms > busy.lease.started_unix_ms
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    last = json.loads(out.splitlines()[-1])
    assert last["run_id"] == run_id
    p = predicate_of(base64.b64decode(last["envelope"]))
    assert (p["status"], p["reason"]) == ("incomplete", "cancelled")
    idle = AgentInfo.from_json(json.loads(run_agent(state, "info", "--json").stdout))
    assert not idle.busy and idle.lease is None


@pytest.mark.slow
def test_info_json_carries_what_grpc_info_does(tmp_path, local_agents):
    state = tmp_path / "state"
    proc = run_agent(state, "info", "--json")
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout)
    info = AgentInfo.from_json(raw)
    key = load_or_create_device_key(state)
    assert info.protocol == PROTOCOL and info.agent_version
    assert info.public_key_raw == key.public_key_raw()
    assert info.key_fingerprint == key.fingerprint()
    assert info.limits.max_receive_message_bytes == MAX_RECEIVE_MESSAGE_BYTES
    assert info.limits.max_artifact_bytes > 0 and info.limits.chunk_bytes > 0
    assert raw["busy"] is False and raw["lease"] is None
    assert info.fingerprint["python"] and "fingerprint" in raw["probes"]
    # The same fields as the gRPC Info of an agent on this state directory.
    server = local_agents.serve(state)
    try:
        over_grpc = AgentInfo.from_pb2(info_over_grpc(server.port))
    finally:
        server.stop()
    assert set(vars(over_grpc)) == set(vars(info))
    assert (over_grpc.limits, over_grpc.protocol, over_grpc.key_fingerprint) == (
        info.limits,
        info.protocol,
        info.key_fingerprint,
    )


# -- AgentInfo: one typed conversion ------------------------------------------------


def test_agent_info_round_trips_through_json_and_protobuf():
    info = AgentInfo(
        agent_version="1.2.3",
        fingerprint={"board_model": "Raspberry Pi 5", "cpu_count": 4},
        runtimes=[
            RuntimeStatus("onnxruntime", True, "1.20.0", "", "onnxruntime"),
            RuntimeStatus("litert", False, "", "not installed: pip install x", ""),
        ],
        public_key_raw=bytes(range(32)),
        key_fingerprint="SHA256:abc",
        limits=Limits(max_artifact_bytes=2**31, quota_bytes=10**9),
        lease=Lease("run-1", "alice@ci", 1_000, 61_000),
    )
    assert AgentInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    assert AgentInfo.from_pb2(info.as_pb2()) == info
    idle = AgentInfo(**{**vars(info), "lease": None})
    assert AgentInfo.from_pb2(idle.as_pb2()) == idle and not idle.as_pb2().busy
    assert AgentInfo.from_json(idle.to_json()) == idle


@pytest.mark.slow
def test_serve_learns_of_a_crashing_runtime_in_the_background(
    tmp_path, local_agents, crashing_onnxruntime, monkeypatch
):
    from edgequal.agent.runtimes import ProbedRuntimes

    monkeypatch.setenv("PYTHONPATH", crashing_onnxruntime["PYTHONPATH"])
    runtimes = ProbedRuntimes()
    runtimes.settle(60)
    found = {r.name: r for r in runtimes()}
    assert not found["onnxruntime"].available
    assert found["onnxruntime"].reason.endswith("kills the process with SIGSEGV")
    assert found["litert"].available
    # And over gRPC, from a real serve process in that environment.
    agent = local_agents.serve(tmp_path / "state")
    try:
        deadline = time.monotonic() + 60
        while True:
            ort = next(r for r in info_over_grpc(agent.port).runtimes if r.name == "onnxruntime")
            if not ort.available or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ort.reason == "broken: importing onnxruntime kills the process with SIGSEGV"
    finally:
        agent.stop()
