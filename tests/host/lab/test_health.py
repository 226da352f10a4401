"""``fleet health``: the verdict rules on literal inputs, and real agents on 127.0.0.1 where a
board drifts, is skipped by the next fleet run, passes again, and finally goes away."""

from __future__ import annotations

import json

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.lab.health import BoardHealth, HealthState, judge, temp_at_rest_c

FP = {"kernel": "6.1.0", "os_release": "Debian 12", "architecture": "x86_64", "boot_id": "a"}
RUNTIME = {"runtime": "onnxruntime", "version": "1.20.0"}
INFO = {
    "agent_version": "0.9.0",
    "key_fingerprint": "SHA256:abc",
    "limits": {"quota_bytes": 0, "max_artifact_bytes": 2**30},
    "runtimes": [{"name": "onnxruntime", "available": True, "version": "1.20.0"}],
}


def predicate(status="passed", synced=True, **fp) -> dict:
    return {
        "run_id": "r1",
        "status": status,
        "fingerprint": {**FP, **fp},
        "clock": {"synced": synced, "offset_s": 0.4 if synced else -3600.0},
        "results": {"runtime": RUNTIME},
    }


def healthy_before() -> BoardHealth:
    return BoardHealth("b", True, 0.0, fingerprint=dict(FP), runtime=dict(RUNTIME))


def test_a_passing_board_is_healthy_and_a_reboot_is_no_drift():
    h = judge(
        "b",
        state="passed",
        error=None,
        predicate=predicate(boot_id="b"),
        info=INFO,
        last_healthy=healthy_before(),
        now=5.0,
    )
    assert h.healthy and h.reasons == [] and h.drift == []
    assert (h.agent_version, h.run_id, h.checked_unix) == ("0.9.0", "r1", 5.0)
    assert h.disk == {"quota_bytes": 0, "max_artifact_bytes": 2**30, "free_bytes": None}
    assert h.temp_at_rest_c == "absent"
    # An inconclusive check (a busy board) still ran the model: healthy.
    assert "inconclusive" in MEASURED_STATUSES
    assert judge(
        "b",
        state="inconclusive",
        error=None,
        predicate=predicate("inconclusive"),
        info=INFO,
        last_healthy=None,
    ).healthy


def test_failure_unsynced_clock_and_drift_are_unhealthy():
    gone = judge(
        "b", state="error", error="no answer", predicate=None, info=None, last_healthy=None
    )
    assert not gone.healthy and gone.reasons == ["check run: error: no answer"]
    failed = judge(
        "b", state="failed", error=None, predicate=predicate("failed"), info=INFO, last_healthy=None
    )
    assert not failed.healthy
    clock = judge(
        "b",
        state="passed",
        error=None,
        predicate=predicate(synced=False),
        info=INFO,
        last_healthy=None,
    )
    assert clock.reasons == ["clock unsynced (offset -3600.0 s)"]
    drifted = judge(
        "b",
        state="passed",
        error=None,
        predicate=predicate(kernel="6.6.31"),
        info=INFO,
        last_healthy=healthy_before(),
    )
    assert not drifted.healthy
    assert drifted.reasons == ["drifted since the last healthy check: kernel: 6.1.0 → 6.6.31"]
    newer = {**INFO, "runtimes": [{"name": "onnxruntime", "available": True, "version": "1.21"}]}
    runtime = judge(
        "b",
        state="passed",
        error=None,
        predicate=predicate(),
        info=newer,
        last_healthy=healthy_before(),
    )
    assert [c["field"] for c in runtime.drift] == ["runtime.version"] and not runtime.healthy
    accepted = judge(
        "b",
        state="passed",
        error=None,
        predicate=predicate(kernel="6.6.31"),
        info=INFO,
        last_healthy=healthy_before(),
        accept=True,
    )
    assert accepted.healthy and [c["field"] for c in accepted.drift] == ["kernel"]


def test_temperature_at_rest_and_the_state_round_trip(tmp_path):
    assert temp_at_rest_c({"thermal": {"zones": [{"temp_c": 41.5}, {"temp_c": 47.0}]}}) == 47.0
    assert temp_at_rest_c({"kernel": "6.1"}) == "absent"
    state = HealthState()
    bad = BoardHealth("b", False, 1.0, reasons=["check run: error: gone"])
    state.last["b"] = bad
    state.healthy["a"] = state.last["a"] = healthy_before()
    path = tmp_path / "h" / "lab.json"
    state.save(path)
    again = HealthState.load(path)
    assert again == state
    assert again.unhealthy() == {"b": "check run: error: gone"}
    drifted = BoardHealth("c", False, 1.0, reasons=["drifted since the last healthy check: x"])
    state.last["c"] = drifted
    assert sorted(state.unhealthy()) == ["b", "c"]
    assert state.unhealthy(drift=False) == {"b": "check run: error: gone"}  # requalify runs c
    assert HealthState.load(tmp_path / "none.json") == HealthState()


