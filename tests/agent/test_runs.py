"""Runs on the device: signing, storing, a full disk, recovery after a restart, report size.

Real measurements (the shortened quick plan, real runtimes, real worker processes)
where the defect is in what happens around a run; a full disk is a real tmpfs of
a few MiB mounted for the test (skipped, saying so, where mounting is refused).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from edgequal.agent.errors import BadInput, QuotaExceeded
from edgequal.agent.keys import DeviceKey
from edgequal.agent.report.signing import MEASURED_STATUSES, PAYLOAD_TYPE, pae, validate_statement
from edgequal.agent.runs import (
    RESERVE_FILE,
    UNRECOVERABLE_DIR,
    RunRequest,
    Runs,
    check_plan_bounds,
    check_run_id,
    sign_report,
)
from edgequal.agent.service.server import build_server, serve
from edgequal.agent.service.store import ArtifactStore
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc


def statement_of(envelope: bytes, key: DeviceKey) -> dict:
    """The verified statement of an envelope signed by ``key`` (raises if it does not verify)."""
    env = json.loads(envelope)
    payload = base64.b64decode(env["payload"])
    signature = base64.b64decode(env["signatures"][0]["sig"])
    Ed25519PublicKey.from_public_bytes(key.public_key_raw()).verify(
        signature, pae(PAYLOAD_TYPE, payload)
    )
    statement = json.loads(payload)
    validate_statement(statement)
    return statement


def import_artifact(store: ArtifactStore, path: Path) -> str:
    """Store a file the way a Push does; return its digest."""
    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    with store.open_upload(digest, len(data)) as upload:
        if not upload.complete:
            upload.write(0, data)
            upload.commit()
    return digest


@pytest.fixture
def key():
    return DeviceKey.generate()


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 4 MiB (tmpfs), so a full disk is a real ENOSPC."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; return the filler file."""
    filler = directory / f"filler-{uuid.uuid4().hex[:8]}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    block = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError:
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def leftovers(state_dir: Path) -> list[str]:
    """Temporary files left anywhere in the state directory."""
    return sorted(str(p.relative_to(state_dir)) for p in state_dir.rglob("*.tmp*"))


def request_for(store, model, golden=None, plan=None, run_id="run-1", **names) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        model_digest=import_artifact(store, model),
        golden_digest=import_artifact(store, golden) if golden else None,
        plan=plan or {},
        nonce="nonce-" + run_id,
        model_name=names.get("model_name", Path(model).name),
        golden_name=names.get("golden_name", Path(golden).name if golden else None),
    )


# -- run ids and plan bounds ---------------------------------------------------


def test_one_run_id_rule():
    for good in ("20261130T142333Z-0a1b2c3d", "run-1", "Run_2.b"):
        assert check_run_id(good) == good
    for bad in ("", "../device_key.pem", ".hidden", "a/b", "x" * 65, "a:b", None, 7):
        with pytest.raises(BadInput, match="not a run id"):
            check_run_id(bad)


def test_plan_bounds_name_the_field():
    check_plan_bounds({"latency_max_runs": 100_000, "sustain_s": 600}, max_run_s=3600)
    with pytest.raises(BadInput, match="latency_max_runs 2e\\+07 is over this agent's limit"):
        check_plan_bounds({"latency_max_runs": 20_000_000}, max_run_s=3600)
    with pytest.raises(BadInput, match="latency_min_s 150 s is longer than a run may last"):
        check_plan_bounds({"latency_min_s": 150}, max_run_s=100)


# -- defect 1: one file name for model and golden set ------------------------------


def test_same_file_name_for_model_and_golden_set_is_signed(key):
    request = RunRequest("run-1", "a" * 64, "b" * 64, {}, "n", "x.onnx", "x.onnx")
    statement = statement_of(sign_report(key, request, {"status": "passed"}), key)
    assert statement["subject"] == [
        {"name": "x.onnx", "digest": {"sha256": "a" * 64}, "annotations": {"role": "model"}},
        {
            "name": "golden/x.onnx",
            "digest": {"sha256": "b" * 64},
            "annotations": {"role": "golden"},
        },
    ]


