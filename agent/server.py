"""The agent's gRPC service (``edgequal.v1.Agent``) plus the standard health service.

Wire types stay here: requests are converted to plain values at the top of each
handler, and every :class:`~edgequal.agent.errors.AgentError` is turned into a
gRPC status in one place (:func:`status_for`). Unexpected exceptions become
INTERNAL with a generic message; the traceback goes to the agent's log only.

One qualification runs at a time, under a lease (run id, holder, expiry). The
run executes in its own thread, not the RPC's, so a host that disconnects does
not stop it; its signed report is stored on the device and can be fetched with
GetReport. The run machinery (``edgequal.agent.runner``) is imported only when a
run starts, which keeps an idle agent small.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import platform
import queue
import re
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..protos import edgequal_v1_pb2 as pb
from ..protos import edgequal_v1_pb2_grpc as pb_grpc
from . import __version__
from .auth import (
    BearerTokenInterceptor,
    TlsServerConfig,
    check_listen_allowed,
    server_credentials,
)
from .errors import (
    AgentError,
    BadInput,
    DeviceBusy,
    DigestMismatch,
    ModelRejected,
    QuotaExceeded,
    RuntimeUnavailable,
    WorkerFailed,
)
from .keys import DeviceKey, load_or_create_device_key
from .store import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactStore, validate_digest

log = logging.getLogger(__name__)

PROTOCOL = "edgequal.v1"
SERVICE_NAME = "edgequal.v1.Agent"
CHUNK_BYTES = 1024 * 1024
"""Push chunk size the agent suggests (Info.limits.chunk_bytes)."""
MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024 + 64 * 1024
"""Largest message the agent accepts: a 4 MiB chunk plus its envelope; clients stream, not inflate."""
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message the agent sends: a signed report with raw samples fits well within it."""
DEFAULT_MAX_RUN_S = 4 * 3600.0
"""A run still going after this long is cancelled (it ends with a signed report)."""
ERROR_CLASS_KEY = "edgequal-error"
"""Trailing metadata naming the AgentError subclass, so a client can tell busy from quota."""
ERROR_HINT_KEY = "edgequal-hint"

# gRPC status for each AgentError subclass; the first match in this order wins.
_STATUS_BY_ERROR: tuple[tuple[type[AgentError], grpc.StatusCode], ...] = (
    (DigestMismatch, grpc.StatusCode.INVALID_ARGUMENT),
    (QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeviceBusy, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BadInput, grpc.StatusCode.INVALID_ARGUMENT),  # includes GoldenMismatch
    (ModelRejected, grpc.StatusCode.INVALID_ARGUMENT),
    (RuntimeUnavailable, grpc.StatusCode.FAILED_PRECONDITION),
    (WorkerFailed, grpc.StatusCode.INTERNAL),
)
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def status_for(error: BaseException) -> grpc.StatusCode:
    """The gRPC status code for an exception raised by a handler (INTERNAL when unknown)."""
    for cls, code in _STATUS_BY_ERROR:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _abort(context: grpc.ServicerContext, error: BaseException, rpc: str) -> None:
    """End the RPC with the status for ``error``; never sends a traceback."""
    if isinstance(error, AgentError):
        metadata = [(ERROR_CLASS_KEY, type(error).__name__)]
        if error.hint:
            metadata.append((ERROR_HINT_KEY, error.hint))
        context.set_trailing_metadata(tuple(metadata))
        context.abort(status_for(error), str(error))
    log.error("unexpected error in %s", rpc, exc_info=error)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in the agent's {rpc}; see its log")


def _client_gone(error: BaseException) -> bool:
    # The request iterator raises a bare RpcError when the client cancelled or vanished.
    return isinstance(error, grpc.RpcError)


