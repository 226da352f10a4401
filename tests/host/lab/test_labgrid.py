"""Labs on labgrid: a real ``labgrid-coordinator`` and ``labgrid-exporter`` on loopback whose
places hold real local agents (a ``NetworkService`` per place, its address the agent's URL);
``labgrid-client`` locks a place from outside, as a person at the bench would.

One coordinator, exporter and pair of agents serve the whole module (each test leaves every
place free); pi-a's agent is reached through a relay that counts the connections made to it,
so a test sees that nothing, not even an Info call, reaches a board whose place is held by
someone else."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest
from edgequal.cli.main import main as edgequal_main
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


LEASE_S = 5.0
"""The module coordinator's reservation lease (labgrid's is 60 s): ten times the clients'
0.5 s refresh (host/lab/labgrid_places.py), so a live client beside busy processes keeps
its reservation, while the dead host's test waits it out in seconds."""


@dataclass
class LabgridBench:
    lab: object  # tests/labgrid_lab.py's LabgridLab
    agents: list
    relay: object  # tests/labgrid_lab.py's CountingRelay, in front of pi-a's agent
    addresses: dict[str, str]


@pytest.fixture(scope="module")
def labgrid_bench(tmp_path_factory, local_agents, test_helper):
    """Two agents behind places pi-a (through the counting relay) and pi-b, tag board=pi,
    and pi-c with no agent; one coordinator and exporter for the module.

    The coordinator's clock is shortened (a reservation lease of 5 s instead of 60, a pass
    every second instead of every 15) so that a dead host's reservation expires within a
    test; every client here refreshes its reservation every 0.5 s."""
    helper = test_helper("labgrid_lab")
    base = tmp_path_factory.mktemp("labgrid")
    agents = local_agents.start_agents(base / "agents", ["pi-a", "pi-b"])
    relay = helper.CountingRelay(agents[0].port)
    ports = {"pi-a": relay.port, "pi-b": agents[1].port}
    addresses = {name: f"grpc://127.0.0.1:{port}" for name, port in ports.items()}
    groups = {
        name: {"NetworkService": {"address": addresses[name], "username": "edgequal", "port": p}}
        for name, p in ports.items()
    }
    groups["pi-c"] = {"NetworkService": {"address": "127.0.0.1", "username": "root"}}
    lab = None
    try:
        lab = helper.start_lab(
            base / "labgrid",
            groups,
            {g: {"board": "pi"} for g in ("pi-a", "pi-b", "pi-c")},
            clock=(LEASE_S, 1.0),
        )
        yield LabgridBench(lab, agents, relay, addresses)
    finally:
        if lab is not None:
            lab.stop()
        relay.close()
        for agent in agents:
            agent.stop()


@pytest.fixture
def bench(labgrid_bench, tmp_path):
    """The module's lab, its agents pinned in this test's known_devices, and a lab file
    selecting the places tagged board=pi."""
    known = KnownDevices()
    for agent, name in zip(labgrid_bench.agents, ("pi-a", "pi-b")):
        trust_device(known, name, agent.address)
    lab_file = tmp_path / "lab.toml"
    lab_file.write_text(
        f'[lab]\nname = "lg"\n\n[labgrid]\ncoordinator = "{labgrid_bench.lab.address}"\n'
        'tags = ["board=pi"]\n'
    )
    yield labgrid_bench, lab_file
    assert _places(labgrid_bench.lab) == {"pi-a": None, "pi-b": None}  # left free


def _places(lab) -> dict:
    """Who holds pi-a and pi-b (``host/user``, or None), as the coordinator says."""
    held = lab.holders()
    return {name: held[name] for name in ("pi-a", "pi-b")}


