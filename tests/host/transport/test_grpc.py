"""GrpcTransport against a real agent server on 127.0.0.1.

Qualify tests hand the agent a stand-in ``Runs`` (tests/stand_in_runs.py; the real
run is tested end to end); what they check is the transport: events passed
on, the envelope returned, statuses mapped to HostError subclasses.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from edgequal.agent.service.server import build_server
from edgequal.contract.keys import DeviceKey
from edgequal.contract.plan import Plan
from edgequal.host.errors import TransportError, UsageError
from edgequal.host.transport.base import QualifyRequest
from edgequal.host.transport.grpc import GrpcTransport, normalize_address

TOKEN = "host-side-token-" + "b" * 24


@pytest.fixture
def agent(tmp_path, agent_runs):
    a = build_server(
        "127.0.0.1:0",
        tmp_path / "state",
        tmp_path,
        token=TOKEN,
        key=DeviceKey.generate(),
        runs=agent_runs,
    ).start()
    yield a
    a.stop(0)


@pytest.fixture
def transport(agent):
    with GrpcTransport(f"grpc://127.0.0.1:{agent.port}", token=TOKEN, timeout_s=5) as t:
        yield t


def _artifact(tmp_path: Path, size: int, name: str = "model.onnx") -> tuple[Path, str]:
    path = tmp_path / name
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def _store_dir(agent) -> Path:
    return agent.service.store.committed_dir


def test_address_forms():
    assert normalize_address("grpc://pi5.lab:7441") == "pi5.lab:7441"
    assert normalize_address("127.0.0.1:1") == "127.0.0.1:1"
    assert normalize_address("[::1]:7441") == "[::1]:7441"
    for bad in ("pi5.lab", "grpc://pi5", "ssh://u@h"):
        with pytest.raises(UsageError, match="not a device address"):
            normalize_address(bad)


def test_info_dict(agent, transport):
    info = transport.info()
    assert info["address"] == f"127.0.0.1:{agent.port}"
    assert info["key_fingerprint"] == agent.service.key.fingerprint()
    assert info["public_key_b64"] == agent.service.key.public_key_b64()
    assert info["protocol"] == "edgequal.v1"
    assert {r["name"] for r in info["runtimes"]} == {"onnxruntime", "litert"}
    assert info["busy"] is False and info["lease"] is None
    assert info["limits"]["chunk_bytes"] == 1024 * 1024
    assert isinstance(info["fingerprint"], dict) and info["fingerprint"]["architecture"]
    assert transport.health() == "SERVING"


def test_push_round_trip_then_nothing_to_send(agent, transport, tmp_path):
    path, digest = _artifact(tmp_path, 2_500_000)
    progress = []
    r = transport.push(path, digest, on_progress=lambda done, total: progress.append(done))
    assert (r.digest, r.size, r.bytes_sent) == (digest, 2_500_000, 2_500_000)
    assert progress == [1048576, 2097152, 2_500_000]
    assert (_store_dir(agent) / digest).read_bytes() == path.read_bytes()
    r = transport.push(path, "sha256:" + digest)
    assert (r.digest, r.size, r.bytes_sent) == (digest, 2_500_000, 0)
    assert transport.stat(digest) == (2_500_000, True)


def test_push_empty_file(agent, transport, tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    digest = hashlib.sha256(b"").hexdigest()
    assert transport.push(path, digest).bytes_sent == 0
    assert (_store_dir(agent) / digest).read_bytes() == b""


def test_push_with_wrong_digest_is_usage_error_nothing_stored(agent, transport, tmp_path):
    path, _ = _artifact(tmp_path, 100_000)
    claimed = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(UsageError, match=f"do not match sha256:{claimed}"):
        transport.push(path, claimed)
    assert os.listdir(_store_dir(agent)) == []
    assert transport.stat(claimed) == (0, False)


def test_wrong_or_missing_token_is_transport_error_with_hint(agent, tmp_path):
    path, digest = _artifact(tmp_path, 10_000)
    for token in (None, "not-the-token"):
        with GrpcTransport(f"127.0.0.1:{agent.port}", token=token, timeout_s=5) as t:
            with pytest.raises(TransportError, match="token rejected") as e:
                t.push(path, digest)
            assert "--token-file" in e.value.hint
            assert e.value.exit_code == 3
    assert os.listdir(_store_dir(agent)) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_address_fails_fast_with_address(tmp_path):
    port = _free_port()
    t0 = time.monotonic()
    expected = f"device at 127.0.0.1:{port} does not answer"
    with (
        GrpcTransport(f"127.0.0.1:{port}", timeout_s=3) as t,
        pytest.raises(TransportError, match=expected),
    ):
        t.info()
    assert time.monotonic() - t0 < 3.5


@pytest.mark.slow
def test_silent_address_fails_within_the_deadline(tmp_path):
    # A TCP listener that never speaks HTTP/2: the call must give up at its deadline.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with (
            GrpcTransport(f"127.0.0.1:{port}", timeout_s=1) as t,
            pytest.raises(TransportError, match=f"127.0.0.1:{port}") as e,
        ):
            t.info()
        elapsed = time.monotonic() - t0
    assert elapsed < 3, f"took {elapsed:.1f} s"
    assert e.value.hint


KILLED_CLIENT = r"""
import sys, time
from pathlib import Path
from edgequal.host.transport.grpc import GrpcTransport
address, token, path, digest = sys.argv[1:5]
t = GrpcTransport(address, token=token, chunk_bytes=256 * 1024)
def progress(done, total):
    if done >= total // 2:
        print("HALF", done, flush=True)
        time.sleep(120)  # stay stuck mid-stream until killed
