"""The runs on this device, from request to signed, stored report, by run id.

:class:`Runs` records a run as in progress (``runs/<id>/request.json``),
measures (``qualification``), signs the report with the device key and writes
it under ``reports/`` before it returns, so a host that went away can fetch it
later by run id. An agent that restarts finds runs still marked in progress and
signs them ``incomplete`` (reason ``device_reboot`` when the boot id recorded at
run start is not the device's boot id any more); a run it cannot even sign is
moved aside to ``runs-unrecoverable/`` and logged, so recovery never stops the
agent starting.

Time: the device's wall clock is read through ``clock`` (``time.time`` unless a
caller passes another source) and checked against the host's time in the nonce
(``agent/clock.py``); a clock far off is reported (``clock_unsynced``), never
trusted and never needed to verify a report.

Disk space: a run starts only when ``reserve`` (a file of ``reserve_bytes``
next to the reports) is in place. When the disk fills during the run, the
reserve is given up so that the finished report can still be written; a report
that cannot be written even then is kept in memory, served by
:meth:`Runs.read_report`, retried at every read and every run start, and the
run's outcome record (``runs/<id>/outcome.json``, its space taken at run start)
tells a restarted agent what really happened.

One run id, one report: once a run's report was signed and handed to a host
(:meth:`Runs.mark_delivered`) or written, recovery never signs another for it. A
report that reached its host but not the disk leaves ``reports/<id>.lost.json``,
and asking for it says so; only a run whose signed report never left the agent
process is signed ``incomplete`` after a restart, with what happened as its reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from edgequal.contract.errors import AgentError, ArtifactCorrupt, BadInput, QuotaExceeded
from edgequal.contract.files import is_no_space, write_atomic
from edgequal.contract.keys import DeviceKey
from edgequal.contract.signing import build_statement, json_clean, sign_envelope

from .clock import ClockCheck, check_clock, read_boot_id
from .run_request import RunRequest, bundle_model_name, check_run_id, new_run_id, subjects_for

log = logging.getLogger(__name__)

DEFAULT_REPORT_RESERVE_BYTES = 16 * 1024**2
"""Disk kept back (as the file ``reserve``) so a run's report can be written on a full disk."""

MAX_REPORT_BYTES = 48 * 1024**2
"""Largest envelope stored as measured; above it the raw samples are left out (under the
agent's 64 MiB message limit, so every stored report can be fetched in one message)."""

RAW_SAMPLES_KEY = "samples_ns_b64"
RESERVE_FILE = "reserve"
OUTCOME_FILE = "outcome.json"
"""Beside a run's request: how far the run got (running, signed, unsaved, delivered).
Written in place into space taken when the run starts, so it can be updated on a full disk."""
OUTCOME_BYTES = 4096
LOST_SUFFIX = ".lost.json"
"""``reports/<run_id>.lost.json``: a run whose signed report reached its host but not the
disk; the device signs no other report for it and says so when asked for it."""
UNRECOVERABLE_DIR = "runs-unrecoverable"
BUNDLES_DIR = "bundles"
PREFLIGHT_TIMEOUT_S = 120.0
"""Longest the external-data check of one model may take (it reads the model file once)."""


def sign_report(
    key: DeviceKey, request: RunRequest, measurement: dict, now_s: float | None = None
) -> bytes:
    """Build the in-toto statement for a run and sign it into DSSE envelope bytes.

    ``now_s`` is the device's wall clock for ``finished_at`` (``time.time()`` if None);
    ``measurement["clock"]``, when present, is the run's clock check.
    """
    now_s = time.time() if now_s is None else now_s
    predicate = json_clean(
        {
            "run_id": request.run_id,
            "nonce": request.nonce,
            "status": measurement["status"],
            "reason": measurement.get("reason"),
            "plan": measurement.get("plan", request.plan.to_json()),
            "fingerprint": measurement.get("fingerprint", {}),
            "results": measurement.get("results", {}),
            "findings": measurement.get("findings", []),
            "device_key": key.fingerprint(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s)),
            "clock": measurement.get("clock"),
        }
    )
    return sign_envelope(key, build_statement(subjects_for(request), predicate))


