"""The device lease: acquire, renew, release, reclaim, waiting in order of arrival; and two
hosts sharing one real agent on 127.0.0.1."""

from __future__ import annotations

import re
import threading
import time

import pytest
from edgequal.agent.service.lease import RunSlot
from edgequal.contract.errors import BadInput, DeviceBusy
from edgequal.contract.plan import make_plan
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host import errors as host_errors
from edgequal.host.devices.qualify import qualify
from edgequal.host.devices.resolve import trust_device
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.transport.grpc import GrpcTransport


def test_acquire_fails_fast_naming_holder_and_expiry():
    slot = RunSlot()
    got = slot.acquire("alice@ci", "fleet run nightly", 60)
    assert got.granted and got.lease_id
    with pytest.raises(DeviceBusy) as e:
        slot.acquire("bob@ci", "bench", 60)
    assert "leased to alice@ci for fleet run nightly" in str(e.value)
    assert re.search(r"lease expires in (59|60) s", str(e.value))
    # A run without the lease is refused; under it, it starts and shows its purpose.
    with pytest.raises(DeviceBusy, match="alice@ci"):
        slot.start("r1", "bob@ci", 60)
    run = slot.start("r1", "ignored", 60, lease_id=got.lease_id)
    assert run.lease.holder == "alice@ci" and run.lease.purpose == "fleet run nightly"
    assert slot.lease().run_id == "r1"
    slot.finish(run)
    assert slot.lease().run_id == "" and slot.lease().holder == "alice@ci"  # still leased
    assert slot.release(got.lease_id)
    assert not slot.release(got.lease_id)
    assert slot.lease() is None
    run = slot.start("r2", "bob@ci", 60)  # free and nobody waiting: a run alone may go
    slot.finish(run)


@pytest.mark.slow
def test_renew_extends_and_an_expired_lease_is_reclaimed():
    slot = RunSlot()
    a = slot.acquire("a", "", 1)
    first_expiry = slot.lease().expires_unix_ms
    assert slot.renew(a.lease_id, 1.2).expires_unix_ms > first_expiry
    with pytest.raises(BadInput):
        slot.renew(a.lease_id, 0)
    with pytest.raises(DeviceBusy, match="lease not held"):
        slot.renew("not-the-id", 5)
    # Not renewed again: b waits in line and gets the device once a's lease runs out.
    b = slot.acquire("b", "", 5, wait_s=5)
    while not b.granted:
        b = slot.acquire("b", "", 5, wait_s=5, ticket=b.ticket)
    assert slot.lease().holder == "b"
    with pytest.raises(DeviceBusy, match="lease not held"):
        slot.renew(a.lease_id, 5)
    with pytest.raises(DeviceBusy, match="lease not held"):
        slot.start("r", "a", 60, lease_id=a.lease_id)


@pytest.mark.slow
def test_a_lease_is_not_reclaimed_while_its_run_goes_on():
    slot = RunSlot()
    a = slot.acquire("a", "", 1)
    run = slot.start("r", "a", 60, lease_id=a.lease_id)
    time.sleep(1.1)
    with pytest.raises(DeviceBusy, match="run r for a"):
        slot.acquire("b", "", 5)
    slot.finish(run)
    assert slot.acquire("b", "", 5).granted  # expired and its run ended: reclaimed


@pytest.mark.slow
def test_waiting_hosts_are_served_in_order_of_arrival():
    slot = RunSlot()
    held = slot.acquire("first", "", 60)
    order: list[str] = []
    arrived = []

    def wait_for(name: str):
        r = slot.acquire(name, "", 60, wait_s=0.2)
        arrived.append(name)
        while not r.granted:
            r = slot.acquire(name, "", 60, wait_s=0.2, ticket=r.ticket)
        order.append(name)
        slot.release(r.lease_id)

    threads = []
    for name in ("second", "third", "fourth"):
        t = threading.Thread(target=wait_for, args=(name,))
        t.start()
        threads.append(t)
        while name not in arrived:  # each is in line before the next one arrives
            time.sleep(0.01)
    # Nobody may jump the line, not even a run that names no lease.
    with pytest.raises(DeviceBusy):
        slot.start("r", "x", 60)
    slot.release(held.lease_id)
    for t in threads:
        t.join(10)
    assert order == ["second", "third", "fourth"]