t.push(Path(path), digest, on_progress=progress)
print("FINISHED", flush=True)
"""


def _wait(predicate, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_upload_cut_off_by_killing_the_client_resumes_with_only_the_rest(
    agent, transport, tmp_path
):
    size = 8 * 1024 * 1024
    path, digest = _artifact(tmp_path, size)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, f"127.0.0.1:{agent.port}", TOKEN, str(path), digest],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("HALF"), line
        # Let what the client handed to gRPC reach the agent, then kill the client outright.
        _wait(lambda: transport.stat(digest)[0] >= size // 4)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    # The agent notices the dead stream and ends the call; the partial stays.
    _wait(lambda: agent.service.pushes_in_flight == 0)
    committed, complete = transport.stat(digest)
    assert not complete and 0 < committed < size
    assert committed % (256 * 1024) == 0  # whole chunks only
    assert not (_store_dir(agent) / digest).exists()

    r = transport.push(path, digest)
    assert r.bytes_sent == size - committed
    assert (_store_dir(agent) / digest).read_bytes() == path.read_bytes()
    assert transport.push(path, digest).bytes_sent == 0


# -- qualify -------------------------------------------------------------------


def test_qualify_passes_events_and_returns_envelope(runs, transport, tmp_path):
    path, digest = _artifact(tmp_path, 50_000)
    golden, golden_digest = _artifact(tmp_path, 1_000, "g.npz")
    transport.push(path, digest)
    transport.push(golden, golden_digest)
    runs.release.set()
    events = []
    request = QualifyRequest(
        model_digest=digest,
        golden_digest=golden_digest,
        plan={"preset": "quick", "threads": 2},
        nonce="n-123",
        model_name="model.onnx",
        golden_name="g.npz",
    )
    envelope = transport.qualify(request, events.append)
    assert events == [
        {"type": "run", "run_id": "run-1"},
        {"type": "phase", "phase": "load", "state": "started"},
        {"type": "phase", "phase": "load", "state": "done"},
    ]
    assert json.loads(envelope) == {
        "run_id": "run-1",
        "nonce": "n-123",
        "plan": Plan.from_json(
            {"preset": "quick", "threads": 2}
        ).to_json(),  # as the agent parsed it
        "status": "passed",
    }
    assert transport.last_run_id == "run-1"
    assert transport.get_report("run-1") == envelope


def test_busy_device_and_cancel(agent, runs, transport, tmp_path):
    path, digest = _artifact(tmp_path, 50_000)
    transport.push(path, digest)
    request = QualifyRequest(model_digest=digest, plan={}, nonce="n", holder="alice@ci")
    result = {}
    first = threading.Thread(
        target=lambda: result.setdefault("envelope", transport.qualify(request, lambda e: None))
    )
    first.start()
    assert runs.started.wait(10)
    assert transport.info()["lease"]["holder"] == "alice@ci"
    with GrpcTransport(f"127.0.0.1:{agent.port}", token=TOKEN, holder="bob@ci") as other:
        with pytest.raises(TransportError, match="^device busy: run run-1 for alice@ci"):
            other.qualify(QualifyRequest(model_digest=digest, plan={}, nonce="m"), print)
        other.cancel("run-1")
    first.join(10)
    assert json.loads(result["envelope"])["status"] == "incomplete"
    with pytest.raises(UsageError, match="not in progress"):
        transport.cancel("run-1")


def test_qualify_digest_never_pushed_is_usage_error(runs, transport):
    missing = hashlib.sha256(b"nope").hexdigest()
    with pytest.raises(UsageError, match=f"sha256:{missing} is not on this device; push it first"):
        transport.qualify(QualifyRequest(model_digest=missing, plan={}, nonce="n"), print)
    with pytest.raises(UsageError, match="not a sha256 digest"):
        transport.qualify(QualifyRequest(model_digest="abc", plan={}, nonce="n"), print)


def test_get_report_unknown_run(runs, transport):
    with pytest.raises(UsageError, match="no report for run run-404"):
        transport.get_report("run-404")


def test_resume_onto_a_torn_partial_starts_over_once(agent, transport, tmp_path):
    path, digest = _artifact(tmp_path, 3_000_000)
    # A partial whose bytes are not this file's prefix (a tail torn by a power cut).
    agent.service.store.partial_path(digest).write_bytes(os.urandom(1_048_576))
    r = transport.push(path, digest)
    assert r.bytes_sent == (3_000_000 - 1_048_576) + 3_000_000
    assert (_store_dir(agent) / digest).read_bytes() == path.read_bytes()