def _drop_raw_samples(value):
    """``value`` with every raw-sample array left out (the statistics stay)."""
    if isinstance(value, dict):
        return {k: _drop_raw_samples(v) for k, v in value.items() if k != RAW_SAMPLES_KEY}
    if isinstance(value, list):
        return [_drop_raw_samples(v) for v in value]
    return value


def _with_clock(measurement: dict, clock: ClockCheck) -> dict:
    """``measurement`` with its ``clock`` section, plus a ``clock_unsynced`` finding when flagged."""
    measurement = {**measurement, "clock": clock.to_json()}
    finding = clock.finding()
    if finding is not None:
        measurement["findings"] = [*measurement.get("findings", []), finding]
    return measurement


def _preflight(model_path: Path) -> str | None:
    """Check the model's external data in a child process; the one-line refusal, or None.

    The agent never parses a model itself; the child reads the model file only.
    """
    import subprocess
    import sys

    try:
        proc = subprocess.run(
            [sys.executable, "-m", "edgequal.contract.onnx_external_data", str(model_path)],
            capture_output=True,
            timeout=PREFLIGHT_TIMEOUT_S,
            start_new_session=True,
            close_fds=True,
        )
    except subprocess.TimeoutExpired:
        return f"the model's external data could not be checked within {PREFLIGHT_TIMEOUT_S:g} s"
    try:
        answer = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"the model's external data could not be checked (exit {proc.returncode}: {tail[0][:200]})"
    return None if answer.get("ok") else str(answer.get("error"))


