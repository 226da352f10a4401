"""Call classes on a real agent on 127.0.0.1: a flood of one class never makes another's
calls fail (agent/service/admission.py)."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import grpc
import pytest
from edgequal.agent.service.admission import LIMITS, AdmissionInterceptor, pool_threads
from edgequal.agent.service.server import build_server
from edgequal.contract.keys import DeviceKey
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TOKEN = "adm1ss10n-" + "b" * 32
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def test_every_call_has_one_class():
    def authenticated(metadata):
        return dict(metadata or ()).get("authorization") == f"Bearer {TOKEN}"

    with_token = AdmissionInterceptor(authenticated)
    cases = {
        ("/edgequal.v1.Agent/Prove", ()): "public",
        ("/grpc.health.v1.Health/Check", ()): "public",
        ("/grpc.health.v1.Health/Watch", ()): "watch",
        ("/edgequal.v1.Agent/Info", ()): "public",  # refused for its token: a public call
        ("/edgequal.v1.Agent/Push", (("authorization", "Bearer guess"),)): "public",
        ("/edgequal.v1.Agent/Info", AUTH): "light",
        ("/edgequal.v1.Agent/Stat", AUTH): "light",
        ("/edgequal.v1.Agent/RenewLease", AUTH): "light",
        ("/edgequal.v1.Agent/GetReport", AUTH): "light",
        ("/edgequal.v1.Agent/Push", AUTH): "push",
        ("/edgequal.v1.Agent/Qualify", AUTH): "qualify",
        ("/edgequal.v1.Agent/AcquireLease", AUTH): "lease_wait",
    }
    for (method, metadata), expected in cases.items():
        assert with_token.call_class(method, metadata) == expected, method
    # Without a token (loopback, mutual TLS) every caller is admitted: classes by method.
    open_agent = AdmissionInterceptor(None)
    assert open_agent.call_class("/edgequal.v1.Agent/Info", ()) == "light"
    assert open_agent.call_class("/edgequal.v1.Agent/Push", ()) == "push"
    assert pool_threads() == sum(LIMITS.values()) + 16


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admission")
    a = build_server("127.0.0.1:0", tmp / "state", tmp, token=TOKEN, key=DeviceKey.generate())
    a.start()
    yield a
    a.stop(0)


@pytest.mark.slow  # a flood of callers on purpose: about 1 CPU-s
def test_light_calls_are_not_refused_beside_a_prove_flood_and_held_uploads(agent):
    """50 token holders call Info and Stat at once while uploads hold the push class and
    unauthenticated callers flood Prove and a wrong-token Info: no token holder's call fails."""
    data = os.urandom(2 * 1024 * 1024)
    digest = hashlib.sha256(data).hexdigest()
    release = threading.Event()
    stop = threading.Event()
    failures: list[str] = []
    refused_public = []
    done_light = []

    def held_upload(channel):
        def chunks():
            yield pb.PushChunk(digest=digest, offset=0, data=data[:1024], total_size=len(data))
            release.wait(30)

        try:
            pb_grpc.AgentStub(channel).Push(chunks(), metadata=AUTH, timeout=60)
        except grpc.RpcError:
            pass  # ended by the test (paused upload) or refused: neither is a light call

    def flood(channel):
        stub = pb_grpc.AgentStub(channel)
        while not stop.is_set():
            for call, metadata in (
                (lambda m: stub.Prove(pb.ProveRequest(challenge=os.urandom(32)), metadata=m), ()),
                (lambda m: stub.Info(pb.InfoRequest(), metadata=m), (("authorization", "x"),)),
            ):
                try:
                    call(metadata)
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        refused_public.append(e.details())
                    elif e.code() != grpc.StatusCode.UNAUTHENTICATED:
                        failures.append(f"public {e.code()}: {e.details()}")

    def light(channel, barrier):
        stub = pb_grpc.AgentStub(channel)
        barrier.wait(30)
        for _ in range(3):
            try:
                stub.Info(pb.InfoRequest(), metadata=AUTH, timeout=30)
                stub.Stat(pb.StatRequest(digest=digest), metadata=AUTH, timeout=30)
                done_light.append(1)
            except grpc.RpcError as e:
                failures.append(f"light {e.code()}: {e.details()}")

    channels = [grpc.insecure_channel(f"127.0.0.1:{agent.port}") for _ in range(4)]
    try:
        uploads = [
            threading.Thread(target=held_upload, args=(channels[0],)) for _ in range(LIMITS["push"])
        ]
        floods = [threading.Thread(target=flood, args=(channels[1],)) for _ in range(12)]
        barrier = threading.Barrier(50)
        callers = [
            threading.Thread(target=light, args=(channels[2 + i % 2], barrier)) for i in range(50)
        ]
        for t in uploads + floods:
            t.start()
        deadline = time.monotonic() + 30
        while agent.service.pushes_in_flight < LIMITS["push"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert agent.service.pushes_in_flight == LIMITS["push"]  # the push class is full
        for t in callers:
            t.start()
        for t in callers:
            t.join(60)
        stop.set()
        release.set()
        for t in uploads + floods:
            t.join(60)
    finally:
        stop.set()
        release.set()
        for c in channels:
            c.close()
    assert failures == []
    assert len(done_light) == 150
    assert all("public calls are already running" in r for r in refused_public)


def test_a_class_over_its_limit_is_refused_at_once_and_frees_its_place(agent):
    """Health Watch streams last: past the watch limit the next is refused, naming it;
    once one ends, another is admitted. Token holders' calls go on meanwhile."""
    channel = grpc.insecure_channel(f"127.0.0.1:{agent.port}")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest()) for _ in range(LIMITS["watch"])]
        for w in watches:
            assert next(w).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:
            next(health.Watch(health_pb2.HealthCheckRequest(), timeout=10))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "2 watch calls are already running" in e.value.details()
        stub = pb_grpc.AgentStub(channel)
        assert stub.Info(pb.InfoRequest(), metadata=AUTH, timeout=10).protocol == "edgequal.v1"
        watches[0].cancel()
        for _ in range(200):  # the cancelled stream's place comes back within moments
            again = health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
            try:
                assert next(again).status == health_pb2.HealthCheckResponse.SERVING
                break
            except grpc.RpcError as refused:
                assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                threading.Event().wait(0.02)
        else:
            pytest.fail("a watch place was never freed")
        again.cancel()
        watches[1].cancel()
    finally:
        channel.close()