def _micro_models(tmp_path, example_models):
    models_file = tmp_path / "models.toml"
    models_file.write_text(f'[models.micro]\npath = "{example_models["micro"]}"\n')
    return models_file


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, fleet runs
def test_fleet_runs_on_labgrid_places_and_waits_for_a_person_holding_one(
    bench, tmp_path, capsys, example_models
):
    labgrid, lab_file = bench
    lab, agents, relay = labgrid.lab, labgrid.agents, labgrid.relay
    runs_a, runs_b = (len(a.run_records()) for a in agents)

    # Inventory from labgrid: the places, their tags and agents; pi-c is named and skipped.
    assert edgequal_main(["fleet", "list", "--lab", str(lab_file), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["pi-a"]["agent"] == labgrid.addresses["pi-a"]
    assert rows["pi-b"]["agent"] == labgrid.addresses["pi-b"]
    assert rows["pi-a"]["tags"] == ["board=pi"] and rows["pi-a"]["held_by"] is None
    assert rows["pi-c"]["agent"] is None and "no agent URL" in rows["pi-c"]["why"]
    resolved, skipped = resolve_lab(load_lab(lab_file))
    assert [d.name for d in resolved.devices] == ["pi-a", "pi-b"] and list(skipped) == ["pi-c"]
    models = load_models(_micro_models(tmp_path, example_models))

    # A person holds pi-a: without --wait its cell fails at once, naming them; pi-b runs.
    # Nothing reaches pi-a's agent meanwhile: no Info, no identity proof, no connection.
    lab.client("-p", "pi-a", "lock", user="alice", host="bench")
    connections = relay.connections
    options = FleetOptions(out_dir=tmp_path / "out1", plan_overrides=PLAN, retries=0)
    result = FleetRunner(resolved, models, options).run()
    by_device = {r.device: r for r in result.runs}
    assert by_device["pi-a"].state == "error"
    assert "labgrid place pi-a is locked by bench/alice" in by_device["pi-a"].error
    assert by_device["pi-b"].report and len(agents[0].run_records()) == runs_a
    assert len(agents[1].run_records()) == runs_b + 1
    assert relay.connections == connections
    assert _places(lab) == {"pi-a": "bench/alice", "pi-b": None}  # pi-b given back

    # With --wait it waits, showing the holder, and runs once the person lets go.
    seen = []
    options = FleetOptions(out_dir=tmp_path / "out2", plan_overrides=PLAN, retries=0, wait_s=120.0)
    only_a = dataclasses.replace(resolved, devices=resolved.devices[:1])  # pi-b ran above
    runner = FleetRunner(only_a, models, options)
    runner.on_change = lambda r: seen.append(r.waiting_for)
    done = threading.Thread(target=runner.run)
    done.start()
    deadline = time.monotonic() + 60
    while not any(w and "held by bench/alice" in w for w in seen):
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)
    assert relay.connections == connections  # nothing reached the board while it was held
    lab.client("-p", "pi-a", "unlock", user="alice", host="bench")
    done.join(120)
    assert not done.is_alive()
    assert {r.device: r.state for r in runner.result.runs}["pi-a"] in (
        "passed",
        "degraded",
        "inconclusive",
    )
    assert len(agents[0].run_records()) == runs_a + 1 and relay.connections > connections
    assert lab.reservations() == []  # every one cancelled


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, two host processes
def test_two_hosts_on_one_coordinator_never_share_a_place(
    bench, tmp_path, example_models, short_plan
):
    labgrid, lab_file = bench
    models_file = _micro_models(tmp_path, example_models)
    before = [len(a.run_intervals()) for a in labgrid.agents]
    hosts = []
    for name in ("host-1", "host-2"):  # two runners of a lab's CI, as labgrid tells them apart
        argv = [sys.executable, "-m", "edgequal.cli", "fleet", "run", str(lab_file)]
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
    for agent, n in zip(labgrid.agents, before):
        (a0, a1), (b0, b1) = sorted(agent.run_intervals())[n:]
        assert a1 <= b0


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, a health check
def test_fleet_health_holds_each_place_and_names_the_person_holding_one(bench, tmp_path, capsys):
    """``fleet health`` on a labgrid lab checks each board inside its place: a place a
    person holds is an unhealthy check naming them, and nothing reaches its agent."""
    labgrid, lab_file = bench
    lab, agents, relay = labgrid.lab, labgrid.agents, labgrid.relay
    runs_a, runs_b = (len(a.run_records()) for a in agents)
    lab.client("-p", "pi-a", "lock", user="alice", host="bench")
    connections = relay.connections
    try:
        argv = ["fleet", "health", str(lab_file), "--json", "--out", str(tmp_path / "h")]
        argv += ["--health-file", str(tmp_path / "health.json")]
        code = edgequal_main(argv)
    finally:
        lab.client("-p", "pi-a", "unlock", user="alice", host="bench")
    checks = {c["device"]: c for c in json.loads(capsys.readouterr().out)}
    assert code == 1  # pi-a could not be checked
    assert not checks["pi-a"]["healthy"]
    assert any("locked by bench/alice" in r for r in checks["pi-a"]["reasons"]), checks["pi-a"]
    assert relay.connections == connections and len(agents[0].run_records()) == runs_a
    # pi-b was checked inside its place: its run and the Info read there are in the check.
    assert len(agents[1].run_records()) == runs_b + 1
    assert checks["pi-b"]["run_id"] and checks["pi-b"]["key_fingerprint"]


@pytest.mark.slow  # a labgrid coordinator and exporter, two agents, approve and requalify
def test_fleet_requalify_reads_each_board_inside_its_place(bench, tmp_path, example_models):
    """``fleet requalify`` on a labgrid lab reads each board's Info inside its place: an
    approved pair on a place a person holds is planned again (its board could not be
    read) and its run fails fast naming them; nothing reaches that board meanwhile."""
    labgrid, lab_file = bench
    lab, relay = labgrid.lab, labgrid.relay
    resolved, _ = resolve_lab(load_lab(lab_file))
    models_file = _micro_models(tmp_path, example_models)
    options = FleetOptions(out_dir=tmp_path / "first", plan_overrides=PLAN, retries=0)
    first = FleetRunner(resolved, load_models(models_file), options).run()
    approved = tmp_path / "approved"
    for r in first.runs:
        assert r.report, r.error
        args = ["approve", str(tmp_path / "first" / r.report), "--into", str(approved)]
        assert edgequal_main([*args, "--model", str(example_models["micro"])]) == 0
    policy = tmp_path / "policy.toml"
    policy.write_text('[status]\nallowed = ["passed", "degraded", "inconclusive"]\n')
    lab.client("-p", "pi-a", "lock", user="alice", host="bench")
    connections = relay.connections
    try:
        out = tmp_path / "requalified"
        argv = ["fleet", "requalify", str(approved), str(lab_file), "--policy", str(policy)]
        code = edgequal_main([*argv, "--out", str(out), "--retries", "0", "--no-record"])
    finally:
        lab.client("-p", "pi-a", "unlock", user="alice", host="bench")
    assert relay.connections == connections  # not even an Info call reached pi-a
    runs = {r["device"]: r for r in json.loads((out / "index.json").read_text())["runs"]}
    assert list(runs) == ["pi-a"]  # pi-b read inside its place: unchanged, not re-run
    assert "labgrid place pi-a is locked by bench/alice" in runs["pi-a"]["error"]
    assert code == 3, code


HOLDING_HOST = """
import sys, time
from edgequal.host.lab.labgrid_places import Coordinator

with Coordinator(sys.argv[1]).hold("pi-a"):  # the fleet's path: reserve, allocation, acquire
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow  # waits out the reservation's expiry (LEASE_S after its last refresh)
def test_a_dead_hosts_place_is_freed_by_the_lab_and_its_reservation_expires(
    bench, tmp_path, example_models
):
    """labgrid keeps an acquired place acquired when its client dies (it cannot tell a dead
    host from a long run): the next run sees the dead holder and fails fast or waits; once
    the lab frees the place (``labgrid-client release --kick``), the dead host's reservation,
    polled no more, expires by labgrid's rule (on the module's shortened clock) and the
    waiting run proceeds."""
    labgrid, _ = bench
    lab, agent = labgrid.lab, labgrid.agents[0]
    runs = len(agent.run_records())
    env = {**os.environ, "LG_HOSTNAME": "gone", "LG_USERNAME": "ci"}
    host = subprocess.Popen(
        [sys.executable, "-c", HOLDING_HOST, lab.address], env=env, stdout=subprocess.PIPE
    )
    try:
        assert host.stdout.readline() == b"held\n"
    finally:
        os.kill(host.pid, signal.SIGKILL)
        host.wait(10)
    assert _places(lab)["pi-a"] == "gone/ci"
    # Its reservation is labgrid's "acquired": refreshed by the coordinator, never expiring.
    assert [r["state"] for r in lab.reservations() if r["owner"] == "gone/ci"] == ["acquired"]

    lab_file = tmp_path / "pi-a.toml"
    lab_file.write_text(f'[labgrid]\ncoordinator = "{lab.address}"\nplaces = ["pi-a"]\n')
    resolved, _ = resolve_lab(load_lab(lab_file))
    models = load_models(_micro_models(tmp_path, example_models))
    options = FleetOptions(out_dir=tmp_path / "out1", plan_overrides=PLAN, retries=0)
    [busy] = FleetRunner(resolved, models, options).run().runs
    assert busy.state == "error" and "labgrid place pi-a is locked by gone/ci" in busy.error

    lab.client("-p", "pi-a", "release", "--kick")
    # Free, but still allocated to the dead host's reservation until labgrid expires it.
    options = FleetOptions(out_dir=tmp_path / "out3", plan_overrides=PLAN, retries=0)
    [reserved] = FleetRunner(resolved, models, options).run().runs
    assert "labgrid place pi-a is reserved for gone/ci" in reserved.error
    options = FleetOptions(out_dir=tmp_path / "out2", plan_overrides=PLAN, retries=0, wait_s=150.0)
    [ran] = FleetRunner(resolved, models, options).run().runs
    assert ran.state in ("passed", "degraded", "inconclusive"), ran.error
    assert len(agent.run_records()) == runs + 1
    # The dead host's reservation expired (labgrid removes it at a later pass).
    assert [r["state"] for r in lab.reservations() if r["owner"] == "gone/ci"] in (
        [],
        ["expired"],
    )


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