def _write_outcome(run_dir: Path, outcome: dict) -> None:
    """Write a run's outcome record in place, padded to OUTCOME_BYTES, and sync it.

    The first write (at run start, while the reserve guarantees room) takes the
    space; later ones overwrite the same bytes, so they need none on a full disk.
    """
    data = json.dumps(outcome).encode()
    if len(data) >= OUTCOME_BYTES:
        outcome = {**outcome, "error": str(outcome.get("error", ""))[:200]}
        data = json.dumps(outcome).encode()[: OUTCOME_BYTES - 1]
    data = data.ljust(OUTCOME_BYTES, b" ")
    fd = os.open(run_dir / OUTCOME_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            pos += os.pwrite(fd, view[pos:], pos)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _read_outcome(run_dir: Path) -> dict | None:
    """A run's outcome record, or None when it has none (or it cannot be read)."""
    try:
        value = json.loads((run_dir / OUTCOME_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _forget_run(run_dir: Path) -> None:
    for p in run_dir.glob("*"):
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        run_dir.rmdir()


class Runs:
    """The runs of one state directory: started, measured, signed, stored, recovered.

    ``AgentService`` and ``run-plan`` hold one; a test may pass a stand-in with the
    same methods (``new_run_id``, ``execute``, ``read_report``, ``recover_interrupted``).
    """

    def __init__(
        self,
        state_dir: Path,
        key: DeviceKey,
        store,
        root: Path = Path("/"),
        *,
        reserve_bytes: int = DEFAULT_REPORT_RESERVE_BYTES,
        max_report_bytes: int = MAX_REPORT_BYTES,
        clock: Callable[[], float] = time.time,
        memory_limit_mb: int | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.key = key
        self.store = store
        self.root = Path(root)
        self.reserve_bytes = int(reserve_bytes)
        self.max_report_bytes = int(max_report_bytes)
        self.clock = clock
        """The device's wall clock (unix seconds); dates in reports come from it."""
        self.memory_limit_mb = memory_limit_mb
        """The worker memory limit for a plan that sets none (the operator's ``serve
        --memory-limit`` or ``agent.toml``); None: a share of the board's memory."""
        self._lock = threading.Lock()
        self._unsaved: dict[str, bytes] = {}
        """Envelopes of finished runs the disk could not take yet, by run id."""

    # -- names ---------------------------------------------------------------

    @staticmethod
    def new_run_id() -> str:
        """A fresh run id."""
        return new_run_id()

    def run_dir(self, run_id: str) -> Path:
        """Where a run in progress keeps its request."""
        return self.state_dir / "runs" / check_run_id(run_id)

    def bundle_dir(self, run_id: str) -> Path:
        """Where a run's model and its external-data files are laid out by name."""
        return self.state_dir / BUNDLES_DIR / check_run_id(run_id)

    def report_path(self, run_id: str) -> Path:
        """Where a run's signed envelope is kept."""
        return self.state_dir / "reports" / f"{check_run_id(run_id)}.dsse.json"

    # -- reading -------------------------------------------------------------

    def read_report(self, run_id: str) -> bytes:
        """The envelope of a finished run; BadInput when there is none."""
        path = self.report_path(run_id)
        with self._lock:
            unsaved = self._unsaved.get(run_id)
        if unsaved is not None:
            self.save_unsaved()
            return unsaved
        try:
            return path.read_bytes()
        except FileNotFoundError:
            if (self.run_dir(run_id) / "request.json").exists():
                raise BadInput(
                    f"run {run_id} is still in progress; its report is not ready"
                ) from None
            lost = self._lost_note(run_id)
            if lost is not None:
                raise BadInput(lost, hint="the host that ran it holds the report") from None
            raise BadInput(f"no report for run {run_id} on this device") from None

    def _lost_note(self, run_id: str) -> str | None:
        """What happened to a run whose delivered report the disk never took, if that is this run."""
        try:
            note = json.loads((self.state_dir / "reports" / f"{run_id}{LOST_SUFFIX}").read_text())
            return (
                f"run {run_id} finished ({note['status']}); its signed report of "
                f"{note['bytes']} bytes was delivered to its host but could not be stored on "
                f"this device ({note['error']}), and no other report is signed for it"
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- running -------------------------------------------------------------

    def execute(
        self,
        request: RunRequest,
        *,
        on_event: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> bytes:
        """Measure, sign and store one run; returns the envelope bytes.

        Trouble with the model or runtime yields a signed ``failed`` report; only a
        request that cannot start (unknown digest, bad plan, full disk) raises.
        """
        from .phases.coload import config_path, resolve_plan
        from .phases.qualification import run_measurement
        from .runtimes.envs import RuntimeEnvs

        check_run_id(request.run_id)
        model_path = self.store.path(request.model_digest)
        golden_path = self.store.path(request.golden_digest) if request.golden_digest else None
        request = self._with_memory_limit(request)
        self.save_unsaved()
        self.ensure_reserve()
        run_dir = self.run_dir(request.run_id)
        clock = check_clock(self.clock(), request.nonce)
        self._record_request(request, run_dir)
        bundle = self.bundle_dir(request.run_id)
        try:
            model_path = self._lay_out_bundle(request, bundle)
            coload = resolve_plan(request.plan, self.store, config_path(self.state_dir))
            self._check_intact(request, golden_path, coload)
            # The signature is verified before anything parses the model.
            signing = self._model_signature(request, bundle, model_path)
            refused = (
                f"model signature: {signing['reason']}"
                if signing["status"] == "failed"
                else _preflight(model_path)
            )
            if refused is not None:
                kind = "model_signature" if signing["status"] == "failed" else "model_rejected"
                measurement = {
                    "status": "failed",
                    "reason": refused,
                    "findings": [{"kind": kind, "phase": "preflight", "message": refused}],
                    "results": {"model_signature": signing},
                }
            else:
                measurement = run_measurement(
                    model_path,
                    golden_path,
                    request.plan,
                    root=self.root,
                    on_event=on_event,
                    cancel=cancel,
                    model_name=request.model_name,
                    coload=coload,
                    runtime_envs=RuntimeEnvs(self.state_dir),
                )
                measurement["results"] = {
                    **(measurement.get("results") or {}),
                    "model_signature": signing,
                }
        except ArtifactCorrupt as e:
            measurement = {
                "status": "failed",
                "reason": str(e),
                "findings": [
                    {
                        "kind": "artifact_corrupt",
                        "artifact": e.name,
                        "sha256": e.digest,
                        "message": str(e),
                    }
                ],
            }
        except AgentError as e:
            if isinstance(e, BadInput):
                _forget_run(run_dir)
                raise
            measurement = {
                "status": "failed",
                "reason": str(e),
                "findings": [{"kind": "agent_error", "message": str(e)}],
            }
        except Exception as e:  # the report must still be signed; the agent keeps serving
            measurement = {
                "status": "failed",
                "reason": f"internal error: {type(e).__name__}: {e}",
                "findings": [{"kind": "internal_error", "message": f"{type(e).__name__}: {e}"}],
            }
        finally:
            shutil.rmtree(bundle, ignore_errors=True)
        measurement = _with_clock(measurement, clock)
        envelope = self._sign_bounded(request, measurement)
        signed = {"state": "signed", "status": measurement["status"], "bytes": len(envelope)}
        with contextlib.suppress(OSError):
            _write_outcome(run_dir, signed)
        self._store_report(request.run_id, envelope, measurement["status"])
        return envelope

    def _record_request(self, request: RunRequest, run_dir: Path) -> None:
        """The request (with the boot id: a recovery under another boot id was a reboot)
        and the ``running`` outcome written under ``runs/<id>/``; a full disk refuses the run."""
        record = {**request.to_json(), "boot_id": read_boot_id(self.root)}
        try:
            write_atomic(run_dir / "request.json", json.dumps(record).encode())
            _write_outcome(run_dir, {"state": "running"})
        except OSError as e:
            _forget_run(run_dir)
            if is_no_space(e):
                raise QuotaExceeded(
                    f"device disk is full: cannot record run {request.run_id}",
                    hint="free space on the device, then qualify again",
                ) from e
            raise

    def _check_intact(self, request: RunRequest, golden_path: Path | None, coload) -> None:
        """Every artifact the run uses hashed again (ArtifactCorrupt on a mismatch): the
        golden set, model co-loads (a command or CPU co-load has none) and the signature."""
        checked = [(golden_path, request.golden_digest, request.golden_name or "golden set")]
        checked += [
            (load.model, load.decl["sha256"], load.label)
            for load in coload or ()
            if load.model is not None
        ]
        signature = request.plan.model_signature_sha256
        if signature is not None:
            checked.append((self.store.path(signature), signature, "model signature"))
        for path, digest, name in checked:
            if path is not None:
                self.store.check_intact(path, digest, name)

    def _model_signature(self, request: RunRequest, bundle: Path, model_path: Path) -> dict:
        """``results.model_signature``: the request's signature verified against the keys
        ``agent.toml`` trusts, over the model file (or its bundle when it has external data),
        or ``unsigned`` (``failed`` where the owner requires a signature)."""
        from .config import config_path, read_config
        from .model_signature import SigningPolicy, unsigned, verify

        path = config_path(self.state_dir)
        policy = SigningPolicy.from_config(read_config(path), path)
        digest = request.plan.model_signature_sha256
        if digest is None:
            return unsigned(policy)
        target = bundle if request.extra_files else model_path
        return {**verify(target, self.store.path(digest), policy), "signature_sha256": digest}

    def _lay_out_bundle(self, request: RunRequest, bundle: Path) -> Path:
        """The model and its external-data files, by name, in a directory of their own.

        Every run loads its model from there, so a location in the model can only
        name a file the host pushed with it, never another artifact of the store.
        """
        shutil.rmtree(bundle, ignore_errors=True)  # a leftover of an agent that stopped
        model_name = bundle_model_name(request.model_name)
        files = {model_name: request.model_digest}
        files.update({f["name"]: f["sha256"] for f in request.extra_files})
        try:
            self.store.link_bundle(bundle, files)
        except OSError as e:
            if is_no_space(e):
                raise QuotaExceeded(f"device disk is full: cannot lay out the model ({e})") from e
            raise
        # What is measured is what the report names: each file, as laid out, hashed again.
        for name, digest in files.items():
            self.store.check_intact(bundle / name, digest, name)
        return bundle / model_name

    def _with_memory_limit(self, request: RunRequest) -> RunRequest:
        """``request`` with the worker memory limit filled in where its plan sets none:
        the operator's, else a share of the board's memory (``supervisor``)."""
        from .worker.supervisor import default_memory_limit_mb

        if request.plan.memory_limit_mb is not None:
            return request
        limit = self.memory_limit_mb or default_memory_limit_mb(self.root)
        if limit is None:
            return request
        return replace(request, plan=replace(request.plan, memory_limit_mb=limit))

    def _sign_bounded(self, request: RunRequest, measurement: dict) -> bytes:
        """Sign ``measurement``; an envelope over ``max_report_bytes`` is signed again without raw samples."""
        envelope = sign_report(self.key, request, measurement, self.clock())
        if len(envelope) <= self.max_report_bytes:
            return envelope
        size = len(envelope)
        log.warning(
            "run %s: report of %d bytes is over the limit; raw samples left out",
            request.run_id,
            size,
        )
        trimmed = dict(measurement)
        trimmed["results"] = _drop_raw_samples(measurement.get("results", {}))
        trimmed["findings"] = list(measurement.get("findings", [])) + [
            {
                "kind": "raw_samples_omitted",
                "message": f"the report with raw samples was {size} bytes, over this agent's "
                f"limit of {self.max_report_bytes}; statistics are kept, raw samples are not",
            }
        ]
        return sign_report(self.key, request, trimmed, self.clock())

    # -- disk ----------------------------------------------------------------

    def ensure_reserve(self) -> None:
        """Put the report reserve in place, or raise QuotaExceeded: a run starts only with room to end."""
        if self.reserve_bytes <= 0:
            return
        path = self.state_dir / RESERVE_FILE
        with contextlib.suppress(OSError):
            if path.stat().st_size >= self.reserve_bytes:
                return
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                path.unlink()
            if is_no_space(e):
                raise QuotaExceeded(
                    f"device disk is full: a run needs {self.reserve_bytes} bytes kept free for "
                    "its report",
                    hint="free space on the device, then qualify again",
                ) from e
            # A file system that cannot hold the reserve must not stop every run.
            log.warning("cannot keep a report reserve in %s: %s", self.state_dir, e)

    def _release_reserve(self) -> bool:
        try:
            (self.state_dir / RESERVE_FILE).unlink()
        except FileNotFoundError:
            return False
        return True

    def _store_report(self, run_id: str, envelope: bytes, status: str) -> None:
        """Write the report, giving up the reserve when the disk is full; never lose it."""
        path = self.report_path(run_id)
        run_dir = self.run_dir(run_id)
        try:
            try:
                write_atomic(path, envelope)
            except OSError as e:
                if not (is_no_space(e) and self._release_reserve()):
                    raise
                log.warning("run %s: disk full; the report reserve is used for its report", run_id)
                write_atomic(path, envelope)
        except OSError as e:
            log.error(
                "run %s: its %s report (%d bytes) cannot be stored (%s); it is kept in memory "
                "and written when the disk has room",
                run_id,
                status,
                len(envelope),
                e.strerror or e,
            )
            with self._lock:
                self._unsaved[run_id] = envelope
            outcome = {
                "state": "unsaved",
                "status": status,
                "bytes": len(envelope),
                "error": str(e.strerror or e),
            }
            try:
                _write_outcome(run_dir, outcome)
            except OSError as e2:
                log.error("run %s: cannot record that its report is unsaved (%s)", run_id, e2)
            return
        _forget_run(run_dir)

    def mark_delivered(self, run_id: str) -> None:
        """Record that a run's report is being handed to a host (before it is sent).

        Matters only for a report the disk has not taken yet: a restarted agent then
        signs no second report for the run. Where even that cannot be recorded, the
        run's record is removed, so no recovery can sign one either.
        """
        with self._lock:
            if run_id not in self._unsaved:
                return
        run_dir = self.run_dir(run_id)
        try:
            outcome = _read_outcome(run_dir) or {}
            if outcome.get("state") == "delivered":
                return
            _write_outcome(run_dir, {**outcome, "state": "delivered"})
        except OSError as e:
            log.error(
                "run %s: cannot record that its report was delivered (%s); its record is "
                "removed so that no other report is signed for it",
                run_id,
                e,
            )
            (run_dir / "request.json").unlink(missing_ok=True)

    def save_unsaved(self) -> list[str]:
        """Write the reports the disk could not take before; return the run ids now stored."""
        with self._lock:
            pending = dict(self._unsaved)
        saved = []
        for run_id, envelope in pending.items():
            try:
                write_atomic(self.report_path(run_id), envelope)
            except OSError:
                continue
            with self._lock:
                self._unsaved.pop(run_id, None)
            _forget_run(self.run_dir(run_id))
            log.info("run %s: its report is stored now", run_id)
            saved.append(run_id)
        return saved

    # -- after a restart -----------------------------------------------------

    def recover_interrupted(self) -> list[str]:
        """Sign ``incomplete`` every run the agent was in the middle of when it stopped.

        Never raises for one run: a run that cannot be read or signed is moved to
        ``runs-unrecoverable/`` and logged, so one bad run cannot stop the agent.
        """
        recovered = []
        # Bundles are per run and no run is in progress while the agent starts.
        shutil.rmtree(self.state_dir / BUNDLES_DIR, ignore_errors=True)
        runs_dir = self.state_dir / "runs"
        if not runs_dir.is_dir():
            return recovered
        for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
            try:
                if self._recover_one(run_dir):
                    recovered.append(run_dir.name)
            except Exception as e:
                if is_no_space(e):
                    # Nothing wrong with the run: it is signed once the disk has room.
                    log.error("run %s: disk full; it is recovered at the next start", run_dir.name)
                    continue
                self._move_aside(run_dir, e)
        return recovered

    def _recover_one(self, run_dir: Path) -> bool:
        record = json.loads((run_dir / "request.json").read_text())
        boot_then = record.pop("boot_id", None)
        request = RunRequest.from_json(record)
        check_run_id(request.run_id)
        if request.run_id != run_dir.name:
            raise BadInput(f"request.json names run {request.run_id!r}")
        if self.report_path(request.run_id).exists():
            _forget_run(run_dir)
            return False
        outcome = _read_outcome(run_dir) or {}
        if outcome.get("state") == "delivered":
            # Its host holds the signed report: sign nothing else, say what happened.
            note = {k: outcome.get(k) for k in ("status", "bytes", "error")}
            write_atomic(
                self.state_dir / "reports" / f"{request.run_id}{LOST_SUFFIX}",
                json.dumps({"run_id": request.run_id, **note}).encode(),
            )
            log.error(
                "run %s: its %s report was delivered but never stored; no other is signed",
                request.run_id,
                outcome.get("status"),
            )
            _forget_run(run_dir)
            return False
        reason = "the agent stopped during the run"
        finding = {"kind": "interrupted", "message": reason}
        boot_now = read_boot_id(self.root)
        if boot_then and boot_now and boot_then != boot_now:
            reason = "device_reboot"
            finding = {
                "kind": "device_reboot",
                "message": f"the device restarted during the run (boot id {boot_then} at "
                f"the start, {boot_now} at recovery): the run was cut off and its results lost",
            }
        if outcome.get("state") == "unsaved":
            reason = (
                f"the run finished ({outcome.get('status')}) but its report of "
                f"{outcome.get('bytes')} bytes could not be stored before the agent stopped: "
                f"{outcome.get('error')}"
            )
            finding = {"kind": "interrupted", "message": reason}
        elif outcome.get("state") == "signed":
            reason = (
                f"the run finished ({outcome.get('status')}) but the agent stopped before its "
                "report was stored"
            )
            finding = {"kind": "interrupted", "message": reason}
        now = self.clock()
        measurement = _with_clock(
            {"status": "incomplete", "reason": reason, "findings": [finding]},
            # The host's time in the nonce is from the run's start: only the floor applies now.
            check_clock(now, None),
        )
        envelope = sign_report(self.key, request, measurement, now)
        write_atomic(self.report_path(request.run_id), envelope)
        _forget_run(run_dir)
        return True

    def _move_aside(self, run_dir: Path, error: BaseException) -> None:
        aside = self.state_dir / UNRECOVERABLE_DIR
        target = aside / run_dir.name
        try:
            aside.mkdir(exist_ok=True)
            if target.exists():
                target = aside / f"{run_dir.name}.{secrets.token_hex(4)}"
            shutil.move(str(run_dir), str(target))
        except OSError as move_error:
            log.error(
                "run %s cannot be recovered (%s: %s) nor moved aside (%s); it is left in place",
                run_dir.name,
                type(error).__name__,
                error,
                move_error,
            )
            return
        log.error(
            "run %s cannot be recovered (%s: %s); moved to %s",
            run_dir.name,
            type(error).__name__,
            error,
            target,
        )
