"""Labs on labgrid: a real ``labgrid-coordinator`` and ``labgrid-exporter`` on loopback whose
places hold real local agents (a ``NetworkService`` per place, its address the agent's URL);
``labgrid-client`` locks a place from outside, as a person at the bench would."""

from __future__ import annotations

import json
import threading
import time

import pytest
from edgequal.host.cli.main import main as edgequal_main
from edgequal.host.devices.resolve import trust_device
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.lab.fleet import FleetOptions, FleetRunner
from edgequal.host.lab.inventory import InventoryError, load_lab, load_models
from edgequal.host.lab.labgrid_places import resolve_lab

pytest.importorskip("labgrid", reason="the labgrid extra")

PLAN = {
    "threads": 1,
    "cold_runs": 1,
    "latency_min_s": 0.1,
    "warmup_min_s": 0.1,
    "warmup_max_s": 0.3,
    "sustain_s": 0.0,
}


@pytest.fixture
def bench(tmp_path, local_agents, test_helper):
    """Two agents behind places pi-a and pi-b (tag board=pi), and pi-c with no agent."""
    helper = test_helper("labgrid_lab")
    agents = local_agents.start_agents(tmp_path / "agents", ["pi-a", "pi-b"])
    known = KnownDevices()
    for agent, name in zip(agents, ("pi-a", "pi-b")):
        trust_device(known, name, agent.address)
    groups = {
        name: {"NetworkService": {"address": a.address, "username": "edgequal", "port": a.port}}
        for name, a in zip(("pi-a", "pi-b"), agents)
    }
    groups["pi-c"] = {"NetworkService": {"address": "127.0.0.1", "username": "root"}}
    lab = helper.start_lab(
        tmp_path / "labgrid", groups, {g: {"board": "pi"} for g in ("pi-a", "pi-b", "pi-c")}
    )
    lab_file = tmp_path / "lab.toml"
    lab_file.write_text(
        f'[lab]\nname = "lg"\n\n[labgrid]\ncoordinator = "{lab.address}"\ntags = ["board=pi"]\n'
    )
    yield lab, lab_file, agents
    lab.stop()
    for agent in agents:
        agent.stop()