def _unary_errors(method):
    """Map exceptions of a unary-response handler to statuses."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as e:
            if _client_gone(e):
                log.info("%s: the client went away", method.__name__)
                raise
            _abort(context, e, method.__name__)

    return wrapper


def _stream_errors(method):
    """Map exceptions of a response-streaming handler to statuses."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            yield from method(self, request, context)
        except Exception as e:
            _abort(context, e, method.__name__)

    return wrapper


# -- what the device has -------------------------------------------------------

# (report name, importable modules, distributions, how to install)
_KNOWN_RUNTIMES = (
    (
        "onnxruntime",
        ("onnxruntime",),
        ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"),
        "pip install 'edgequal[onnx]' (onnxruntime)",
    ),
    (
        "litert",
        ("ai_edge_litert", "tflite_runtime"),
        ("ai-edge-litert", "tflite-runtime"),
        "pip install 'edgequal[litert]' (ai-edge-litert), or tflite-runtime where no "
        "ai-edge-litert wheel exists for this platform",
    ),
)


def detect_runtimes() -> list[dict]:
    """Which inference runtimes are installed, with versions, found without importing them."""
    result = []
    for name, modules, dists, install in _KNOWN_RUNTIMES:
        entry = {"name": name, "available": False, "version": "", "reason": "", "distribution": ""}
        for dist in dists:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            entry.update(version=version, distribution=dist)
            if any(importlib.util.find_spec(m) is not None for m in modules):
                entry["available"] = True
            else:
                entry["reason"] = (
                    f"distribution {dist} {version} is installed but none of the modules "
                    f"{', '.join(modules)} can be found; reinstall it"
                )
            break
        if not entry["distribution"]:
            entry["reason"] = f"not installed: {install}"
        if entry["available"]:
            entry["reason"] = ""
        result.append(entry)
    return result