@pytest.mark.slow
def test_fleet_health_on_real_agents(tmp_path, local_agents, example_models, short_plan, capsys):
    from edgequal.host.devices.resolve import trust_device
    from edgequal.host.devices.trust import KnownDevices

    agents = local_agents.start_agents(tmp_path / "agents", ["dev-0", "dev-1"])
    try:
        for i, a in enumerate(agents):
            trust_device(KnownDevices(), f"dev-{i}", a.address)
        lab = tmp_path / "lab.toml"
        lab.write_text(
            '[lab]\nname = "health-lab"\n'
            + "".join(f'[devices.dev-{i}]\naddress = "{a.address}"\n' for i, a in enumerate(agents))
        )
        models = tmp_path / "models.toml"
        models.write_text(f'[models.micro]\npath = "{example_models["micro"]}"\n')
        state_file = tmp_path / "health.json"
        # No retries: a check a busy machine makes inconclusive is healthy all the same.
        health = ["fleet", "health", str(lab), "--health-file", str(state_file), "--retries", "0"]
        capsys.readouterr()

        # Both boards run the micro model: healthy, with what was read from each.
        assert edgequal_main([*health, "--out", str(tmp_path / "h1"), "--json"]) == 0
        checks = {c["device"]: c for c in json.loads(capsys.readouterr().out)}
        assert sorted(checks) == ["dev-0", "dev-1"]
        for c in checks.values():
            assert c["healthy"] and c["status"] in MEASURED_STATUSES, c
            assert c["agent_version"] and c["key_fingerprint"].startswith("SHA256:")
            assert c["clock"]["synced"] is True and c["clock"]["basis"] == "host_nonce"
            assert c["disk"]["max_artifact_bytes"] > 0
            assert c["temp_at_rest_c"] == "absent" or isinstance(c["temp_at_rest_c"], float)
            assert c["fingerprint"]["kernel"] and c["runtime"]["runtime"] == "onnxruntime"

        # dev-1's last healthy check had another kernel: it drifted, and is unhealthy.
        data = json.loads(state_file.read_text())
        data["healthy"]["dev-1"]["fingerprint"]["kernel"] = "5.10.0-old"
        state_file.write_text(json.dumps(data))
        assert edgequal_main([*health, "--out", str(tmp_path / "h2")]) == 1
        assert "UNHEALTHY" in capsys.readouterr().out
        assert list(HealthState.load(state_file).unhealthy()) == ["dev-1"]

        # A fleet run skips it, and runs on dev-0.
        run = ["fleet", "run", str(lab), "--models", str(models), "--no-record", "--no-pages"]
        run += ["--health-file", str(state_file), "--sustain", "0", "--retries", "0"]
        run += short_plan  # reports are needed, not the preset's 3 cold loads and 3 s of latency
        checked = len(agents[1].run_records())  # its health checks (and their retries)
        assert edgequal_main([*run, "--out", str(tmp_path / "r1")]) == 3
        index = json.loads((tmp_path / "r1" / "index.json").read_text())
        states = {r["device"]: r for r in index["runs"]}
        assert states["dev-1"]["state"] == "skipped"
        assert "unhealthy (drifted since the last healthy check: kernel" in states["dev-1"]["error"]
        assert states["dev-0"]["state"] in MEASURED_STATUSES
        assert len(agents[1].run_records()) == checked  # the fleet run measured nothing there

        # The kernel change is accepted: dev-1 passes again and the next fleet run uses it.
        assert edgequal_main([*health, "--out", str(tmp_path / "h3"), "--accept"]) == 0
        assert HealthState.load(state_file).unhealthy() == {}
        rc = edgequal_main([*run, "--out", str(tmp_path / "r2")])
        index = json.loads((tmp_path / "r2" / "index.json").read_text())
        assert {r["state"] for r in index["runs"]} <= set(MEASURED_STATUSES), index
        assert rc in (0, 1)  # 1 only when the busy machine made a run inconclusive

        # A board that goes away fails its check.
        agents[1].stop()
        assert edgequal_main([*health, "--out", str(tmp_path / "h4")]) == 1
        state = HealthState.load(state_file)
        assert list(state.unhealthy()) == ["dev-1"]
        assert state.last["dev-1"].reasons[0].startswith("check run: error")
        assert state.healthy["dev-1"].healthy  # the drift reference stays the last healthy one
    finally:
        for a in agents:
            a.stop()