def _places(lab) -> dict:
    """Who holds pi-a and pi-b, as labgrid-client shows it."""
    listing = {}
    for name in ("pi-a", "pi-b"):
        text = lab.client("-p", name, "show").stdout
        listing[name] = next(
            line.split(":", 1)[1].strip() for line in text.splitlines() if "acquired:" in line
        )
    return listing


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, fleet runs
def test_fleet_runs_on_labgrid_places_and_waits_for_a_person_holding_one(
    bench, tmp_path, capsys, example_models
):
    lab, lab_file, agents = bench

    # Inventory from labgrid: the places, their tags and agents; pi-c is named and skipped.
    assert edgequal_main(["fleet", "list", "--lab", str(lab_file), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["pi-a"]["agent"] == agents[0].address
    assert rows["pi-b"]["agent"] == agents[1].address
    assert rows["pi-a"]["tags"] == ["board=pi"] and rows["pi-a"]["held_by"] is None
    assert rows["pi-c"]["agent"] is None and "no agent URL" in rows["pi-c"]["why"]
    resolved, skipped = resolve_lab(load_lab(lab_file))
    assert [d.name for d in resolved.devices] == ["pi-a", "pi-b"] and list(skipped) == ["pi-c"]

    models_file = tmp_path / "models.toml"
    models_file.write_text(f'[models.micro]\npath = "{example_models["micro"]}"\n')
    models = load_models(models_file)

    # A person holds pi-a: without --wait its cell fails at once, naming them; pi-b runs.
    lab.client("-p", "pi-a", "lock", user="alice", host="bench")
    options = FleetOptions(out_dir=tmp_path / "out1", plan_overrides=PLAN, retries=0)
    result = FleetRunner(resolved, models, options).run()
    by_device = {r.device: r for r in result.runs}
    assert by_device["pi-a"].state == "error"
    assert "labgrid place pi-a is locked by bench/alice" in by_device["pi-a"].error
    assert by_device["pi-b"].report and not agents[0].run_records()
    assert len(agents[1].run_records()) == 1
    assert _places(lab) == {"pi-a": "bench/alice", "pi-b": "None"}  # pi-b given back

    # With --wait it waits, showing the holder, and runs once the person lets go.
    seen = []
    options = FleetOptions(out_dir=tmp_path / "out2", plan_overrides=PLAN, retries=0, wait_s=120.0)
    runner = FleetRunner(resolved, models, options)
    runner.on_change = lambda r: seen.append(r.waiting_for)
    done = threading.Thread(target=runner.run)
    done.start()
    deadline = time.monotonic() + 60
    while not any(w and "held by bench/alice" in w for w in seen):
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    assert not agents[0].run_records()  # nothing reached the board while it was held
    lab.client("-p", "pi-a", "unlock", user="alice", host="bench")
    done.join(120)
    assert not done.is_alive()
    assert {r.device: r.state for r in runner.result.runs}["pi-a"] in (
        "passed",
        "degraded",
        "inconclusive",
    )
    assert len(agents[0].run_records()) == 1
    assert _places(lab) == {"pi-a": "None", "pi-b": "None"}
    assert "Reservation" not in lab.client("reservations").stdout  # every one cancelled


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, two host processes
def test_two_hosts_on_one_coordinator_never_share_a_place(
    bench, tmp_path, example_models, short_plan
):
    import os
    import subprocess
    import sys

    lab, lab_file, agents = bench
    models_file = tmp_path / "models.toml"
    models_file.write_text(f'[models.micro]\npath = "{example_models["micro"]}"\n')
    hosts = []
    for name in ("host-1", "host-2"):  # two runners of a lab's CI, as labgrid tells them apart
        argv = [sys.executable, "-m", "edgequal.host.cli", "fleet", "run", str(lab_file)]
        argv += ["--models", str(models_file), "--wait", "3m", "--retries", "0", "--no-record"]
        argv += [*short_plan, "--sustain", "0", "--out", str(tmp_path / name)]
        env = {**os.environ, "LG_HOSTNAME": name, "LG_USERNAME": "ci"}
        hosts.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    outputs = [h.communicate(timeout=300)[0].decode(errors="replace") for h in hosts]
    for h, out in zip(hosts, outputs):
        assert h.returncode in (0, 1), out  # 1: a run inconclusive on a busy machine
    for name in ("host-1", "host-2"):
        index = json.loads((tmp_path / name / "index.json").read_text())
        assert all(r["report"] for r in index["runs"]), index["runs"]
    # Each board ran both hosts' cells, one after the other, never at once.
    for agent in agents:
        (a0, a1), (b0, b1) = sorted(agent.run_intervals())
        assert a1 <= b0
    assert _places(lab) == {"pi-a": "None", "pi-b": "None"}


def test_a_labgrid_lab_file_is_checked_like_any_other(tmp_path):
    def lab(text):
        path = tmp_path / "lab.toml"
        path.write_text(text)
        return load_lab(path)

    good = lab('[labgrid]\ncoordinator = "lg.lab:20408"\nplaces = ["pi-a"]\ntoken_env = "T"\n')
    assert good.labgrid.coordinator == "lg.lab:20408" and good.labgrid.places == ("pi-a",)
    assert good.devices == () and good.labgrid.token.env == "T"
    with pytest.raises(InventoryError, match="HOST:PORT"):
        lab('[labgrid]\ncoordinator = "grpc://lg:1"\n')
    with pytest.raises(InventoryError, match="key=value"):
        lab('[labgrid]\ncoordinator = "lg:1"\ntags = ["pi"]\n')
    with pytest.raises(InventoryError, match="from the coordinator's places"):
        lab('[labgrid]\ncoordinator = "lg:1"\n[devices.a]\naddress = "grpc://a:1"\n')
    with pytest.raises(InventoryError, match="coordinatr"):
        lab('[labgrid]\ncoordinatr = "lg:1"\n')