def test_a_waiter_that_stops_asking_loses_its_place():
    slot = RunSlot(ticket_grace_s=0.2)
    held = slot.acquire("a", "", 60)
    gone = slot.acquire("gone", "", 60, wait_s=0.05)
    assert not gone.granted and gone.position == 1
    time.sleep(0.3)
    slot.release(held.lease_id)
    assert slot.acquire("c", "", 60).granted


@pytest.mark.slow
def test_two_hosts_share_one_real_agent(tmp_path, example_models, local_agents):
    """Host A leases the device and qualifies under the lease; host B fails fast, then waits
    in line and gets it when A releases; a lease A stops renewing is reclaimed for B."""
    agent = local_agents.start_agent(tmp_path, "agent")
    try:
        known = KnownDevices()
        trust_device(known, "bench", agent.address)
        a = GrpcTransport(agent.address, holder="alice@runner1")
        b = GrpcTransport(agent.address, holder="bob@runner2")
        a.acquire_lease("fleet run nightly", ttl_s=60)
        with pytest.raises(host_errors.DeviceBusy) as e:
            b.acquire_lease("bench", ttl_s=60)
        assert "leased to alice@runner1 for fleet run nightly" in str(e.value)
        assert "lease expires in" in str(e.value)
        info = b.info()
        assert info["busy"] and info["lease"]["holder"] == "alice@runner1"
        assert info["lease"]["purpose"] == "fleet run nightly"

        # B waits in line (in a thread) while A qualifies under its lease.
        waited: list[dict] = []
        b_got = threading.Event()

        def b_waits():
            b.acquire_lease("bench", ttl_s=60, wait_s=120, on_wait=waited.append)
            b_got.set()

        t = threading.Thread(target=b_waits)
        t.start()
        plan = make_plan("quick", sustain_s=0, cold_runs=1, latency_min_runs=20, latency_min_s=0.1)
        outcome = qualify(a, example_models["micro"], None, plan, known=known, device_name="bench")
        assert outcome.report.status in MEASURED_STATUSES
        # B could not run a qualification of its own meanwhile (no lease: refused).
        assert not b_got.is_set()
        with pytest.raises(host_errors.DeviceBusy, match="alice@runner1"):
            qualify(b, example_models["micro"], None, plan, known=known, device_name="bench")
        assert a.release_lease()
        t.join(30)
        assert b_got.is_set()
        assert all(w["position"] == 1 and w["lease"]["holder"] == "alice@runner1" for w in waited)
        assert b.info()["lease"]["holder"] == "bob@runner2"

        # B stops renewing (a host that died); A waits and reclaims it after the TTL.
        b.renew_lease(1)
        b.lease_id = None  # B "dies" without releasing
        lease = a.acquire_lease("fleet run nightly", ttl_s=60, wait_s=30)
        assert lease["holder"] == "alice@runner1"
        assert a.release_lease()
        a.close()
        b.close()
    finally:
        agent.stop()


class SteppedClock:
    """A wall clock the test can step (as NTP or ``date -s`` steps a board's clock)."""

    def __init__(self):
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


def test_a_wall_clock_step_neither_ends_nor_stretches_a_lease():
    wall = SteppedClock()
    slot = RunSlot(wall_clock=wall)
    a = slot.acquire("a", "", 60)
    for step in (3600.0, -86400.0):
        wall.offset_s = step
        with pytest.raises(DeviceBusy, match=r"leased to a .*lease expires in (59|60) s"):
            slot.acquire("b", "", 60)
        assert abs(slot.lease().expires_unix_ms / 1000 - (wall() + 60)) < 2
    run = slot.start("r", "a", 30, lease_id=a.lease_id)
    wall.offset_s = 7200.0
    assert not run.cancel.is_set()
    assert abs(slot.lease().expires_unix_ms / 1000 - (wall() + 30)) < 2
    slot.finish(run)