@pytest.mark.slow
def test_qualify_with_one_name_for_both_inputs_then_the_agent_restarts(
    tmp_path, example_models, golden_sets, quick_plan
):
    """The request that bricked the agent: signed, stored, and a restart is clean."""
    state = tmp_path / "state"
    key = DeviceKey.generate()
    agent = serve("127.0.0.1:0", state, Path("/"), key=key)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            store = agent.service.store
            model = import_artifact(store, example_models["classifier"])
            golden = import_artifact(store, golden_sets["classifier"])
            request = pb.QualifyRequest(
                model_digest=model,
                golden_digest=golden,
                plan_json=json.dumps(quick_plan()),
                nonce="n-same-name",
                model_name="x.onnx",
                golden_name="x.onnx",
            )
            messages = list(stub.Qualify(request, timeout=120))
            statement = statement_of(messages[-1].envelope, key)
            assert statement["predicate"]["status"] in MEASURED_STATUSES
            assert [s["name"] for s in statement["subject"]] == ["x.onnx", "golden/x.onnx"]
            assert not stub.Info(pb.InfoRequest(), timeout=5).busy
    finally:
        agent.stop(0)
    assert not (state / "runs").exists() or not any((state / "runs").iterdir())
    again = serve("127.0.0.1:0", state, Path("/"), key=key)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{again.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            assert stub.Info(pb.InfoRequest(), timeout=5).protocol == "edgequal.v1"
            got = stub.GetReport(pb.GetReportRequest(run_id=messages[0].run_id), timeout=5)
            assert got.envelope == messages[-1].envelope
    finally:
        again.stop(0)


def test_recovery_never_stops_the_agent_from_starting(tmp_path, key):
    state = tmp_path / "state"
    runs_dir = state / "runs"
    good = RunRequest("run-good", "a" * 64, None, {}, "n1", "m.onnx")
    unsignable = RunRequest("run-bad", "not-a-digest", None, {}, "n2", "m.onnx")
    for request in (good, unsignable):
        (runs_dir / request.run_id).mkdir(parents=True)
        (runs_dir / request.run_id / "request.json").write_text(json.dumps(vars(request)))
    (runs_dir / "run-garbage").mkdir()
    (runs_dir / "run-garbage" / "request.json").write_bytes(b"\xff{not json")
    earlier = Runs(state, key, None)
    earlier.report_path("run-old").parent.mkdir(parents=True)
    earlier.report_path("run-old").write_bytes(
        sign_report(key, RunRequest("run-old", "c" * 64, None, {}, "n0"), {"status": "passed"})
    )

    for _ in range(2):  # and a second restart finds nothing left to trip on
        agent = serve("127.0.0.1:0", state, Path("/"), key=key)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
                stub = pb_grpc.AgentStub(channel)
                assert not stub.Info(pb.InfoRequest(), timeout=5).busy
                envelope = stub.GetReport(pb.GetReportRequest(run_id="run-good"), timeout=5)
                p = statement_of(envelope.envelope, key)["predicate"]
                assert (p["status"], p["reason"]) == (
                    "incomplete",
                    "the agent stopped during the run",
                )
                old = stub.GetReport(pb.GetReportRequest(run_id="run-old"), timeout=5)
                assert statement_of(old.envelope, key)["predicate"]["status"] == "passed"
        finally:
            agent.stop(0)
        assert sorted(os.listdir(state / UNRECOVERABLE_DIR)) == ["run-bad", "run-garbage"]
        assert list(runs_dir.iterdir()) == []
    # What was moved aside is kept as it was, for a person to look at.
    kept = json.loads((state / UNRECOVERABLE_DIR / "run-bad" / "request.json").read_text())
    assert kept["model_digest"] == "not-a-digest"


# -- defect 2: a full disk ---------------------------------------------------------


@pytest.mark.slow
def test_disk_full_during_a_run_still_stores_its_report(
    small_disk, store, key, example_models, quick_plan
):
    runs = Runs(small_disk, key, store, reserve_bytes=1024 * 1024)
    request = request_for(store, example_models["micro"], plan=quick_plan())
    filled = []

    def on_event(event):
        if not filled:
            filled.append(fill(small_disk))  # the disk fills while the run measures

    envelope = runs.execute(request, on_event=on_event)
    statement = statement_of(envelope, key)
    assert statement["predicate"]["status"] in MEASURED_STATUSES
    assert runs.report_path("run-1").read_bytes() == envelope  # on disk, not only returned
    assert runs.read_report("run-1") == envelope
    assert not (small_disk / RESERVE_FILE).exists()  # spent on the report
    assert leftovers(small_disk) == [] and not (small_disk / "runs" / "run-1").exists()

    # No reserve and no room for one: the next run is refused before it starts.
    with pytest.raises(QuotaExceeded, match="device disk is full"):
        runs.execute(request_for(store, example_models["micro"], run_id="run-2"))
    assert leftovers(small_disk) == [] and not (small_disk / "runs" / "run-2").exists()
    filled[0].unlink()
    second = runs.execute(
        request_for(store, example_models["micro"], plan=quick_plan(), run_id="run-2")
    )
    assert statement_of(second, key)["predicate"]["run_id"] == "run-2"
    assert (small_disk / RESERVE_FILE).stat().st_size == 1024 * 1024  # back in place
    assert runs.read_report("run-1") == envelope  # nothing lost


@pytest.mark.slow
def test_a_report_the_full_disk_cannot_take_is_kept_and_its_true_state_reported(
    small_disk, store, key, example_models, quick_plan
):
    # A reserve far smaller than the report: writing it fails even after the reserve goes.
    runs = Runs(small_disk, key, store, reserve_bytes=4096)
    request = request_for(store, example_models["micro"], plan=quick_plan())
    filled = []
    envelope = runs.execute(request, on_event=lambda e: filled or filled.append(fill(small_disk)))
    status = statement_of(envelope, key)["predicate"]["status"]
    assert not runs.report_path("run-1").exists()
    assert runs.read_report("run-1") == envelope  # served from memory, not "in progress"
    assert leftovers(small_disk) == []

    # The agent stops before the disk has room: a restart says what really happened.
    restarted = Runs(small_disk, key, store, reserve_bytes=4096)
    filled[0].unlink()
    assert restarted.recover_interrupted() == ["run-1"]
    p = statement_of(restarted.read_report("run-1"), key)["predicate"]
    assert p["status"] == "incomplete"
    assert p["reason"].startswith(f"the run finished ({status}) but its report of {len(envelope)}")
    assert "No space left on device" in p["reason"]


@pytest.mark.slow
def test_an_unsaved_report_is_written_once_the_disk_has_room(
    small_disk, store, key, example_models, quick_plan
):
    runs = Runs(small_disk, key, store, reserve_bytes=4096)
    filled = []
    envelope = runs.execute(
        request_for(store, example_models["micro"], plan=quick_plan()),
        on_event=lambda e: filled or filled.append(fill(small_disk)),
    )
    assert not runs.report_path("run-1").exists()
    filled[0].unlink()
    assert runs.read_report("run-1") == envelope  # retried on read
    assert runs.report_path("run-1").read_bytes() == envelope
    assert not (small_disk / "runs" / "run-1").exists()


@pytest.mark.slow
def test_disk_full_at_run_start_over_grpc_is_resource_exhausted(
    small_disk, tmp_path, example_models, quick_plan
):
    key = DeviceKey.generate()
    store = ArtifactStore(tmp_path / "artifacts")
    runs = Runs(small_disk, key, store, reserve_bytes=64 * 1024)
    agent = build_server(
        "127.0.0.1:0", tmp_path / "state", Path("/"), key=key, store=store, runs=runs
    ).start()
    try:
        digest = import_artifact(store, example_models["micro"])
        filler = fill(small_disk)
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            request = pb.QualifyRequest(
                model_digest=digest, plan_json=json.dumps(quick_plan()), nonce="n"
            )
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Qualify(request, timeout=60))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert e.value.details().startswith("device disk is full")
            assert dict(e.value.trailing_metadata())["edgequal-error"] == "QuotaExceeded"
            assert not stub.Info(pb.InfoRequest(), timeout=5).busy
            assert leftovers(small_disk) == []
            assert not (small_disk / "runs").exists() or not any((small_disk / "runs").iterdir())
            filler.unlink()
            messages = list(stub.Qualify(request, timeout=120))
            status = statement_of(messages[-1].envelope, key)["predicate"]["status"]
            assert status in MEASURED_STATUSES
    finally:
        agent.stop(0)


