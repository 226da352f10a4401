"""Declared co-load: the plan's declarations, the agent's named commands, the co-load
processes (real ones, paused and resumed with signals), and the contention sampler
counting a declared co-load apart from other processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edgequal.agent.measure.attribution import contention_between, interference_present
from edgequal.agent.measure.coload import achieved, rounds_slower
from edgequal.agent.phases.coload import ColoadRun, Load, read_commands, resolve
from edgequal.agent.phases.warm import latency_cause
from edgequal.agent.probes.contention import ContentionSampler
from edgequal.agent.service.store import ArtifactStore
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import make_plan

SPIN = (
    "import ctypes, sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
    "while True: pass"
)


@pytest.mark.parametrize(
    "decl, message",
    [
        ({"kind": "shell", "argv": ["rm"]}, "coload[0].kind"),
        ({"kind": "command", "name": "rm -rf /"}, "coload[0].name"),
        ({"kind": "command", "name": "cam", "argv": ["x"]}, "unknown key 'argv'"),
        ({"kind": "cpu"}, "coload[0].cores"),
        ({"kind": "cpu", "cores": float("nan")}, "coload[0].cores"),
        ({"kind": "membw", "cores": 1, "buffer_mb": 0}, "buffer_mb"),
        ({"kind": "model", "sha256": "abc"}, "coload[0].sha256"),
        ({"kind": "model", "sha256": "a" * 64, "rate_per_s": -1}, "rate_per_s"),
    ],
)
def test_bad_coload_declarations_are_refused_by_name(decl, message):
    with pytest.raises(BadInput) as e:
        make_plan("quick", coload=[decl])
    assert message in str(e.value)


def test_plan_keeps_the_declarations_it_validated():
    plan = make_plan(
        "quick", coload=[{"kind": "cpu", "cores": 1.5}, {"kind": "command", "name": "cam"}]
    )
    assert plan.to_json()["coload"] == [
        {"kind": "cpu", "cores": 1.5},
        {"kind": "command", "name": "cam"},
    ]
    assert plan.coload_rounds == 4
    with pytest.raises(BadInput, match="at most 8"):
        make_plan("quick", coload=[{"kind": "cpu", "cores": 1}] * 9)


def test_named_commands_come_only_from_the_agent_configuration(tmp_path):
    config = tmp_path / "agent.toml"
    assert read_commands(config) == {}
    config.write_text('[coload.spin]\nargv = ["/bin/true"]\nstart_s = 0.5\n')
    assert read_commands(config) == {"spin": {"argv": ["/bin/true"], "start_s": 0.5}}
    store = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(BadInput) as e:
        resolve([{"kind": "command", "name": "camera"}], store, config)
    assert "'camera' is not in this agent's configuration" in str(e.value)
    assert "spin" in str(e.value) and str(config) in str(e.value)
    (load,) = resolve([{"kind": "command", "name": "spin"}], store, config)
    assert load.argv == ["/bin/true"] and load.label == "command:spin"
    with pytest.raises(BadInput, match="not"):
        resolve([{"kind": "model", "sha256": "b" * 64, "name": "m.onnx"}], store, config)
    config.write_text('[coload.bad]\nargv = "rm -rf /"\n')
    with pytest.raises(BadInput, match=r"\[coload.bad\] needs argv"):
        read_commands(config)


def test_achieved_counts_only_inside_the_spans():
    reports = [{"t": t, "count": c} for t, c in [(0, 0), (1, 100), (2, 200), (5, 200), (6, 300)]]
    assert achieved(reports) == pytest.approx(300 / 6)
    # A paused process reports nothing: only the spans it ran count.
    assert achieved(reports, [(0, 2), (5, 6)]) == pytest.approx(300 / 3)
    assert achieved(reports, [(3, 4)]) is None
    segments = [
        {"round": 0, "coload": False, "p50_ms": 1.0},
        {"round": 0, "coload": True, "p50_ms": 1.5},
        {"round": 1, "coload": True, "p50_ms": 0.9},
        {"round": 1, "coload": False, "p50_ms": 1.0},
    ]
    assert rounds_slower(segments) == 1


def test_waiting_behind_a_declared_co_load_is_not_interference():
    evidence = {"runq_wait_share": 0.4, "other_cpus": 0.05, "steal_share": 0.0}
    assert interference_present(evidence)  # undeclared: the worker waited for a CPU
    assert interference_present(evidence, declared=True) == []
    busy = {**evidence, "other_cpus": 0.9}
    assert interference_present(busy, declared=True) == ["other processes used 0.90 CPUs"]


def _cpu_ticks(pid: int) -> int:
    """A process's user + system CPU ticks, from its /proc stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


@pytest.mark.slow
def test_cpu_co_load_is_paused_resumed_and_stopped_in_its_own_process_groups():
    plan = make_plan("quick", coload=[{"kind": "cpu", "cores": 1.5}])
    load = Load(decl=dict(plan.coload[0]), label="cpu:1.5")
    run = ColoadRun([load], plan)
    try:
        assert run.start(paused=True) is None
        pgids = run.pgids
        assert len(pgids) == 2  # ceil(1.5) processes: one whole core, one half
        assert all(os.getpgid(pgid) == pgid != os.getpgid(0) for pgid in pgids)
        time.sleep(0.2)
        assert {_state(pgid) for pgid in pgids} == {"T"}  # stopped
        t0 = time.monotonic()
        run.signal(signal.SIGCONT)
        time.sleep(1.5)
        t1 = time.monotonic()
        assert {_state(pgid) for pgid in pgids} <= {"R", "S"}
        # Each process reports its own CPU seconds; they ran at most their shares.
        (entry,) = run.achieved([(t0, t1)])
        assert entry["achieved"]["unit"] == "CPUs" and entry["achieved"]["target"] == 1.5
        assert 0.05 < entry["achieved"]["value"] <= 1.5 * 1.1
    finally:
        run.stop()
    assert run.ended_early() is None
    for pgid in pgids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)