@pytest.mark.slow
def test_leases_expire_on_the_monotonic_clock_whatever_the_wall_clock_does(tmp_path):
    """A +1 h step does not hand A's live lease to B; after a -1 day step a dead host's
    1 s lease still ends after 1 s. The lease shows the stepped wall time."""
    import grpc
    from edgequal.agent.service.server import build_server
    from edgequal.contract.keys import DeviceKey
    from edgequal.protos import edgequal_v1_pb2 as pb
    from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

    wall = SteppedClock()
    agent = build_server(
        "127.0.0.1:0", tmp_path / "state", tmp_path, key=DeviceKey.generate(), wall_clock=wall
    ).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            a = stub.AcquireLease(pb.AcquireLeaseRequest(holder="a", ttl_s=60), timeout=10)
            assert a.granted
            wall.offset_s = 3600.0  # the board's clock jumps an hour ahead
            with pytest.raises(grpc.RpcError) as e:
                stub.AcquireLease(pb.AcquireLeaseRequest(holder="b", ttl_s=60), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert re.search(r"leased to a .*lease expires in (59|60) s", e.value.details())
            shown = stub.Info(pb.InfoRequest(), timeout=10).lease
            assert shown.holder == "a"
            assert abs(shown.expires_unix_ms / 1000 - (wall() + 60)) < 5  # shown in wall time
            renewed = stub.RenewLease(pb.RenewLeaseRequest(lease_id=a.lease_id, ttl_s=60))
            assert renewed.lease.holder == "a"
            assert stub.ReleaseLease(pb.ReleaseLeaseRequest(lease_id=a.lease_id)).released

            dead = stub.AcquireLease(pb.AcquireLeaseRequest(holder="dead", ttl_s=1), timeout=10)
            assert dead.granted
            wall.offset_s = -86400.0  # and a day back; the holder never renews
            t0 = time.monotonic()
            b = stub.AcquireLease(
                pb.AcquireLeaseRequest(holder="b", ttl_s=60, wait_s=5), timeout=10
            )
            while not b.granted:
                b = stub.AcquireLease(
                    pb.AcquireLeaseRequest(holder="b", ttl_s=60, wait_s=5, ticket=b.ticket),
                    timeout=10,
                )
            assert 0.5 < time.monotonic() - t0 < 5
            assert stub.Info(pb.InfoRequest(), timeout=10).lease.holder == "b"
    finally:
        agent.stop(0)


def test_a_busy_device_says_when_its_run_is_likely_done_not_the_runs_upper_limit():
    from edgequal.contract.lease import Lease

    start = 1_000_000_000_000
    lease = Lease("r1", "alice@ci", start, start + 4 * 3600_000, "", start + 75_000)
    assert lease.describe(now_ms=start + 12_000) == (
        "run r1 for alice@ci is in progress (started 12 s ago; its plan times 75 s: "
        "likely free in about 63 s)"
    )
    assert lease.describe(now_ms=start + 80_000) == (
        "run r1 for alice@ci is in progress (started 80 s ago; its plan's 75 s of timed "
        "phases are over: likely free soon)"
    )
    unknown = Lease("r1", "alice@ci", start, start + 4 * 3600_000)
    assert "how long its plan takes is not known, at most 14388 s" in unknown.describe(
        now_ms=start + 12_000
    )
    assert Lease.from_json(lease.to_json()) == lease


def test_a_run_started_with_its_plans_length_shows_it():
    slot = RunSlot()
    run = slot.start("r1", "bob@ci", 3600, expected_s=30.0)
    lease = slot.lease()
    assert lease.expected_end_unix_ms - lease.started_unix_ms == 30_000
    with pytest.raises(DeviceBusy, match=r"its plan times 30 s: likely free in about (29|30) s"):
        slot.start("r2", "carol@ci", 3600)
    slot.finish(run)