# -- defect 4: a report too large to fetch ------------------------------------------


@pytest.mark.slow
def test_an_oversized_report_keeps_its_statistics_and_drops_raw_samples(
    tmp_path, store, key, example_models, quick_plan
):
    runs = Runs(tmp_path / "state", key, store, max_report_bytes=20_000)
    envelope = runs.execute(request_for(store, example_models["micro"], plan=quick_plan()))
    p = statement_of(envelope, key)["predicate"]
    assert "samples_ns_b64" not in json.dumps(p)
    assert p["results"]["latency"]["per_shape"][0]["summary"]["count"] >= 50
    omitted = [f for f in p["findings"] if f["kind"] == "raw_samples_omitted"]
    assert omitted and "over this agent's limit of 20000" in omitted[0]["message"]
    assert runs.read_report("run-1") == envelope


def test_a_plan_asking_for_a_report_too_large_is_refused_before_the_device_is_taken(
    tmp_path, example_models
):
    key = DeviceKey.generate()
    agent = build_server("127.0.0.1:0", tmp_path / "state", Path("/"), key=key).start()
    try:
        digest = import_artifact(agent.service.store, example_models["micro"])
        plan = {"latency_min_s": 150, "latency_max_runs": 20_000_000}
        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            stub = pb_grpc.AgentStub(channel)
            request = pb.QualifyRequest(model_digest=digest, plan_json=json.dumps(plan), nonce="n")
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Qualify(request, timeout=10))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "latency_max_runs 2e+07 is over this agent's limit" in e.value.details()
            assert not stub.Info(pb.InfoRequest(), timeout=5).busy
    finally:
        agent.stop(0)


