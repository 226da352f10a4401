"""A fleet run: every model on every matching device of a lab, devices in parallel.

Each device is worked by its own thread, one run at a time, each run under the
device's lease (taken, renewed while the run goes on, released), so any number of
hosts can share the lab (docs/fleet.md). A run is retried with backoff when the
transport failed or the measurement came back ``inconclusive`` (interference) or
``incomplete`` (the run could not finish); a ``failed`` measurement is a result,
never retried. A device that stops answering is marked ``unreachable`` and its
remaining runs ``skipped``; the other devices finish.

The output directory holds one signed report per run (``reports/``), its page
(``pages/``), the index (``index.json``, ``junit.xml``: judge/junit.py) and the matrix
page (``index.html``: present/html/matrix.py). ``resume`` keeps every run whose report in the directory
verifies (an ``incomplete`` one measured nothing and runs again), and runs only the
rest.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..devices.trust import KnownDevices
from ..errors import (
    HostError,
    TransportError,
    UntrustedDevice,
    UsageError,
)
from ..judge.junit import fleet_junit
from ..present.html.matrix import matrix_html
from ..transport import Transport, open_transport
from ..transport.base import holder_name
from .fleet_cells import CellRunner
from .inventory import FleetModel, Lab, LabDevice
from .noise import NOISY_PREFIX
from .results import FleetResult, RunRecord, run_file_stem

if TYPE_CHECKING:
    from .history import FleetCell

log = logging.getLogger(__name__)

FINAL_STATES = ("passed", "degraded", "failed", "inconclusive", "incomplete", "error", "skipped")


@dataclass
class FleetOptions:
    """How a fleet run goes: where results go, which plan, retries, waiting, gate, history."""

    out_dir: Path
    tags: frozenset[str] = frozenset()
    plan: str = "quick"
    plan_overrides: dict = field(default_factory=dict)
    resume: bool = False
    policy_path: Path | None = None
    wait_s: float | None = 0.0
    """How long to wait for a device another host holds: 0 fails fast, None without limit."""
    retries: int = 2
    backoff_s: float = 2.0
    lease_ttl_s: float = 120.0
    html_pages: bool = True
    unhealthy: dict[str, str] = field(default_factory=dict)
    """Boards ``fleet health`` marked unhealthy (name: why): their runs are skipped."""
    command: tuple[str, ...] | None = None
    """The command line that started the run (argv without the program), recorded in each
    report's sidecar (``devices/reproduce.py``)."""
    baseline_dir: Path | None = None
    """``--baseline DIR``: an earlier fleet run's output directory (or a folder of
    ``MODEL@DEVICE.json`` reports); each run is gated against its cell's report there."""
    repeat_pairs: int = 0
    """``--repeat-until-decided N``: a run whose verdict against its baseline is UNKNOWN
    runs the candidate and the baseline's artifacts interleaved on its board, up to N
    pairs (host/judge/repeat.py)."""


@dataclass(frozen=True)
class RunPlan:
    """A run fixed in advance (re-qualification): its plan JSON, the report to gate against."""

    plan: dict | None = None
    baseline: Path | None = None


def open_lab_device(device: LabDevice, known: KnownDevices | None = None) -> Transport:
    """A transport to a lab device, its token read from where the lab file says.

    The agent must prove the key pinned for the device's name before its token or
    anything else is sent, and a ``grpc://`` device is reached with the TLS files of its
    ``known_devices`` entry: the device's security settings, wherever the lab file says
    it is. A name with no pinned key is UntrustedDevice before anything is opened: its
    token belongs to it alone, never to whichever trusted device answers at its address.
    """
    entry = (known or KnownDevices()).get(device.name)
    if entry is None:
        raise UntrustedDevice(
            f"device {device.name} is not trusted (no key is pinned for it); nothing was sent "
            f"to {device.address}",
            hint=f"edgequal devices trust {device.name} {device.address}",
        )
    pinned = entry.public_key_raw
    if device.transport_kind == "grpc":
        token = device.token.read(f"device {device.name}") if device.token else None
        tls = entry.tls or None
        transport = open_transport(device.address, token=token, tls=tls, pinned_key=pinned)
        transport.holder = f"{holder_name()} (pid {os.getpid()})"
        return transport
    return open_transport(device.address, ssh=device.ssh, pinned_key=pinned)


