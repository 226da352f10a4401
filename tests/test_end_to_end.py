"""The main job end to end: host -> gRPC on 127.0.0.1 -> agent -> worker -> signed report -> verify.

Real agent processes (``edgequal-agent serve``), real runtimes, real models.
"""

from __future__ import annotations

import shutil
import threading
import time

import psutil
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.plan import make_plan
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.qualify import pin_device_key, qualify
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import TransportError, UsageError
from edgequal.host.transport import QualifyRequest
from edgequal.host.transport.local import LocalTransport

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow


@pytest.fixture
def local_agent():
    transport = LocalTransport()
    known = KnownDevices()
    pin_device_key(transport, known, "local", "local")
    yield transport, known
    transport.close()


@pytest.mark.parametrize("name", ["classifier", "classifier_tflite"])
def test_qualify_over_grpc_gives_a_verified_signed_report(
    name, local_agent, example_models, golden_sets, tmp_path, quick_plan
):
    transport, known = local_agent
    out = tmp_path / "r.json"
    events = []
    result = qualify(
        transport,
        example_models[name],
        golden_sets[name],
        quick_plan(),
        known=known,
        device_name="local",
        on_event=events.append,
        out=out,
    )
    p = result.report.predicate
    assert p["status"] in MEASURED_STATUSES
    assert result.report.device_name == "local"
    assert {s["name"] for s in result.report.subjects} == {
        example_models[name].name,
        golden_sets[name].name,
    }
    assert p["results"]["drift"]["passed"] is True
    assert p["results"]["latency"]["per_shape"][0]["summary"]["count"] >= 50
    # The timed calls' outputs were checked on the device (every runtime), and signed.
    timed = p["results"]["timed_outputs"]["latency"]
    assert timed["calls"] == p["results"]["latency"]["per_shape"][0]["summary"]["count"]
    assert timed["checked"] >= 1 and timed["mismatches"] == 0
    phases = [
        e["phase"] for e in events if e.get("type") == "phase" and e.get("state") == "started"
    ]
    assert phases[:4] == ["upload", "fingerprint", "cold_load", "latency"]
    assert (
        result.bytes_sent == example_models[name].stat().st_size + golden_sets[name].stat().st_size
    )
    # The stored report is the same bytes, fetched by run id.
    assert transport.get_report(p["run_id"]) == out.read_bytes()
    # Pushing again transfers nothing: the agent holds both digests.
    again = qualify(
        transport,
        example_models[name],
        golden_sets[name],
        quick_plan(),
        known=known,
        device_name="local",
    )
    assert again.bytes_sent == 0
    # The bytes verify anywhere: copied to another directory, through the CLI.
    elsewhere = tmp_path / "copied" / "report.json"
    elsewhere.parent.mkdir()
    shutil.copy(out, elsewhere)
    assert (
        edgequal_main(
            ["verify", str(elsewhere), "--device", "local", "--artifact", str(example_models[name])]
        )
        == 0
    )


def test_a_changed_byte_or_another_key_fails_verify(
    local_agent, example_models, golden_sets, tmp_path, capsys, quick_plan
):
    transport, known = local_agent
    out = tmp_path / "r.json"
    qualify(
        transport,
        example_models["micro"],
        None,
        quick_plan(),
        known=known,
        device_name="local",
        out=out,
    )
    data = bytearray(out.read_bytes())
    i = data.index(b'"payload":"') + 40
    data[i] = ord("A") if data[i] != ord("A") else ord("B")
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    assert edgequal_main(["verify", str(bad), "--device", "local"]) == 1
    assert "signature" in capsys.readouterr().err
    # An artifact that is not a subject of the report.
    assert (
        edgequal_main(
            ["verify", str(out), "--device", "local", "--artifact", str(example_models["mid"])]
        )
        == 1
    )