@pytest.mark.slow
def test_info_and_stat_keep_answering_while_a_qualification_runs(
    tmp_path, example_models, quick_plan
):
    """Soak: 20 callers keep asking Info and Stat during a real run; no call fails."""
    import threading

    key = DeviceKey.generate()
    agent = build_server("127.0.0.1:0", tmp_path / "state", Path("/"), key=key).start()
    failures, calls = [], []
    stop = threading.Event()
    try:
        digest = import_artifact(agent.service.store, example_models["micro"])

        def hammer(channel):
            stub = pb_grpc.AgentStub(channel)
            while not stop.is_set():
                try:
                    stub.Info(pb.InfoRequest(), timeout=10)
                    stub.Stat(pb.StatRequest(digest=digest), timeout=10)
                    calls.append(1)
                except grpc.RpcError as e:
                    failures.append(f"{e.code()}: {e.details()}")
                stop.wait(0.05)

        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            callers = [threading.Thread(target=hammer, args=(channel,)) for _ in range(20)]
            for t in callers:
                t.start()
            request = pb.QualifyRequest(
                model_digest=digest, plan_json=json.dumps(quick_plan()), nonce="n-soak"
            )
            messages = list(pb_grpc.AgentStub(channel).Qualify(request, timeout=120))
            stop.set()
            for t in callers:
                t.join(30)
        status = statement_of(messages[-1].envelope, key)["predicate"]["status"]
        assert status in MEASURED_STATUSES
        assert failures == [] and len(calls) >= 20
    finally:
        stop.set()
        agent.stop(0)
