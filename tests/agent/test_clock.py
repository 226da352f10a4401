"""The device's clock and boot: a clock far off is flagged, a reboot mid-run is named.

- A device clock in 1970 (the clock a board without an RTC boots with) is the
  agent's own time source set to 1970, over the real gRPC server and the host's
  real qualify and verify: the report is flagged ``clock_unsynced`` and still
  verifies, because verification never reads device time.
- A reboot is a change of ``/proc/sys/kernel/random/boot_id`` under the agent's
  probe root between the run's start and the agent's next start; the agent
  process is killed mid-run (as a power cut does) and started again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

import grpc
import pytest
from edgequal.agent.clock import CLOCK_FLOOR_UNIX, MAX_OFFSET_S, check_clock
from edgequal.agent.run_request import RunRequest
from edgequal.agent.runs import Runs
from edgequal.agent.service.server import build_server
from edgequal.agent.service.store import ArtifactStore
from edgequal.contract.keys import DeviceKey, load_or_create_device_key
from edgequal.contract.nonce import new_nonce, nonce_time_unix_ms
from edgequal.contract.plan import Plan
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.qualify import qualify
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.transport.grpc import GrpcTransport
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

JAN_1970 = 86_400.0 * 3  # 1970-01-04: what a board without an RTC reads before NTP


def predicate_of(envelope: bytes) -> dict:
    """The predicate of an envelope (tests that check the signature use verify_envelope)."""
    return json.loads(base64.b64decode(json.loads(envelope)["payload"]))["predicate"]


# -- the clock check -------------------------------------------------------------


def test_the_nonce_carries_the_host_time_and_stays_random():
    a, b = new_nonce(1_800_000_000.5), new_nonce(1_800_000_000.5)
    assert a != b
    assert nonce_time_unix_ms(a) == 1_800_000_000_500
    assert len(a.split(".")[0]) == 32
    # Any other nonce (an older host, a hand-written plan) carries no time.
    for other in ("c0ffee", "ab" * 16, "ab" * 16 + ".", "ab" * 16 + ".x", None, 5):
        assert nonce_time_unix_ms(other) is None


def test_clock_check_against_the_host_time_and_the_floor():
    host = 1_800_000_000.0
    near = check_clock(host + MAX_OFFSET_S - 1, new_nonce(host))
    assert (near.synced, near.basis) == (True, "host_nonce")
    assert near.finding() is None
    behind = check_clock(JAN_1970, new_nonce(host))
    assert not behind.synced
    assert behind.offset_s == pytest.approx(JAN_1970 - host)
    finding = behind.finding()
    assert finding["kind"] == "clock_unsynced"
    assert (
        "1970-01-04T00:00:00Z" in finding["message"] and "behind the host's" in finding["message"]
    )
    ahead = check_clock(host + 2 * MAX_OFFSET_S, new_nonce(host))
    assert not ahead.synced and "ahead of the host's" in ahead.finding()["message"]
    # Without a host time only a clock before the floor is known to be wrong.
    assert check_clock(JAN_1970, "c0ffee").to_json() == {
        "device_unix_ms": int(JAN_1970 * 1000),
        "reference_unix_ms": None,
        "offset_s": None,
        "basis": "floor",
        "synced": False,
    }
    assert check_clock(CLOCK_FLOOR_UNIX + 1, "c0ffee").synced


# -- a device clock in 1970, end to end ------------------------------------------


@pytest.fixture
def agent_in_1970(tmp_path):
    """A real agent on 127.0.0.1 whose wall clock reads 1970 (its Runs' time source)."""
    state = tmp_path / "state"
    key = load_or_create_device_key(state)
    store = ArtifactStore(state / "artifacts")
    start = time.monotonic()
    runs = Runs(state, key, store, Path("/"), clock=lambda: JAN_1970 + time.monotonic() - start)
    agent = build_server("127.0.0.1:0", state, Path("/"), key=key, store=store, runs=runs)
    agent.start()
    try:
        yield agent, key
    finally:
        agent.stop(0)


@pytest.mark.slow
def test_a_device_clock_in_1970_is_flagged_and_the_report_still_verifies(
    agent_in_1970, example_models, golden_sets, quick_plan, tmp_path
):
    agent, key = agent_in_1970
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("board", f"grpc://127.0.0.1:{agent.port}", key.public_key_raw())
    with GrpcTransport(f"127.0.0.1:{agent.port}") as transport:
        outcome = qualify(
            transport,
            example_models["classifier"],
            golden_sets["classifier"],
            quick_plan(),
            known=known,
            device_name="board",
        )
    p = outcome.report.predicate
    # Measured as any other run: durations do not come from the wall clock.
    assert p["status"] in MEASURED_STATUSES
    assert p["results"]["latency"]["per_shape"][0]["summary"]["count"] >= 50
    assert p["finished_at"].startswith("1970-01-04T")
    clock = p["clock"]
    assert (clock["synced"], clock["basis"]) == (False, "host_nonce")
    assert clock["offset_s"] < -1.7e9
    assert clock["reference_unix_ms"] == nonce_time_unix_ms(p["nonce"])
    assert abs(clock["reference_unix_ms"] / 1000 - time.time()) < 3600
    flagged = [f for f in p["findings"] if f["kind"] == "clock_unsynced"]
    assert len(flagged) == 1 and "1970-01-04" in flagged[0]["message"]
    # Verification reads no device time: the same bytes verify again, later, anywhere.
    again = verify_envelope(
        outcome.envelope, known=known, device="board", expected_nonce=p["nonce"]
    )
    assert again.status == p["status"]


def test_a_synchronized_clock_is_not_flagged(tmp_path):
    runs = Runs(tmp_path / "state", DeviceKey.generate(), None, Path("/"))
    request = RunRequest("run-1", "a" * 64, None, Plan.from_json({}), new_nonce(), "m.onnx")
    clock = check_clock(runs.clock(), request.nonce)
    predicate = predicate_of(
        runs._sign_bounded(request, {"status": "passed", "clock": clock.to_json()})
    )
    assert predicate["clock"]["synced"] is True
    assert predicate["findings"] == []


# -- a reboot mid-run ------------------------------------------------------------


def _probe_root(tmp_path: Path, boot_id: str) -> Path:
    root = tmp_path / "root"
    boot = root / "proc" / "sys" / "kernel" / "random" / "boot_id"
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text(boot_id + "\n")
    return root


def _kill_group(agent) -> None:
    """SIGKILL the agent and its workers at once: what a power cut does to them."""
    try:
        os.killpg(agent.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    agent.proc.wait(timeout=30)


def _import(stub, path: Path) -> str:
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    stub.Push(
        iter([pb.PushChunk(digest=digest, offset=0, data=data, total_size=len(data))]), timeout=30
    )
    return digest


@pytest.mark.slow
def test_a_reboot_mid_run_is_signed_incomplete_device_reboot(
    tmp_path, local_agents, example_models, quick_plan
):
    state = tmp_path / "state"
    root = _probe_root(tmp_path, str(uuid.uuid4()))
    key = load_or_create_device_key(state)
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("board", "grpc://127.0.0.1:1", key.public_key_raw())
    agent = local_agents.serve(state, root=root, new_session=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            digest = _import(stub, example_models["classifier"])
            nonce = new_nonce()
            # Long enough to be cut mid-run on any machine; the test ends it at once.
            plan = quick_plan(
                latency_min_s=600.0, latency_min_runs=1_000_000, latency_max_runs=1_000_000
            )
            stream = stub.Qualify(
                pb.QualifyRequest(
                    model_digest=digest,
                    plan_json=json.dumps(plan),
                    nonce=nonce,
                    model_name="classifier.onnx",
                ),
                timeout=120,
            )
            run_id = next(stream).run_id
            for message in stream:  # wait until it measures
                event = json.loads(message.event_json or "{}")
                if event.get("phase") == "latency" and event.get("state") == "started":
                    break
            stream.cancel()
        # The power goes: the agent and its worker die at once; the board boots again.
        _kill_group(agent)
        (root / "proc/sys/kernel/random/boot_id").write_text(str(uuid.uuid4()) + "\n")
        agent = local_agents.serve(state, root=root, new_session=True)
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            assert not stub.Info(pb.InfoRequest(), timeout=10).busy
            envelope = stub.GetReport(pb.GetReportRequest(run_id=run_id), timeout=10).envelope
    finally:
        _kill_group(agent)
    report = verify_envelope(
        envelope, known=known, device="board", expected_nonce=nonce, expected_run_id=run_id
    )
    assert (report.status, report.predicate["reason"]) == ("incomplete", "device_reboot")
    (finding,) = report.predicate["findings"]
    assert finding["kind"] == "device_reboot"
    assert "restarted during the run" in finding["message"]


def test_an_agent_restart_without_a_reboot_is_not_called_one(tmp_path):
    """The same boot id at recovery: the agent stopped, the device did not restart."""
    root = _probe_root(tmp_path, "7d3f0e2c-0000-4000-8000-000000000001")
    key = DeviceKey.generate()
    state = tmp_path / "state"
    for run_id, boot_id in (
        ("run-same", "7d3f0e2c-0000-4000-8000-000000000001"),
        ("run-old", None),
    ):
        record = RunRequest(
            run_id, "a" * 64, None, Plan.from_json({}), new_nonce(), "m.onnx"
        ).to_json()
        if boot_id is not None:  # a run recorded by an agent before boot ids were kept
            record["boot_id"] = boot_id
        (state / "runs" / run_id).mkdir(parents=True)
        (state / "runs" / run_id / "request.json").write_text(json.dumps(record))
    runs = Runs(state, key, None, root)
    assert sorted(runs.recover_interrupted()) == ["run-old", "run-same"]
    for run_id in ("run-same", "run-old"):
        predicate = predicate_of(runs.read_report(run_id))
        assert (predicate["status"], predicate["reason"]) == (
            "incomplete",
            "the agent stopped during the run",
        )
        assert predicate["clock"]["basis"] == "floor"


def test_partial_uploads_written_while_the_clock_was_wrong_are_not_taken_for_stale(tmp_path):
    """A board that uploaded in "1970" and then synced its clock keeps its partial uploads."""
    store = ArtifactStore(tmp_path / "artifacts")
    now = time.time()
    stamped = {"a" * 64: JAN_1970, "b" * 64: now - 8 * 86_400, "c" * 64: now + 30 * 86_400}
    for digest, mtime in stamped.items():
        part = store.partial_path(digest)
        part.write_bytes(b"x" * 10)
        os.utime(part, (mtime, mtime))
    # While the clock itself reads 1970, no age can be trusted: nothing is removed.
    assert store.remove_stale_partials(now_s=JAN_1970) == []
    assert store.remove_stale_partials(now_s=now) == ["b" * 64 + ".part"]
    for digest in ("a" * 64, "c" * 64):  # their age starts now
        assert abs(store.partial_path(digest).stat().st_mtime - now) < 5
        assert store.committed_offset(digest) == 10