def test_worker_crash_is_a_signed_failed_report_and_the_agent_keeps_serving(
    local_agent, example_models, tmp_path, quick_plan, local_agents
):
    transport, known = local_agent
    agent = psutil.Process(transport._proc.pid)
    plan = quick_plan(latency_min_s=20.0, latency_min_runs=10)
    killed = []

    def kill_the_latency_worker(event: dict) -> None:
        # Killed when the device says the latency worker warms up: its timed loop has 20 s
        # to run, so the kill lands mid-phase however slowly a busy machine runs the
        # phases before it (a kill timed by the wall clock can hit a worker that already
        # handed over its result).
        if killed or (event.get("phase"), event.get("message")) != ("latency", "warmup"):
            return
        workers = local_agents.worker_processes(agent)
        newest = max(workers, key=lambda child: child.create_time())
        newest.kill()
        killed.append(newest.pid)

    result = qualify(
        transport,
        example_models["mid"],
        None,
        plan,
        known=known,
        device_name="local",
        on_event=kill_the_latency_worker,
    )
    p = result.report.predicate
    assert killed
    assert p["status"] == "failed"
    assert "SIGKILL" in p["reason"]
    assert p["findings"][0]["cause"] == "signal"
    assert p["findings"][0]["phase"] == "latency"
    assert "cold_load" in p["results"]  # the phases before it were measured
    # The same agent qualifies the next model.
    ok = qualify(
        transport,
        example_models["micro"],
        None,
        quick_plan(),
        known=known,
        device_name="local",
    )
    assert ok.report.status in MEASURED_STATUSES


def test_two_hosts_at_once_one_is_told_the_device_is_busy(local_agent, example_models, quick_plan):
    transport, known = local_agent
    from edgequal.host.transport.grpc import GrpcTransport

    second = GrpcTransport(transport.target)
    long_plan = quick_plan(latency_min_s=4.0)
    first_result = {}
    accepted = threading.Event()  # set when the device sends the run id

    def first():
        first_result["r"] = qualify(
            transport,
            example_models["micro"],
            None,
            long_plan,
            known=known,
            device_name="local",
            on_event=lambda event: event.get("type") == "run" and accepted.set(),
        )

    t = threading.Thread(target=first)
    t.start()
    assert accepted.wait(60), "the first run was never accepted"
    from edgequal.contract.artifacts import file_sha256

    digest = file_sha256(example_models["micro"])
    with pytest.raises(TransportError, match="device busy") as e:
        second.qualify(
            QualifyRequest(
                model_digest=digest, plan=long_plan, nonce="n" * 32, holder="ci-runner-2"
            ),
            lambda e: None,
        )
    assert f"run {transport.last_run_id}" in str(e.value)
    t.join()
    second.close()
    assert first_result["r"].report.status in MEASURED_STATUSES


def test_qualify_for_a_digest_never_pushed_is_bad_input(local_agent):
    transport, _ = local_agent
    with pytest.raises(UsageError, match="0" * 64):
        transport.qualify(
            QualifyRequest(
                model_digest="0" * 64, plan=make_plan("quick").to_json(), nonce="ab" * 16
            ),
            lambda e: None,
        )


def test_a_device_that_does_not_answer_is_exit_3_with_its_address(capsys):
    t0 = time.monotonic()
    rc = edgequal_main(["devices", "trust", "lab1", "grpc://127.0.0.1:9"])
    assert rc == 3
    assert time.monotonic() - t0 < 30
    assert "127.0.0.1:9" in capsys.readouterr().err


def test_agent_killed_mid_run_signs_it_incomplete_on_restart(example_models, tmp_path, quick_plan):
    from edgequal.host.devices.verify import verify_envelope

    known = KnownDevices()
    transport = LocalTransport()
    pin_device_key(transport, known, "local", "local")
    plan = quick_plan(latency_min_s=30.0)
    errors = []
    measuring = threading.Event()

    def on_event(event: dict) -> None:
        if event.get("type") == "phase" and event.get("phase") == "latency":
            measuring.set()

    def run():
        try:
            qualify(
                transport, example_models["micro"], None, plan, known=known,
                device_name="local", on_event=on_event,
            )  # fmt: skip
        except TransportError as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    # Killed in its 30 s of timed latency, however long a busy machine took to get there:
    # the worker that times it is running then.
    assert measuring.wait(120), "the run never reached its latency phase"
    run_id = transport.last_run_id
    assert run_id
    # The phase event comes as its worker is being started: wait until it is there.
    deadline = time.monotonic() + 60
    while not (workers := psutil.Process(transport._proc.pid).children(recursive=True)):
        assert time.monotonic() < deadline, "the latency worker never started"
        time.sleep(0.05)
    transport._proc.kill()  # the agent dies with the run in progress
    t.join(timeout=60)
    assert errors, "the host must be told the stream broke"
    # The worker dies with the agent (PR_SET_PDEATHSIG): nothing is left running to
    # disturb the next measurement.
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert workers and not alive
    transport.close()
    with LocalTransport() as restarted:
        envelope = restarted.get_report(run_id)
    report = verify_envelope(envelope, known=known, device="local", expected_run_id=run_id)
    assert report.status == "incomplete"
    assert report.predicate["reason"] == "the agent stopped during the run"
