"""Declared co-load: background work the agent runs beside a phase (docs/measurement.md "Co-load").

A plan declares what runs beside the model (``plan.coload``): another model from the
store by digest, a synthetic CPU or memory-bandwidth load of a share of cores, or a
command by name. The host never sends a command line: a command is an entry of this
agent's own configuration file (``agent.toml`` in the state directory, or
``$EDGEQUAL_AGENT_CONFIG``)::

    [coload.camera-pipeline]
    argv = ["/usr/bin/gst-launch-1.0", "-q", "v4l2src", "!", "fakesink"]
    start_s = 1.0   # seconds it needs before it is at its pace (default 0)

:func:`resolve` turns declarations into :class:`Load` s (refusing, before anything runs,
a digest not in the store or a name not in the configuration); :class:`ColoadRun`
starts them, each process in its own process group, waits until each is ready, and
stops them. Models, CPU and memory loads run in ``coload`` workers that report a
running total (``loadgen``); a command reports nothing, so its achieved figure is the
CPU its process group used.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.errors import BadInput
from edgequal.contract.plan import Plan

from ..config import CONFIG_ENV, CONFIG_FILE, config_path, read_config  # noqa: F401 (re-exported)

READY_TIMEOUT_S = 120.0
"""Longest a co-load may take to load and report ready."""
UNITS = {"model": "inferences/s", "cpu": "CPUs", "membw": "GB/s", "command": "CPUs"}
# A week: a co-load worker is paused (SIGSTOP) for whole segments; it has no phases to time out.
_NO_PHASE_TIMEOUT_S = 7 * 24 * 3600.0


def read_commands(path: Path) -> dict[str, dict]:
    """The ``[coload.NAME]`` entries of the agent's configuration: ``{name: {argv, start_s}}``.

    A missing file has none. A file that cannot be read or holds a bad entry is a
    BadInput naming the file and the entry.
    """
    config = read_config(path)
    table = config.get("coload", {})
    if not isinstance(table, dict):
        raise BadInput(f"agent configuration {path}: [coload] must be a table of commands")
    commands = {}
    for name, entry in table.items():
        argv = entry.get("argv") if isinstance(entry, dict) else None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadInput(
                f"agent configuration {path}: [coload.{name}] needs argv, a list of strings"
            )
        start_s = entry.get("start_s", 0.0)
        if (
            isinstance(start_s, bool)
            or not isinstance(start_s, (int, float))
            or not (0 <= start_s <= 600)
        ):
            raise BadInput(f"agent configuration {path}: [coload.{name}] start_s must be 0..600")
        commands[name] = {"argv": list(argv), "start_s": float(start_s)}
    return commands


def label(decl: dict) -> str:
    """How a declaration is named in the report: ``model:NAME``, ``cpu:1.5``, ``command:NAME``..."""
    if decl["kind"] == "model":
        return f"model:{decl['name']}"
    if decl["kind"] in ("cpu", "membw"):
        return f"{decl['kind']}:{decl['cores']:g}"
    return f"command:{decl['name']}"


@dataclass
class Load:
    """One declared co-load, resolved on this device."""

    decl: dict
    label: str
    model: Path | None = None
    runtime: str | None = None
    argv: list[str] | None = None
    start_s: float = 0.0


def resolve(decls, store, config: Path | None) -> list[Load]:
    """Each declaration against this device: models by digest in ``store``, commands by name
    in the configuration file ``config``. BadInput for the first that cannot run here."""
    from edgequal.contract.runtimes import runtime_for

    loads = []
    commands = None if config is not None else {}
    for decl in decls or ():
        load = Load(decl=dict(decl), label=label(decl))
        if decl["kind"] == "model":
            load.model = store.path(decl["sha256"])  # BadInput: not on this device
            load.runtime = runtime_for(load.model, "auto", decl["name"])
        elif decl["kind"] == "command":
            commands = read_commands(config) if commands is None else commands
            entry = commands.get(decl["name"])
            if entry is None:
                known = ", ".join(sorted(commands)) or "none"
                raise BadInput(
                    f"co-load command '{decl['name']}' is not in this agent's configuration "
                    f"({config or 'no configuration file'} names: {known})",
                    hint="add it under [coload.NAME] in the agent's configuration on the device",
                )
            load.argv, load.start_s = entry["argv"], entry["start_s"]
        loads.append(load)
    return loads


def resolve_plan(plan: Plan, store, config: Path | None) -> list[Load] | None:
    """The plan's co-load resolved on this device, or None when it declares none.

    ``config`` is the agent's configuration file (``config_path``; None: it has none).
    Called when a request arrives (before the device is taken) and again by the run.
    """
    decls = plan.coload
    return resolve(decls, store, config) if decls else None


@dataclass
class _Process:
    load: Load
    worker: object = None  # supervisor.Worker
    popen: subprocess.Popen | None = None
    reports: list = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    outcome: object = None
    done: threading.Event = field(default_factory=threading.Event)
    ended_early: bool = False  # it ended before the agent stopped it

    @property
    def pgid(self) -> int:
        return self.worker.pid if self.worker else self.popen.pid


class ColoadRun:
    """The declared co-load of one phase: started, made ready, then stopped.

    ``start(paused=...)`` starts every process, each in its own process group, and
    waits until each is ready (a worker's ``ready`` phase; a command's ``start_s``);
    ``paused`` leaves them stopped (SIGSTOP) for a worker that switches them itself.
    :meth:`stop` ends them all (SIGTERM, then the group's SIGKILL) and returns what
    each achieved.
    """

    def __init__(self, loads: list[Load], plan, cancel: threading.Event | None = None):
        self.loads = loads
        self.plan = plan
        self.cancel = cancel or threading.Event()
        self.processes: list[_Process] = []
        self._stopping = threading.Event()

    @property
    def pgids(self) -> list[int]:
        return [p.pgid for p in self.processes]

    def start(self, paused: bool) -> str | None:
        """Start and wait for ready; the failure message of a load that could not start, or None."""
        for load in self.loads:
            for job in _jobs_for(load, self.plan):
                self.processes.append(self._start_one(load, job))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for p in self.processes:
            while not p.ready.wait(0.05):
                if p.done.is_set() or self.cancel.is_set() or time.monotonic() > deadline:
                    return self._failure(p) or f"co-load {p.load.label} did not become ready"
        start_s = max((p.load.start_s for p in self.processes), default=0.0)
        if start_s:
            self.cancel.wait(start_s)
        for p in self.processes:
            if p.done.is_set():
                return self._failure(p) or f"co-load {p.load.label} ended before the phase"
        if paused:
            self.signal(signal.SIGSTOP)
        return None

    def _start_one(self, load: Load, job) -> _Process:
        from ..worker.supervisor import Worker

        p = _Process(load)
        if job is None:  # a command of the agent's configuration
            p.popen = subprocess.Popen(
                load.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            p.ready.set()
            threading.Thread(target=self._wait_command, args=(p,), daemon=True).start()
            return p

        def on_event(event: dict) -> None:
            if event.get("event") == "phase" and event.get("phase") == "ready":
                p.ready.set()
            elif event.get("event") == "coload":
                p.reports.append({"t": event["t"], "count": event["count"]})

        p.worker = Worker(job.to_json(), phase_timeout_s=_NO_PHASE_TIMEOUT_S, on_event=on_event)
        p.worker.start()
        threading.Thread(target=self._wait_worker, args=(p,), daemon=True).start()
        return p

    def _wait_worker(self, p: _Process) -> None:
        p.outcome = p.worker.wait()
        p.ended_early = not self._stopping.is_set()
        p.done.set()

    def _wait_command(self, p: _Process) -> None:
        p.outcome = p.popen.wait()
        p.ended_early = not self._stopping.is_set()
        p.done.set()

    def _failure(self, p: _Process) -> str | None:
        if not p.done.is_set():
            return None
        if p.worker is not None:
            return f"co-load {p.load.label} failed: {p.outcome.describe()}"
        return f"co-load {p.load.label} exited with code {p.outcome}"

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every co-load process group (those gone are skipped)."""
        for pgid in self.pgids:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def ended_early(self) -> str | None:
        """The first co-load that ended while the phase ran (before :meth:`stop`), or None."""
        for p in self.processes:
            if p.done.is_set() and p.ended_early:
                return self._failure(p)
        return None

    def stop(self) -> None:
        """End every co-load: SIGCONT (a paused one), SIGTERM, then SIGKILL of its group."""
        self._stopping.set()
        self.signal(signal.SIGCONT)
        for p in self.processes:
            if p.worker is not None:
                p.worker.request_stop()
            elif p.popen.poll() is None:
                try:
                    os.killpg(p.popen.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 2.0
        for p in self.processes:
            p.done.wait(max(0.0, deadline - time.monotonic()))
        self.signal(signal.SIGKILL)
        for p in self.processes:
            p.done.wait(2.0)

    def achieved(self, spans=None, coload_cpus: dict[int, float] | None = None) -> list[dict]:
        """Per declared load: its achieved rate over ``spans`` (all of the phase if None)."""
        from ..measure.coload import achieved

        out = []
        for load in self.loads:
            procs = [p for p in self.processes if p.load is load]
            kind = load.decl["kind"]
            value = None
            rates = [achieved(p.reports, spans) for p in procs if p.worker is not None]
            if rates and all(r is not None for r in rates):
                value = sum(rates)
                if kind == "membw":
                    value /= 1e9
            cpus = None
            if coload_cpus is not None:
                known = [coload_cpus.get(p.pgid) for p in procs]
                cpus = sum(known) if all(c is not None for c in known) else None
            if kind == "command":
                value = cpus
            target = load.decl.get("rate_per_s") if kind == "model" else load.decl.get("cores")
            if kind == "membw":
                target = None  # bandwidth depends on the board: the cores are the declaration
            out.append(
                {
                    "label": load.label,
                    "kind": kind,
                    "achieved": {
                        "value": None if value is None else round(value, 4),
                        "unit": UNITS[kind],
                        "target": target,
                    },
                    "cpus": None if cpus is None else round(cpus, 4),
                    "processes": len(procs),
                }
            )
        return out


def _jobs_for(load: Load, plan) -> list:
    """The worker jobs of one load: one per model, ceil(cores) for CPU and memory; None for a command."""
    from ..worker.jobs import ColoadSettings, WorkerJob

    kind = load.decl["kind"]
    if kind == "command":
        return [None]
    if kind == "model":
        job = WorkerJob(
            kind="coload",
            model=str(load.model),
            golden=None,
            runtime=load.runtime,
            threads=load.decl.get("threads"),
            shapes=dict(load.decl.get("shapes") or {}),
            seed=plan.seed,
            coload=ColoadSettings(load="model", rate_per_s=load.decl.get("rate_per_s")),
        )
        return [job]
    cores = load.decl["cores"]
    shares = [min(1.0, cores - i) for i in range(math.ceil(cores))]
    return [
        WorkerJob(
            kind="coload",
            model="-",
            golden=None,
            runtime="-",
            coload=ColoadSettings(load=kind, share=share, buffer_mb=load.decl.get("buffer_mb", 64)),
        )
        for share in shares
    ]


def start_for_phase(loads, plan, cancel, emit, findings, runtime, phase, paused):
    """Start the declared co-load for ``phase``; None (and a finding) when it could not start."""
    emit({"type": "progress", "phase": phase, "message": "starting the declared co-load"})
    run = ColoadRun(loads, plan, cancel)
    failure = run.start(paused=paused)
    if failure is None:
        return run
    run.stop()
    findings.append(coload_finding(phase, failure, runtime))
    return None


def coload_finding(phase: str, message: str, runtime: str) -> dict:
    """The finding of a co-load that could not start or ended mid-phase."""
    return {
        "phase": phase,
        "cause": "coload",
        "kind": "coload_failed",
        "message": message,
        "hint": "the declared co-load must run on this device on its own first",
        "runtime": runtime,
    }
