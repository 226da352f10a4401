"""The agent's gRPC service on 127.0.0.1: auth, uploads, limits, health, the run lease.

Qualify end-to-end tests with real runtimes live in tests/test_end_to_end.py; the
Qualify tests here drive the handler's plumbing (lease, events, cancel, disconnect,
error mapping) with a stand-in ``Runs`` handed to the agent, because what they
check is the streaming and locking, not the measurement.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from edgequal.agent.runtimes import detect_runtimes
from edgequal.agent.service import server as server_mod
from edgequal.agent.service.auth import check_listen_allowed, is_loopback_host
from edgequal.agent.service.server import build_server, status_for
from edgequal.contract.auth import parse_listen, read_token_file
from edgequal.contract.errors import (
    AgentError,
    BadInput,
    DeviceBusy,
    DigestMismatch,
    GoldenMismatch,
    ModelRejected,
    QuotaExceeded,
    RuntimeUnavailable,
    WorkerFailed,
)
from edgequal.contract.keys import DeviceKey
from edgequal.contract.plan import Plan
from edgequal.contract.runtimes import RuntimeStatus
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TOKEN = "t0k3n-" + "a" * 32
AUTH = (("authorization", f"Bearer {TOKEN}"),)
DATA = os.urandom(300_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def agent(tmp_path, agent_runs):
    a = build_server(
        "127.0.0.1:0",
        tmp_path / "state",
        tmp_path,
        token=TOKEN,
        key=DeviceKey.generate(),
        max_artifact_bytes=1_000_000,
        runs=agent_runs,
    ).start()
    yield a
    a.stop(0)


@pytest.fixture
def stub(agent):
    channel = grpc.insecure_channel(f"127.0.0.1:{agent.port}")
    yield pb_grpc.AgentStub(channel)
    channel.close()


def _chunks(data, digest, offset=0, size=65536, total=None):
    total = len(data) if total is None else total
    first = True
    while first or offset < len(data):
        piece = data[offset : offset + size]
        yield pb.PushChunk(
            digest=digest if first else "",
            offset=offset,
            data=piece,
            total_size=total if first else 0,
        )
        first = False
        offset += len(piece)


def _stored(agent) -> list[str]:
    return sorted(os.listdir(agent.service.store.committed_dir))


def _partials(agent) -> list[str]:
    return sorted(os.listdir(agent.service.store.partial_dir))


def _trailing(err: grpc.RpcError) -> dict:
    return dict(err.trailing_metadata() or ())


# -- auth --------------------------------------------------------------------


def test_health_serving_without_token(agent):
    with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "edgequal.v1.Agent"):
            r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    "metadata",
    [(), (("authorization", "Bearer wrong-token"),), (("authorization", TOKEN),)],
    ids=["no-token", "wrong-token", "no-bearer-scheme"],
)
def test_unauthenticated_calls_are_rejected_with_no_side_effect(agent, stub, metadata):
    for call in (
        lambda: stub.Info(pb.InfoRequest(), metadata=metadata, timeout=5),
        lambda: stub.Stat(pb.StatRequest(digest=DIGEST), metadata=metadata, timeout=5),
        lambda: stub.Push(_chunks(DATA, DIGEST), metadata=metadata, timeout=5),
        lambda: list(
            stub.Qualify(
                pb.QualifyRequest(model_digest=DIGEST, nonce="n"), metadata=metadata, timeout=5
            )
        ),
        lambda: stub.Cancel(pb.CancelRequest(run_id="r1"), metadata=metadata, timeout=5),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "bearer token" in e.value.details()
    assert _stored(agent) == [] and _partials(agent) == []


def test_bearer_scheme_is_case_insensitive(stub):
    r = stub.Info(pb.InfoRequest(), metadata=(("authorization", f"bearer {TOKEN}"),), timeout=5)
    assert r.protocol == "edgequal.v1"


def test_no_auth_is_refused_off_loopback(tmp_path):
    for listen in ("0.0.0.0:0", "[::]:0", "192.0.2.10:7441", "pi5.lab:7441", ":7441"):
        with pytest.raises(BadInput, match=re.escape(f"refusing to listen on {listen} without")):
            build_server(listen, tmp_path / "s", tmp_path, key=DeviceKey.generate())
    # Server-only TLS does not identify the client: still refused.
    with pytest.raises(BadInput, match="without authentication"):
        check_listen_allowed("0.0.0.0:7441", None, server_mod.TlsServerConfig(Path("c"), Path("k")))
    # With a token, or mutual TLS, any address is allowed (checked without binding).
    check_listen_allowed("0.0.0.0:7441", "tok", None)
    check_listen_allowed(
        "0.0.0.0:7441", None, server_mod.TlsServerConfig(Path("c"), Path("k"), Path("ca"))
    )
    for listen in ("127.0.0.1:0", "127.8.9.10:1", "[::1]:0", "localhost:0"):
        check_listen_allowed(listen, None, None)


def test_listen_parsing():
    assert parse_listen("127.0.0.1:7441") == ("127.0.0.1", 7441)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("localhost:65535") == ("localhost", 65535)
    for bad in ("127.0.0.1", "[::1]", "host:port", "h:70000"):
        with pytest.raises(BadInput):
            parse_listen(bad)
    assert is_loopback_host("127.255.0.1") and is_loopback_host("::1")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("my-loopback-alias")


def test_token_file(tmp_path):
    f = tmp_path / "token"
    f.write_text(f"  {TOKEN}\n")
    f.chmod(0o600)
    assert read_token_file(f) == TOKEN
    f.write_text("\n")
    with pytest.raises(BadInput, match="one token"):
        read_token_file(f)
    with pytest.raises(BadInput, match="cannot read token file"):
        read_token_file(tmp_path / "missing")


def test_a_taken_port_is_a_clear_error(agent, tmp_path):
    with pytest.raises(AgentError, match=f"cannot listen on 127.0.0.1:{agent.port}"):
        build_server(f"127.0.0.1:{agent.port}", tmp_path / "s2", tmp_path, key=DeviceKey.generate())


# -- mutual TLS ----------------------------------------------------------------


def test_mutual_tls_requires_a_client_certificate(tmp_path, make_pki):
    pki = make_pki(tmp_path)
    a = build_server(
        "127.0.0.1:0",
        tmp_path / "state",
        tmp_path,
        tls=(pki["server_cert"], pki["server_key"], pki["ca"]),
        key=DeviceKey.generate(),
    ).start()
    try:
        ca = pki["ca"].read_bytes()
        good = grpc.ssl_channel_credentials(
            ca, pki["client_key"].read_bytes(), pki["client_cert"].read_bytes()
        )
        with grpc.secure_channel(f"127.0.0.1:{a.port}", good) as ch:
            r = pb_grpc.AgentStub(ch).Info(pb.InfoRequest(), timeout=5)
            assert r.key_fingerprint.startswith("SHA256:")
        without_cert = grpc.ssl_channel_credentials(ca)
        with grpc.secure_channel(f"127.0.0.1:{a.port}", without_cert) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.AgentStub(ch).Stat(pb.StatRequest(digest=DIGEST), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.insecure_channel(f"127.0.0.1:{a.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.AgentStub(ch).Info(pb.InfoRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        a.stop(0)
    assert not os.listdir(tmp_path / "state" / "artifacts" / "partial")


# -- Info --------------------------------------------------------------------


def test_info_reports_key_runtimes_limits(agent, stub):
    r = stub.Info(pb.InfoRequest(), metadata=AUTH, timeout=5)
    key = agent.service.key
    assert r.public_key_raw == key.public_key_raw() and len(r.public_key_raw) == 32
    assert r.key_fingerprint == key.fingerprint()
    assert r.protocol == "edgequal.v1" and r.agent_version
    assert {rt.name for rt in r.runtimes} == {"onnxruntime", "litert"}
    for rt in r.runtimes:
        # Either a version, or the reason it is missing.
        assert (rt.available and rt.version and not rt.reason) or (not rt.available and rt.reason)
    fp = json.loads(r.fingerprint_json)
    assert fp["architecture"] and fp["python"]  # the probes' fingerprint
    assert r.limits.max_artifact_bytes == 1_000_000
    assert r.limits.chunk_bytes == 1024 * 1024
    assert r.limits.max_receive_message_bytes == server_mod.MAX_RECEIVE_MESSAGE_BYTES
    assert not r.busy and not r.HasField("lease")


def test_missing_runtime_says_why(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version

    def version(dist):
        if dist.startswith("onnxruntime"):
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    ort = next(r for r in detect_runtimes() if r.name == "onnxruntime")
    assert ort == RuntimeStatus(
        name="onnxruntime",
        available=False,
        version="",
        reason="not installed: pip install 'edgequal[onnx]' (onnxruntime)",
        distribution="",
    )


IDLE_AGENT = r"""
import sys
from pathlib import Path
from edgequal.agent.service.server import build_server
a = build_server("127.0.0.1:0", Path(sys.argv[1]), Path("/")).start()
print(a.port, flush=True)
sys.stdin.readline()  # the test calls Info meanwhile
heavy = [m for m in ("onnxruntime", "ai_edge_litert", "tflite_runtime", "numpy",
                     "edgequal.agent.phases.qualification", "edgequal.host", "rich", "paramiko")
         if m in sys.modules]