class FleetRunner:
    """Runs a fleet: builds the matrix, works each device in its own thread, writes DIR.

    ``open_device`` makes a transport for a lab device (a constructor argument so a
    test can count or wrap connections); ``on_change(record)`` is called whenever a
    run changes state; ``record_report(path, device, cell)`` (history) after each
    report, with its :class:`~edgequal.host.lab.history.FleetCell` (a retry's report
    replaces the cell's earlier attempts).
    """

    def __init__(
        self,
        lab: Lab,
        models: list[FleetModel],
        options: FleetOptions,
        *,
        known: KnownDevices | None = None,
        open_device: Callable[[LabDevice], Transport] = open_lab_device,
        on_change: Callable[[RunRecord], None] = lambda r: None,
        on_event: Callable[[RunRecord, dict], None] = lambda r, e: None,
        record_report: Callable[[Path, str, FleetCell], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        pairs: dict[tuple[str, str], RunPlan] | None = None,
    ):
        self.lab = lab
        self.models = models
        self.options = options
        self.known = known or KnownDevices()
        if open_device is open_lab_device:
            open_device = functools.partial(open_lab_device, known=self.known)
        self.open_device = open_device
        self.on_change = on_change
        self.on_event = on_event
        self.record_report = record_report
        self.sleep = sleep
        self.devices = lab.select(options.tags)
        if not self.devices:
            raise UsageError(
                f"no device of lab {lab.name} carries the tags {', '.join(sorted(options.tags))}"
            )
        self.policy = None
        if options.policy_path is not None:
            from ..judge.policy import load_policy

            self.policy = load_policy(options.policy_path)
        self.pairs = pairs
        self.coordinator = None  # a labgrid lab's coordinator session, while run() runs
        self.infos: dict[str, dict] = {}  # each device's Info, as read before its runs
        self.result = FleetResult(
            lab.name,
            [
                RunRecord(m.name, d.name)
                for m in models
                for d in self.devices
                if (d.matches(frozenset(m.tags)) if pairs is None else (m.name, d.name) in pairs)
            ],
        )
        if not self.result.runs:
            raise UsageError("no model matches any selected device (check the models' tags)")
        self._lock = threading.Lock()
        self.out = Path(options.out_dir)
        # Names this fleet run's cells in the history: one row per model on each board.
        self.cell_prefix = (
            f"{lab.name}/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.urandom(3).hex()}"
        )
        self.cells = CellRunner(self, record_report)

    # -- the whole run -------------------------------------------------------------

    def run(self) -> FleetResult:
        """Run every pending run; returns the result (also written to the output directory)."""
        self.result.started_unix = time.time()
        for sub in ("reports", "pages") if self.options.html_pages else ("reports",):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        if self.options.resume:
            self._resume()
        self._write_index()
        if self.lab.labgrid is not None:  # the coordinator's places arbitrate the boards
            from .labgrid_places import Coordinator

            self.coordinator = Coordinator(self.lab.labgrid.coordinator)
        try:
            with ThreadPoolExecutor(
                max_workers=len(self.devices), thread_name_prefix="fleet"
            ) as ex:
                futures = [ex.submit(self._work_device, d) for d in self.devices]
                for f in futures:
                    f.result()
        finally:
            if self.coordinator is not None:
                self.coordinator.close()
                self.coordinator = None
        self.result.finished_unix = time.time()
        self._write_index()
        self._write_matrix_page()
        return self.result

    def _records(self, device: str) -> list[RunRecord]:
        return [r for r in self.result.runs if r.device == device]

    def _set(self, record: RunRecord, **changes) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(record, k, v)
        self.on_change(record)

    # -- resume --------------------------------------------------------------------

    def _resume(self) -> None:
        """Keep runs whose report in the directory verifies (and is not ``incomplete``)."""
        from ..devices.verify import verify_envelope

        models = {m.name: m for m in self.models}
        for record in self.result.runs:
            path = self.out / "reports" / f"{run_file_stem(record.model, record.device)}.json"
            if not path.is_file():
                continue
            model = models[record.model]
            artifacts = [model.path] + ([model.golden] if model.golden else [])
            try:
                report = verify_envelope(
                    path.read_bytes(), known=self.known, device=record.device, artifacts=artifacts
                )
            except (HostError, OSError) as e:
                log.info("resume: %s does not verify (%s); it runs again", path.name, e)
                continue
            if report.status == "incomplete":  # the run did not finish: nothing was measured
                continue
            self.cells.finish_record(record, path, report.predicate, resumed=True)

    # -- one device ----------------------------------------------------------------

    def _work_device(self, device: LabDevice) -> None:
        todo = [r for r in self._records(device.name) if r.state == "pending"]
        if not todo:
            return
        models = {m.name: m for m in self.models}
        why = self.options.unhealthy.get(device.name)
        if why is not None:
            for record in todo:
                self._set(
                    record,
                    state="skipped",
                    # A reason that says its own remedy (--skip-noisy's) stands alone.
                    error=why
                    if why.startswith(NOISY_PREFIX)
                    else f"unhealthy ({why}); runs again once `edgequal fleet health` passes",
                )
            self._write_index()
            return
        if self.known.get(device.name) is None:
            error = UsageError(
                f"device {device.name} is not trusted",
                hint=f"edgequal devices trust {device.name} {device.address}",
            )
            for record in todo:
                self._set(record, state="error", error=str(error))
        elif self.coordinator is None:
            self._work_open(device, todo, models)
        else:
            # A labgrid place is held before anything reaches its board, Info included: the
            # lab's arbiter decides first. Each cell holds it for itself (open, check, run).
            for record in todo:
                if self.result.unreachable.get(device.name):
                    gone = self.result.unreachable[device.name]
                    self._set(record, state="skipped", error=f"device unreachable: {gone}")
                    continue
                try:
                    with self._place(device, record):
                        self._work_open(device, [record], models)
                except HostError as e:  # the place: held by someone else, or no coordinator
                    self._set(record, state="error", error=str(e))
        self._write_index()

    @contextlib.contextmanager
    def _place(self, device: LabDevice, record: RunRecord):
        """Hold the device's labgrid place for one cell, showing who holds it meanwhile."""
        self._set(record, state="waiting", waiting_for=f"labgrid place {device.name}")

        def waiting(w: dict) -> None:
            held = (
                f" (held by {w['holder']})"
                if w.get("holder")
                else f" (reserved for {w['reserved_for']})"
                if w.get("reserved_for")
                else ""
            )
            self._set(record, waiting_for=f"labgrid place {device.name}{held}")
            self.on_event(record, {"type": "wait", **w})

        with self.coordinator.hold(device.name, wait_s=self.options.wait_s, on_wait=waiting):
            self._set(record, state="running", waiting_for=None)
            yield

    def _work_open(self, device: LabDevice, todo: list[RunRecord], models: dict) -> None:
        """Open the device (it proves its pinned key), check its Info, run ``todo`` on it."""
        transport = None
        try:
            transport = self.open_device(device)
            profile = self._check_device(transport, device)
            for record in todo:
                gone = self.result.unreachable.get(device.name)
                if gone:
                    self._set(record, state="skipped", error=f"device unreachable: {gone}")
                    continue
                self.cells.run_one(transport, device, profile, models[record.model], record)
                self._write_index()
                if record.state == "error" and self._unreachable(transport):
                    with self._lock:
                        self.result.unreachable[device.name] = record.error or "no answer"
        except HostError as e:
            # The device could not even be opened (not trusted, no token, no answer).
            if isinstance(e, TransportError):
                with self._lock:
                    self.result.unreachable[device.name] = str(e)
            for record in todo:
                if record.state in ("pending", "waiting", "running"):
                    self._set(record, state="error", error=str(e))
        finally:
            if transport is not None:
                transport.close()

    def _check_device(self, transport: Transport, device: LabDevice) -> str | None:
        """Info from the device: it must present its pinned key; returns its profile name
        (the lab's, else the one its fingerprint matches, as ``qualify`` picks it)."""
        import base64

        from ..devices.profiles import match_profile
        from ..errors import UntrustedDevice

        info = transport.info()
        with self._lock:
            self.infos[device.name] = info
        entry = self.known.get(device.name)
        if base64.b64decode(info["public_key_b64"]) != entry.public_key_raw:
            raise UntrustedDevice(
                f"device {device.name} presents a key other than the one pinned "
                f"({entry.fingerprint})",
                hint=f"if it was reset on purpose: edgequal devices forget {device.name}, "
                "then trust it again",
            )
        if device.profile:
            return device.profile
        return match_profile(info.get("fingerprint") or {}).name

    def _unreachable(self, transport: Transport) -> bool:
        """Whether the device stopped answering (its Info fails)."""
        try:
            transport.info()
            return False
        except HostError:
            return True

    # -- outputs -------------------------------------------------------------------

    def _write_index(self) -> None:
        """index.json and junit.xml, rewritten atomically after every run."""
        with self._lock:
            data = self.result.to_json()
            xml = fleet_junit(self.result)
        _atomic_write(self.out / "index.json", json.dumps(data, indent=1).encode())
        _atomic_write(self.out / "junit.xml", xml)

    def _write_matrix_page(self) -> None:
        _atomic_write(self.out / "index.html", matrix_html(self.result).encode("utf-8"))


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def load_index(out_dir: Path) -> FleetResult | None:
    """The index a fleet run left in ``out_dir`` (None when there is none)."""
    path = Path(out_dir) / "index.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return FleetResult(
        data.get("lab", ""),
        [RunRecord.from_json(r) for r in data.get("runs", [])],
        data.get("unreachable", {}),
        data.get("started_unix", 0.0),
        data.get("finished_unix", 0.0),
    )