def basic_fingerprint(root: Path) -> dict:
    """A minimal fingerprint (OS, kernel, machine, Python, board model) for when no probe is wired."""
    fp = {
        "system": platform.system(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    for key, rel in (("board_model", "proc/device-tree/model"), ("os_release", "etc/os-release")):
        try:
            text = (Path(root) / rel).read_text(errors="replace")
        except OSError:
            continue
        if key == "os_release":
            for line in text.splitlines():
                if line.startswith("PRETTY_NAME="):
                    fp["os"] = line.split("=", 1)[1].strip().strip('"')
        else:
            fp[key] = text.strip("\x00\n ")
    return fp


# -- the one-run-at-a-time lease -------------------------------------------------


@dataclass
class Lease:
    """Who holds the device: one qualification, until it ends or its lease expires."""

    run_id: str
    holder: str
    started_unix_ms: int
    expires_unix_ms: int

    def describe(self, now_ms: int | None = None) -> str:
        """One line naming the run, its holder, and its times."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        started_s = max(0, (now_ms - self.started_unix_ms) // 1000)
        left_s = max(0, (self.expires_unix_ms - now_ms) // 1000)
        return (
            f"run {self.run_id} for {self.holder} is in progress "
            f"(started {started_s} s ago, lease expires in {left_s} s)"
        )


@dataclass
class _ActiveRun:
    """A run in progress: its lease, cancel switch, and the queue feeding its stream."""

    lease: Lease
    cancel: threading.Event = field(default_factory=threading.Event)
    outbox: queue.Queue = field(default_factory=queue.Queue)
    detached: threading.Event = field(default_factory=threading.Event)
    timer: threading.Timer | None = None

    def post_event(self, event: dict) -> None:
        """Forward one progress event to the stream (dropped once the client is gone)."""
        if self.detached.is_set():
            return
        self.outbox.put(("event", json.dumps(event, default=str)))


class RunSlot:
    """The single slot a qualification occupies; a second caller gets DeviceBusy."""

    def __init__(self):
        self._lock = threading.Lock()
        self._run: _ActiveRun | None = None

    def start(self, run_id: str, holder: str, max_run_s: float) -> _ActiveRun:
        """Take the slot for ``run_id`` or raise DeviceBusy naming the run that holds it."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            if self._run is not None:
                raise DeviceBusy(
                    "device busy: " + self._run.lease.describe(now_ms),
                    hint="try again when it ends; its holder can cancel it by run id",
                )
            lease = Lease(run_id, holder, now_ms, now_ms + int(max_run_s * 1000))
            run = _ActiveRun(lease)
            # The lease is enforced, not just shown: an overrun is cancelled and still reported.
            run.timer = threading.Timer(max_run_s, run.cancel.set)
            run.timer.daemon = True
            run.timer.start()
            self._run = run
            return run

    def finish(self, run: _ActiveRun) -> None:
        """Free the slot held by ``run``."""
        if run.timer is not None:
            run.timer.cancel()
        with self._lock:
            if self._run is run:
                self._run = None

    def current(self) -> _ActiveRun | None:
        """The run holding the device, if any."""
        with self._lock:
            return self._run


# -- the service ---------------------------------------------------------------


def _parse_json(text: str, what: str, kind: type):
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise BadInput(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, kind):
        raise BadInput(f"{what} must be a JSON {'object' if kind is dict else 'list'}")
    return value


def _runtime_status(entry: dict) -> pb.RuntimeStatus:
    """One runtime dict (name, available, version, reason, distribution) as protobuf."""
    return pb.RuntimeStatus(
        name=str(entry.get("name", "")),
        available=bool(entry.get("available", False)),
        version=str(entry.get("version") or ""),
        reason=str(entry.get("reason") or ""),
        distribution=str(entry.get("distribution") or ""),
    )


def _check_run_id(run_id: str) -> str:
    if not _RUN_ID_RE.fullmatch(run_id or ""):
        raise BadInput(f"not a run id: {run_id[:80]!r}")
    return run_id


class _WriteBehind:
    """Writes an upload's chunks in a second thread.

    Receiving the next chunk then overlaps writing, hashing and syncing this
    one; the bounded queue (``depth`` chunks) pushes back on the sender when
    the disk is slower than the network. An error from a write is raised by the
    next ``put`` or by ``finish``.
    """

    def __init__(self, upload, depth: int = 4):
        self.upload = upload
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(
            target=self._loop, name=f"push-{upload.digest[:12]}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.error is not None:
                continue  # drain without writing past a failed chunk
            try:
                self.upload.write(*item)
            except BaseException as e:
                self.error = e

    def put(self, offset: int, data: bytes) -> None:
        """Queue one chunk (blocks while ``depth`` chunks wait)."""
        if self.error is not None:
            raise self.error
        self._queue.put((offset, data))

    def finish(self) -> None:
        """Write what is queued, stop the thread, raise the first write error if any."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error


class AgentService(pb_grpc.AgentServicer):
    """Handlers for ``edgequal.v1.Agent``; protobuf in, protobuf out, plain values inside."""

    def __init__(
        self,
        *,
        state_dir: Path,
        root: Path,
        store: ArtifactStore,
        key: DeviceKey,
        fingerprint_fn: Callable[[Path], dict] | None = None,
        runtimes_fn: Callable[[], list[dict]] | None = None,
        max_run_s: float = DEFAULT_MAX_RUN_S,
    ):
        self.state_dir = Path(state_dir)
        self.root = Path(root)
        self.store = store
        self.key = key
        self.fingerprint_fn = fingerprint_fn or basic_fingerprint
        self.runtimes_fn = runtimes_fn or detect_runtimes
        self.max_run_s = float(max_run_s)
        self.slot = RunSlot()
        self._pushes_lock = threading.Lock()
        self.pushes_in_flight = 0
        """Push calls still being handled (a cut-off client's call ends shortly after it dies)."""

    # Info ---------------------------------------------------------------------

    @_unary_errors
    def Info(self, request, context):
        """What the device is, its runtimes, its key, and whether it is busy."""
        try:
            fingerprint = self.fingerprint_fn(self.root)
        except Exception as e:  # a broken probe must not hide the rest of Info
            log.exception("fingerprint failed")
            fingerprint = {"error": f"fingerprint failed: {type(e).__name__}: {e}"}
        response = pb.InfoResponse(
            agent_version=__version__,
            protocol=PROTOCOL,
            fingerprint_json=json.dumps(fingerprint, sort_keys=True, default=str),
            runtimes=[_runtime_status(r) for r in self.runtimes_fn()],
            public_key_raw=self.key.public_key_raw(),
            key_fingerprint=self.key.fingerprint(),
            limits=pb.Limits(
                max_artifact_bytes=self.store.max_artifact_bytes,
                chunk_bytes=CHUNK_BYTES,
                max_receive_message_bytes=MAX_RECEIVE_MESSAGE_BYTES,
                quota_bytes=self.store.quota_bytes or 0,
            ),
        )
        run = self.slot.current()
        if run is not None:
            response.busy = True
            lease = run.lease
            response.lease.CopyFrom(
                pb.Lease(
                    run_id=lease.run_id,
                    holder=lease.holder,
                    started_unix_ms=lease.started_unix_ms,
                    expires_unix_ms=lease.expires_unix_ms,
                )
            )
        return response

    # Stat and Push ------------------------------------------------------------

    @_unary_errors
    def Stat(self, request, context):
        """The committed offset of an artifact and whether it is complete."""
        digest = validate_digest(request.digest)
        return pb.StatResponse(
            digest=digest,
            committed_size=self.store.committed_offset(digest),
            complete=self.store.has(digest),
        )

    @_unary_errors
    def Push(self, request_iterator, context):
        """Append chunks at the committed offset; verify and store once all bytes arrived."""
        with self._pushes_lock:
            self.pushes_in_flight += 1
        upload = writer = None
        try:
            for chunk in request_iterator:
                if upload is None:
                    digest = validate_digest(chunk.digest)
                    upload = self.store.open_upload(digest, chunk.total_size)
                    if upload.complete:
                        # Already stored: answer at once; the rest of the stream is dropped.
                        return pb.PushResponse(
                            digest=digest,
                            committed_size=upload.offset,
                            bytes_received=0,
                            complete=True,
                        )
                    writer = _WriteBehind(upload)
                elif (chunk.digest and chunk.digest != upload.digest) or (
                    chunk.total_size and chunk.total_size != upload.total_size
                ):
                    raise BadInput(
                        "a Push carries one artifact: digest and total_size must not change "
                        f"(started as sha256:{upload.digest}, {upload.total_size} bytes)"
                    )
                writer.put(chunk.offset, chunk.data)
            if upload is None:
                raise BadInput("empty Push: the first chunk must carry digest and total_size")
            writer.finish()
            if upload.offset == upload.total_size:
                upload.commit()
            else:
                log.info(
                    "push of sha256:%s paused at %d of %d bytes; it resumes from there",
                    upload.digest,
                    upload.offset,
                    upload.total_size,
                )
            return pb.PushResponse(
                digest=upload.digest,
                committed_size=upload.offset,
                bytes_received=upload.bytes_received,
                complete=upload.complete,
            )
        finally:
            if writer is not None:
                # Keep what arrived before a client vanished: it is where the resume starts.
                with contextlib.suppress(BaseException):
                    writer.finish()
            if upload is not None:
                upload.close()
            with self._pushes_lock:
                self.pushes_in_flight -= 1

    # Qualify ------------------------------------------------------------------

    @_stream_errors
    def Qualify(self, request, context):
        """Start a run, stream its events, end with its signed envelope."""
        plan = _parse_json(request.plan_json or "{}", "plan_json", dict)
        model_digest = validate_digest(request.model_digest)
        self.store.path(model_digest)  # a clear error before taking the device
        golden_digest = request.golden_digest or None
        if golden_digest is not None:
            self.store.path(validate_digest(golden_digest))
        if not request.nonce:
            raise BadInput("a qualification needs the host's nonce (QualifyRequest.nonce)")
        if request.extra_subjects_json:
            # Reserved for external-data files; until the host pushes them, refuse plainly.
            raise BadInput("this agent does not take extra report subjects yet")
        holder = request.holder or context.peer() or "unknown"

        runner = importlib.import_module("edgequal.agent.runner")
        run_id = runner.new_run_id()
        run_request = runner.RunRequest(
            run_id=run_id,
            model_digest=model_digest,
            golden_digest=golden_digest,
            plan=plan,
            nonce=request.nonce,
            model_name=request.model_name or "model",
            golden_name=request.golden_name or None,
        )

        run = self.slot.start(run_id, holder, self.max_run_s)
        try:
            thread = threading.Thread(
                target=self._execute, args=(runner, run, run_request), name=f"run-{run_id}"
            )
            thread.daemon = True
            thread.start()
        except BaseException:
            self.slot.finish(run)
            raise
        log.info("run %s started for %s", run_id, holder)
        try:
            yield pb.QualifyMessage(run_id=run_id)
            while True:
                try:
                    kind, payload = run.outbox.get(timeout=1.0)
                except queue.Empty:
                    if not context.is_active():
                        return
                    continue
                if kind == "event":
                    yield pb.QualifyMessage(run_id=run_id, event_json=payload)
                elif kind == "envelope":
                    yield pb.QualifyMessage(run_id=run_id, envelope=payload)
                    return
                else:
                    raise payload
        finally:
            if not run.detached.is_set() and context.is_active() is False:
                log.info("host left run %s; it continues and its report is kept", run_id)
            run.detached.set()

    def _execute(self, runner, run: _ActiveRun, run_request) -> None:
        """Run one qualification (in its own thread), then free the device and post the outcome."""
        try:
            envelope = runner.execute_run(
                state_dir=self.state_dir,
                key=self.key,
                store=self.store,
                request=run_request,
                root=self.root,
                on_event=run.post_event,
                cancel=run.cancel,
            )
            outcome = ("envelope", bytes(envelope))
        except BaseException as e:
            if not isinstance(e, AgentError):
                log.exception("run %s failed unexpectedly", run.lease.run_id)
            outcome = ("error", e)
        finally:
            # Free the device before the host sees the end, so its next run is not told "busy".
            self.slot.finish(run)
        log.info("run %s ended: %s", run.lease.run_id, outcome[0])
        run.outbox.put(outcome)

    # GetReport and Cancel -----------------------------------------------------

    @_unary_errors
    def GetReport(self, request, context):
        """The stored signed envelope of a finished run."""
        run_id = _check_run_id(request.run_id)
        run = self.slot.current()
        if run is not None and run.lease.run_id == run_id:
            raise DeviceBusy(
                f"run {run_id} is still in progress; its report is stored when it ends",
                hint="ask again later",
            )
        runner = importlib.import_module("edgequal.agent.runner")
        return pb.GetReportResponse(
            run_id=run_id, envelope=runner.read_report(self.state_dir, run_id)
        )

    @_unary_errors
    def Cancel(self, request, context):
        """Ask the run in progress to stop; it still ends with a signed report."""
        run_id = _check_run_id(request.run_id)
        run = self.slot.current()
        if run is None or run.lease.run_id != run_id:
            return pb.CancelResponse(cancelled=False, message=f"run {run_id} is not in progress")
        run.cancel.set()
        log.info("run %s: cancel requested", run_id)
        return pb.CancelResponse(
            cancelled=True, message=f"run {run_id} is stopping; its report says it was cancelled"
        )


# -- building and running the server ---------------------------------------------


@dataclass
class AgentServer:
    """A built agent: the grpc server, its bound port, the service and the health servicer."""

    server: grpc.Server
    port: int
    listen: str
    service: AgentService
    health: health.HealthServicer

    def start(self) -> AgentServer:
        """Start serving and report SERVING."""
        self.server.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Report NOT_SERVING, refuse new calls and wait up to ``grace_s`` for running ones."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()

    def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (or ``timeout_s`` passes)."""
        return self.server.wait_for_termination(timeout_s)


def server_options() -> list[tuple[str, int]]:
    """Channel options: explicit message limits, and keepalive that notices a vanished host."""
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 1),
        # Accept the client's 30 s pings (the default 5 min minimum would GOAWAY them).
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 0),
        # Two agents must not silently share one port.
        ("grpc.so_reuseport", 0),
    ]


def build_server(
    listen: str,
    state_dir: Path,
    root: Path,
    token: str | None = None,
    tls: TlsServerConfig | tuple | None = None,
    *,
    key: DeviceKey | None = None,
    store: ArtifactStore | None = None,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    quota_bytes: int | None = None,
    fingerprint_fn: Callable[[Path], dict] | None = None,
    runtimes_fn: Callable[[], list[dict]] | None = None,
    max_run_s: float = DEFAULT_MAX_RUN_S,
    max_workers: int = 8,
) -> AgentServer:
    """Build (not start) an agent bound to ``listen`` (``HOST:PORT``; port 0 picks one).

    Refuses a listener without token or mutual TLS anywhere but loopback.
    """
    tls = TlsServerConfig.coerce(tls)
    check_listen_allowed(listen, token, tls)
    state_dir = Path(state_dir)
    if key is None:
        key = load_or_create_device_key(state_dir)
    if store is None:
        store = ArtifactStore(
            state_dir / "artifacts", max_artifact_bytes=max_artifact_bytes, quota_bytes=quota_bytes
        )
    service = AgentService(
        state_dir=state_dir,
        root=Path(root),
        store=store,
        key=key,
        fingerprint_fn=fingerprint_fn,
        runtimes_fn=runtimes_fn,
        max_run_s=max_run_s,
    )
    health_servicer = health.HealthServicer()
    # NOT_SERVING until start(), so a probe never sees a half-ready agent as healthy.
    health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="edgequal-rpc"),
        interceptors=[BearerTokenInterceptor(token)] if token else [],
        options=server_options(),
        maximum_concurrent_rpcs=max_workers * 4,
    )
    pb_grpc.add_AgentServicer_to_server(service, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        if tls is not None:
            port = server.add_secure_port(listen, server_credentials(tls))
        else:
            port = server.add_insecure_port(listen)
    except RuntimeError as e:
        raise AgentError(
            f"cannot listen on {listen}: {e}", hint="is another agent using that port?"
        ) from e
    if not port:
        raise AgentError(f"cannot listen on {listen}", hint="is another agent using that port?")
    return AgentServer(server, port, listen, service, health_servicer)


def serve(
    listen: str,
    state_dir: Path,
    root: Path,
    token: str | None = None,
    tls: TlsServerConfig | tuple | None = None,
    **kwargs,
) -> AgentServer:
    """Build, recover interrupted runs, start; returns the started :class:`AgentServer`.

    The caller blocks on ``.wait_for_termination()`` and calls ``.stop()`` on
    SIGTERM. Keyword arguments are those of :func:`build_server`.
    """
    agent = build_server(listen, state_dir, root, token, tls, **kwargs)
    service = agent.service
    for name in service.store.remove_stale_partials():
        log.info("removed stale partial upload %s", name)
    from .runner import recover_interrupted_runs

    for run_id in recover_interrupted_runs(service.state_dir, service.key):
        log.warning("run %s was interrupted by an agent restart; signed as incomplete", run_id)
    agent.start()
    log.info(
        "edgequal agent %s listening on %s (port %d), key %s",
        __version__,
        listen,
        agent.port,
        service.key.fingerprint(),
    )
    return agent