rss_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
print(",".join(heavy) or "-", rss_kb, flush=True)
a.stop(0)
"""


def test_info_imports_no_runtime_and_idle_agent_stays_small(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", IDLE_AGENT, str(tmp_path / "state")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(proc.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            r = pb_grpc.AgentStub(ch).Info(pb.InfoRequest(), timeout=10)
        assert {rt.name for rt in r.runtimes} == {"onnxruntime", "litert"}
        proc.stdin.write("\n")
        proc.stdin.flush()
        heavy, rss_kb = proc.stdout.readline().split()
        assert heavy == "-", f"an idle agent imported {heavy}"
        assert int(rss_kb) < 60 * 1024, f"idle agent RSS {int(rss_kb) // 1024} MB"
    finally:
        proc.kill()
        proc.wait(10)


# -- Stat and Push -------------------------------------------------------------


def test_push_stores_by_digest_and_again_receives_nothing(agent, stub):
    r = stub.Stat(pb.StatRequest(digest=DIGEST), metadata=AUTH, timeout=5)
    assert (r.committed_size, r.complete) == (0, False)
    r = stub.Push(_chunks(DATA, DIGEST), metadata=AUTH, timeout=10)
    assert (r.committed_size, r.bytes_received, r.complete) == (len(DATA), len(DATA), True)
    assert _stored(agent) == [DIGEST] and _partials(agent) == []
    assert (agent.service.store.committed_dir / DIGEST).read_bytes() == DATA
    r = stub.Push(_chunks(DATA, DIGEST), metadata=AUTH, timeout=10)
    assert (r.committed_size, r.bytes_received, r.complete) == (len(DATA), 0, True)
    r = stub.Stat(pb.StatRequest(digest=DIGEST), metadata=AUTH, timeout=5)
    assert (r.committed_size, r.complete) == (len(DATA), True)


def test_push_in_two_calls_resumes_at_committed_offset(agent, stub):
    half = 131072
    r = stub.Push(_chunks(DATA[:half], DIGEST, total=len(DATA)), metadata=AUTH, timeout=10)
    assert (r.committed_size, r.bytes_received, r.complete) == (half, half, False)
    assert stub.Stat(pb.StatRequest(digest=DIGEST), metadata=AUTH, timeout=5).committed_size == half
    r = stub.Push(_chunks(DATA, DIGEST, offset=half), metadata=AUTH, timeout=10)
    assert (r.committed_size, r.bytes_received, r.complete) == (len(DATA), len(DATA) - half, True)
    assert (agent.service.store.committed_dir / DIGEST).read_bytes() == DATA


def test_bytes_not_matching_digest_are_rejected_nothing_stored(agent, stub):
    wrong = bytearray(DATA)
    wrong[-1] ^= 0xFF
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(_chunks(bytes(wrong), DIGEST), metadata=AUTH, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"do not match sha256:{DIGEST}" in e.value.details()
    assert "nothing stored" in e.value.details()
    assert _trailing(e.value)["edgequal-error"] == "DigestMismatch"
    assert _stored(agent) == [] and _partials(agent) == []
    assert stub.Stat(pb.StatRequest(digest=DIGEST), metadata=AUTH, timeout=5).committed_size == 0


def test_chunk_at_wrong_offset(agent, stub):
    stub.Push(_chunks(DATA[:65536], DIGEST, total=len(DATA)), metadata=AUTH, timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(_chunks(DATA, DIGEST, offset=131072), metadata=AUTH, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "chunk at offset 131072, expected 65536" in e.value.details()
    assert "resume" in _trailing(e.value)["edgequal-hint"]
    # A gap inside one stream is caught too.
    bad = [
        pb.PushChunk(digest=DIGEST, offset=65536, data=DATA[65536:70000], total_size=len(DATA)),
        pb.PushChunk(offset=80000, data=DATA[80000:90000]),
    ]
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(iter(bad), metadata=AUTH, timeout=10)
    assert "chunk at offset 80000, expected 70000" in e.value.details()
    assert (
        stub.Stat(pb.StatRequest(digest=DIGEST), metadata=AUTH, timeout=5).committed_size == 70000
    )
    assert _stored(agent) == []


def test_artifact_over_size_limit(agent, stub):
    big = os.urandom(1_000_001)
    digest = hashlib.sha256(big).hexdigest()
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(_chunks(big, digest), metadata=AUTH, timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over this device's limit of 1000000 bytes" in e.value.details()
    assert _trailing(e.value)["edgequal-error"] == "QuotaExceeded"
    assert _stored(agent) == [] and _partials(agent) == []


def test_message_over_receive_limit(agent, stub):
    data = b"\0" * (server_mod.MAX_RECEIVE_MESSAGE_BYTES + 1)
    chunk = pb.PushChunk(digest=DIGEST, offset=0, data=data, total_size=len(data))
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(iter([chunk]), metadata=AUTH, timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in e.value.details()
    assert _partials(agent) == []


def test_push_protocol_errors(agent, stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(iter([]), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "empty Push" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(_chunks(DATA, "../../etc/passwd"), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a sha256 digest" in e.value.details()
    other = hashlib.sha256(b"other").hexdigest()
    mixed = [
        pb.PushChunk(digest=DIGEST, offset=0, data=DATA[:10], total_size=len(DATA)),
        pb.PushChunk(digest=other, offset=10, data=DATA[10:20]),
    ]
    with pytest.raises(grpc.RpcError) as e:
        stub.Push(iter(mixed), metadata=AUTH, timeout=5)
    assert "one artifact" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.Stat(pb.StatRequest(digest="sha256:" + DIGEST), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _stored(agent) == []


# -- error mapping -------------------------------------------------------------


def test_status_mapping_is_one_table():
    sc = grpc.StatusCode
    assert status_for(BadInput("x")) == sc.INVALID_ARGUMENT
    assert status_for(GoldenMismatch("x")) == sc.INVALID_ARGUMENT
    assert status_for(ModelRejected("x")) == sc.INVALID_ARGUMENT
    assert status_for(DigestMismatch("x")) == sc.INVALID_ARGUMENT
    assert status_for(QuotaExceeded("x")) == sc.RESOURCE_EXHAUSTED
    assert status_for(DeviceBusy("x")) == sc.RESOURCE_EXHAUSTED
    assert status_for(RuntimeUnavailable("x")) == sc.FAILED_PRECONDITION
    assert status_for(WorkerFailed("x")) == sc.INTERNAL
    assert status_for(AgentError("x")) == sc.INTERNAL
    assert status_for(KeyError("x")) == sc.INTERNAL


# -- Qualify plumbing, with stand-in runs ------------------------------------------


@pytest.fixture
def pushed(stub):
    stub.Push(_chunks(DATA, DIGEST), metadata=AUTH, timeout=10)
    return DIGEST


def _qualify(stub, holder="ci-1", nonce="nonce-1", digest=DIGEST, **kw):
    request = pb.QualifyRequest(
        model_digest=digest,
        plan_json=json.dumps({"preset": "quick"}),
        nonce=nonce,
        model_name="m.onnx",
        holder=holder,
        **kw,
    )
    return stub.Qualify(request, metadata=AUTH, timeout=30)


def _wait(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_qualify_streams_events_then_envelope(runs, stub, pushed):
    runs.release.set()
    messages = list(_qualify(stub))
    run_id = messages[0].run_id
    assert messages[0].WhichOneof("body") is None  # accepted
    assert [json.loads(m.event_json) for m in messages[1:-1]] == [
        {"type": "phase", "phase": "load", "state": "started"},
        {"type": "phase", "phase": "load", "state": "done"},
    ]
    assert all(m.run_id == run_id for m in messages)
    envelope = messages[-1].envelope
    assert json.loads(envelope) == {
        "run_id": run_id,
        "nonce": "nonce-1",
        "plan": Plan.from_json({"preset": "quick"}).to_json(),  # parsed once, at the door
        "status": "passed",
    }
    req = runs.requests[0]
    assert (req.model_digest, req.golden_digest, req.plan, req.model_name) == (
        DIGEST,
        None,
        Plan.from_json({"preset": "quick"}),
        "m.onnx",
    )
    got = stub.GetReport(pb.GetReportRequest(run_id=run_id), metadata=AUTH, timeout=5)
    assert got.envelope == envelope


def test_second_qualify_is_told_busy_naming_run_and_holder(runs, agent, stub, pushed):
    first = _qualify(stub, holder="alice@ci-1")
    run_id = next(first).run_id
    assert runs.started.wait(10)
    info = stub.Info(pb.InfoRequest(), metadata=AUTH, timeout=5)
    assert info.busy and (info.lease.run_id, info.lease.holder) == (run_id, "alice@ci-1")
    assert info.lease.expires_unix_ms > info.lease.started_unix_ms
    with pytest.raises(grpc.RpcError) as e:
        list(_qualify(stub, holder="bob@ci-2"))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.value.details().startswith(f"device busy: run {run_id} for alice@ci-1")
    assert _trailing(e.value)["edgequal-error"] == "DeviceBusy"
    # The report of the running run is not there yet.
    with pytest.raises(grpc.RpcError) as e:
        stub.GetReport(pb.GetReportRequest(run_id=run_id), metadata=AUTH, timeout=5)
    assert "still in progress" in e.value.details()
    runs.release.set()
    rest = list(first)
    assert json.loads(rest[-1].envelope)["status"] == "passed"
    # Free again: the next run starts at once.
    assert len(list(_qualify(stub, holder="bob@ci-2"))) == 4
    assert len(runs.requests) == 2


def test_cancel_stops_the_run_with_a_report(runs, stub, pushed):
    stream = _qualify(stub)
    run_id = next(stream).run_id
    assert runs.started.wait(10)
    r = stub.Cancel(pb.CancelRequest(run_id="run-unknown"), metadata=AUTH, timeout=5)
    assert (r.cancelled, r.message) == (False, "run run-unknown is not in progress")
    r = stub.Cancel(pb.CancelRequest(run_id=run_id), metadata=AUTH, timeout=5)
    assert r.cancelled
    assert json.loads(list(stream)[-1].envelope)["status"] == "incomplete"


def test_lease_expiry_cancels_the_run(runs, tmp_path):
    a = build_server(
        "127.0.0.1:0",
        tmp_path / "s",
        tmp_path,
        key=DeviceKey.generate(),
        max_run_s=0.3,
        runs=runs,
    ).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{a.port}") as ch:
            stub = pb_grpc.AgentStub(ch)
            stub.Push(_chunks(DATA, DIGEST), timeout=10)
            req = pb.QualifyRequest(model_digest=DIGEST, plan_json="{}", nonce="n")
            messages = list(stub.Qualify(req, timeout=30))
        assert json.loads(messages[-1].envelope)["status"] == "incomplete"
    finally:
        a.stop(0)


def test_run_outlives_a_disconnected_host_and_keeps_its_report(runs, agent, pushed):
    channel = grpc.insecure_channel(f"127.0.0.1:{agent.port}")
    stream = _qualify(pb_grpc.AgentStub(channel))
    run_id = next(stream).run_id
    assert json.loads(next(stream).event_json)["state"] == "started"
    stream.cancel()
    channel.close()
    # The device is still busy with the run; then it finishes and frees the slot.
    assert agent.service.slot.current().lease.run_id == run_id
    runs.release.set()
    _wait(lambda: agent.service.slot.current() is None)
    with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as ch:
        stub = pb_grpc.AgentStub(ch)
        got = stub.GetReport(pb.GetReportRequest(run_id=run_id), metadata=AUTH, timeout=5)
        assert json.loads(got.envelope) == {
            "run_id": run_id,
            "nonce": "nonce-1",
            "plan": Plan.from_json({"preset": "quick"}).to_json(),
            "status": "passed",
        }
        assert not stub.Info(pb.InfoRequest(), metadata=AUTH, timeout=5).busy


def test_qualify_for_a_digest_never_pushed(stub):
    # Refused before the run machinery is even loaded.
    missing = hashlib.sha256(b"never pushed").hexdigest()
    with pytest.raises(grpc.RpcError) as e:
        list(_qualify(stub, digest=missing))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"sha256:{missing} is not on this device; push it first" in e.value.details()


def test_qualify_bad_requests(runs, stub, pushed):
    for kwargs, message in (
        ({"nonce": ""}, "nonce"),
        ({"golden_digest": "nothex"}, "not a sha256 digest"),
    ):
        with pytest.raises(grpc.RpcError) as e:
            list(_qualify(stub, **kwargs))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in e.value.details()
    request = pb.QualifyRequest(model_digest=DIGEST, plan_json="[1]", nonce="n")
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Qualify(request, metadata=AUTH, timeout=5))
    assert "plan_json must be a JSON object" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        list(_qualify(stub, extra_subjects_json='[{"name": "w.bin"}]'))
    assert "not a sha256 digest" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        list(
            _qualify(
                stub,
                extra_subjects_json=json.dumps(
                    [{"name": "../w.bin", "digest": {"sha256": DIGEST}}]
                ),
            )
        )
    assert "leaves its directory" in e.value.details()
    assert runs.requests == []


def test_errors_from_the_run_map_to_statuses_and_free_the_device(runs, agent, stub, pushed):
    runs.raise_error = GoldenMismatch("input x expects float32[1,3], got int8[1,3]")
    with pytest.raises(grpc.RpcError) as e:
        list(_qualify(stub))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "input x expects float32[1,3], got int8[1,3]"
    assert agent.service.slot.current() is None
    runs.raise_error = RuntimeError("secret internal detail /home/agent/key")
    with pytest.raises(grpc.RpcError) as e:
        list(_qualify(stub))
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in e.value.details() and "Traceback" not in e.value.details()
    assert agent.service.slot.current() is None


def test_get_report_unknown_and_malformed_run_ids(runs, stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.GetReport(pb.GetReportRequest(run_id="run-nope"), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no report for run run-nope" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.GetReport(pb.GetReportRequest(run_id="../device_key.pem"), metadata=AUTH, timeout=5)
    assert "not a run id" in e.value.details()