@pytest.mark.slow
def test_a_co_load_that_cannot_start_is_reported(tmp_path):
    plan = make_plan("quick")
    load = Load(decl={"kind": "command", "name": "gone"}, label="command:gone", argv=["true"])
    run = ColoadRun([load], plan)
    load.start_s = 0.5  # `true` exits at once: it is gone before the phase
    try:
        failure = run.start(paused=False)
    finally:
        run.stop()
    assert failure == "co-load command:gone exited with code 0"


@pytest.mark.slow
def test_sampler_counts_the_declared_co_load_apart_from_other_processes():
    """Two real busy processes beside an idle 'worker': the declared one is counted as
    co-load, never as other processes; the undeclared one still is."""
    worker = subprocess.Popen(["sleep", "30"], start_new_session=True)
    # Names of this run's own (another copy of this suite running beside it has its own).
    declared_name, undeclared_name = f"eqd-{os.getpid()}", f"equ-{os.getpid()}"
    declared = subprocess.Popen([sys.executable, "-c", SPIN, declared_name], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", SPIN, undeclared_name], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        for p, name in ((declared, declared_name), (other, undeclared_name)):
            while Path(f"/proc/{p.pid}/comm").read_text().strip() != name:  # PR_SET_NAME done
                assert time.monotonic() < deadline
                time.sleep(0.02)
        # A sample every 0.1 s and a scan of the other processes every 0.25 s: five scans
        # and a dozen samples in 1.25 s (as many as 2.5 s at 0.25 s and 0.5 s).
        sampler = ContentionSampler(
            worker.pid, interval_s=0.1, scan_every_s=0.25, declared_pgids=[declared.pid]
        )
        sampler.start()
        t0, twin0 = time.monotonic(), _cpu_ticks(other.pid)
        time.sleep(1.25)
        t1, twin1 = time.monotonic(), _cpu_ticks(other.pid)
        samples = sampler.stop()
    finally:
        for p in (worker, declared, other):
            p.kill()
            p.wait()
    e = contention_between(samples, t0, t1, sampler.cpu_count, sampler.clock_ticks_per_s)
    # Every scan of the other processes: the undeclared spinner is among them, the declared
    # one never (on a machine shared with other jobs the top few may be theirs).
    scanned = [s["others"] for s in samples if s.get("others")]
    assert scanned and not any(declared_name in others for others in scanned)
    undeclared_ticks = sum(others.get(undeclared_name, 0) for others in scanned)
    assert undeclared_ticks > 0
    names = {p["name"] for p in e["top_processes"]}
    assert declared_name not in names
    # The declared spinner's CPU, measured from its own /proc stat, is the co-load's: about
    # what its undeclared twin got beside it in the same window (read from the twin's own
    # /proc stat at t0 and t1: the scans' ticks run from before t0 to the last scan after
    # t1, so their sum over t1 - t0 read 0.9 of a CPU where both got about 0.4 at load 4).
    twin_cpus = (twin1 - twin0) / sampler.clock_ticks_per_s / (t1 - t0)
    assert e["coload_cpus"] > 0.5 * twin_cpus and e["coload_cpus"] > 0.02, (e, twin_cpus)
    own = [s["declared"][declared.pid][1] for s in samples if declared.pid in s["declared"]]
    assert own[-1] > own[0]


@pytest.mark.slow
def test_a_fixed_rate_model_co_load_holds_its_rate_and_does_not_burst_after_a_pause(
    example_models,
):
    plan = make_plan("quick")
    decl = {"kind": "model", "sha256": "0" * 64, "name": "micro.onnx", "rate_per_s": 40.0}
    load = Load(
        decl={**decl, "threads": 1, "shapes": {}},
        label="model:micro.onnx",
        model=example_models["micro"],
        runtime="onnxruntime",
    )
    run = ColoadRun([load], plan)
    try:
        assert run.start(paused=False) is None
        t0 = time.monotonic()
        time.sleep(1.5)
        t1 = time.monotonic()
        run.signal(signal.SIGSTOP)
        time.sleep(1.0)  # 40 calls missed: a resumed loop must not make them up
        run.signal(signal.SIGCONT)
        t2 = time.monotonic()
        time.sleep(1.0)
        t3 = time.monotonic()
    finally:
        run.stop()
    (before,) = run.achieved([(t0, t1)])
    (after,) = run.achieved([(t2, t3)])
    assert before["achieved"]["target"] == 40.0 and before["achieved"]["unit"] == "inferences/s"
    # A micro model takes microseconds: the loop is paced by its schedule, never above it.
    assert 20 < before["achieved"]["value"] <= 44
    assert after["achieved"]["value"] <= 44


def test_plain_segments_that_waited_for_a_cpu_are_never_cause_none():
    """The plain segments of a co-load run carry no preemption tags; their evidence covers
    them only (the co-load paused). Steady with a light tail, they are ``none`` on a quiet
    machine and ``interference`` when the worker waited for a CPU, as a tagged shape is."""

    def plain(wait: float) -> dict:
        return {
            "summary": {"p50_ms": 1.0, "p99_ms": 1.4, "count": 400},
            "warmup": {"steady": True},
            "interference": {"runq_wait_share": wait, "other_cpus": 0.1, "steal_share": 0.0},
        }

    assert latency_cause(plain(0.01)) == "none"
    assert latency_cause(plain(0.30)) == "interference"
    unsteady = {**plain(0.01), "warmup": {"steady": False}}
    assert latency_cause(unsteady) == "unexplained"
