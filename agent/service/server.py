"""The agent's gRPC service (``edgequal.v1.Agent``) plus the standard health service.

Wire types stay here: requests are converted to plain values at the top of each
handler, and every :class:`~edgequal.contract.errors.AgentError` is turned into a
gRPC status in one place (:func:`status_for`). Unexpected exceptions become
INTERNAL with a generic message; the traceback goes to the agent's log only.

One qualification runs at a time, under a lease (run id, holder, expiry). The
run executes in its own thread, not the RPC's, so a host that disconnects does
not stop it; its signed report is stored on the device and can be fetched with
GetReport. The service is handed its parts: the artifact store, the device key,
the runs (``edgequal.agent.runs.Runs``, or a stand-in in a plumbing test), the
fingerprint and runtime detection. The lease lives in ``lease``, upload writing
in ``write_behind``, what Info says in ``info``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from edgequal.contract import __version__
from edgequal.contract.artifacts import validate_digest
from edgequal.contract.errors import (
    AgentError,
    BadInput,
    DeviceBusy,
    DigestMismatch,
    ModelRejected,
    QuotaExceeded,
    RuntimeUnavailable,
    WorkerFailed,
)
from edgequal.contract.identity import prove_identity
from edgequal.contract.info import (
    MAX_RECEIVE_MESSAGE_BYTES,
    MAX_SEND_MESSAGE_BYTES,
    AgentInfo,
    Limits,
)
from edgequal.contract.keys import DeviceKey, load_or_create_device_key
from edgequal.contract.plan import Plan
from edgequal.contract.runtimes import RuntimeStatus
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..phases.coload import config_path, resolve_plan
from ..run_request import (
    RunRequest,
    check_extra_files,
    check_plan_bounds,
    check_run_id,
    subjects_as_files,
)
from ..runs import Runs
from ..runtimes import detect_runtimes
from ..runtimes.envs import RuntimeEnvs, resolve_plan_envs
from .admission import MAX_CALLS_IN_FLIGHT, AdmissionInterceptor, pool_threads
from .auth import (
    BearerTokenInterceptor,
    TlsServerConfig,
    check_listen_allowed,
    server_credentials,
)
from .lease import DEFAULT_MAX_RUN_S, ActiveRun, RunSlot
from .state_lock import StateLock
from .store import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactStore
from .write_behind import WriteBehind

log = logging.getLogger(__name__)

SERVICE_NAME = "edgequal.v1.Agent"
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


# -- the service ---------------------------------------------------------------


def _parse_json(text: str, what: str, kind: type):
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise BadInput(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, kind):
        raise BadInput(f"{what} must be a JSON {'object' if kind is dict else 'list'}")
    return value


class AgentService(pb_grpc.AgentServicer):
    """Handlers for ``edgequal.v1.Agent``; protobuf in, protobuf out, plain values inside."""

    def __init__(
        self,
        *,
        store: ArtifactStore,
        key: DeviceKey,
        runs: Runs,
        root: Path = Path("/"),
        fingerprint_fn: Callable[[Path], dict] | None = None,
        runtimes_fn: Callable[[], list[RuntimeStatus]] | None = None,
        max_run_s: float = DEFAULT_MAX_RUN_S,
        slot: RunSlot | None = None,
        config: Path | None = None,
        runtime_envs: RuntimeEnvs | None = None,
    ):
        self.root = Path(root)
        # The device's runtime environments: a plan may name them, no RPC installs one.
        self.runtime_envs = runtime_envs
        self.config = config  # the agent's configuration file: its named co-load commands
        self.store = store
        self.key = key
        self.runs = runs
        self.fingerprint_fn = fingerprint_fn or _probe_fingerprint
        self.runtimes_fn = runtimes_fn or detect_runtimes
        self.max_run_s = float(max_run_s)
        self.slot = slot or RunSlot()
        self._pushes_lock = threading.Lock()
        self.pushes_in_flight = 0
        """Push calls still being handled (a cut-off client's call ends shortly after it dies)."""

    def info(self) -> AgentInfo:
        """What Info answers, as the typed :class:`AgentInfo`."""
        try:
            fingerprint = self.fingerprint_fn(self.root)
        except Exception as e:  # a broken probe must not hide the rest of Info
            log.exception("fingerprint failed")
            fingerprint = {"error": f"fingerprint failed: {type(e).__name__}: {e}"}
        lease = self.slot.lease()
        if self.runtime_envs is not None:
            # The last known state at once: a hung import must not hold Info (probes run in
            # the background, none started while a run holds the device).
            envs = self.runtime_envs.statuses(wait=False, start=lease is None)
            fingerprint = {**fingerprint, "runtime_envs": envs}
        return AgentInfo(
            agent_version=__version__,
            fingerprint=fingerprint,
            runtimes=list(self.runtimes_fn()),
            public_key_raw=self.key.public_key_raw(),
            key_fingerprint=self.key.fingerprint(),
            limits=Limits.of_store(self.store),
            lease=lease,
        )

    # Info ---------------------------------------------------------------------

    @_unary_errors
    def Info(self, request, context):
        """What the device is, its runtimes, its key, and whether it is busy."""
        return self.info().as_pb2()

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
                    writer = WriteBehind(upload)
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
        plan_json = _parse_json(request.plan_json or "{}", "plan_json", dict)
        check_plan_bounds(plan_json, self.max_run_s)
        plan = Plan.from_json(plan_json)  # the one parse of this run's plan
        resolve_plan(plan, self.store, self.config)  # refused before the device is taken
        resolve_plan_envs(plan, self.runtime_envs)  # an unknown name too
        model_digest = validate_digest(request.model_digest)
        self.store.path(model_digest)  # a clear error before taking the device
        golden_digest = request.golden_digest or None
        if golden_digest is not None:
            self.store.path(validate_digest(golden_digest))
        if not request.nonce:
            raise BadInput("a qualification needs the host's nonce (QualifyRequest.nonce)")
        extra_files = []
        if request.extra_subjects_json:
            # The model's external-data files, pushed beside it: [{name, digest: {sha256}}].
            extra = _parse_json(request.extra_subjects_json, "extra_subjects_json", list)
            extra_files = check_extra_files(
                request.model_name, subjects_as_files(extra), self.store
            )
        holder = request.holder or context.peer() or "unknown"

        run_id = self.runs.new_run_id()
        run_request = RunRequest(
            run_id=run_id,
            model_digest=model_digest,
            golden_digest=golden_digest,
            plan=plan,
            nonce=request.nonce,
            model_name=request.model_name or "model",
            golden_name=request.golden_name or None,
            extra_files=extra_files,
        )

        expected_s = plan.timed_s()
        run = self.slot.start(
            run_id, holder, self.max_run_s, lease_id=request.lease_id, expected_s=expected_s
        )
        try:
            thread = threading.Thread(
                target=self._execute, args=(run, run_request), name=f"run-{run_id}"
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
                    self.runs.mark_delivered(run_id)  # before it leaves: one report per run
                    yield pb.QualifyMessage(run_id=run_id, envelope=payload)
                    return
                else:
                    raise payload
        finally:
            if not run.detached.is_set() and context.is_active() is False:
                log.info("host left run %s; it continues and its report is kept", run_id)
            run.detached.set()

    def _execute(self, run: ActiveRun, run_request: RunRequest) -> None:
        """Run one qualification (in its own thread), then free the device and post how it ended."""
        try:
            settle = getattr(self.runtimes_fn, "settle", None)
            if settle is not None:
                settle()  # a trial import must not load the CPU beside a measurement
            if self.runtime_envs is not None:
                self.runtime_envs.settle()  # nor an environment's (each bounded)
            envelope = self.runs.execute(run_request, on_event=run.post_event, cancel=run.cancel)
            ended = ("envelope", bytes(envelope))
        except BaseException as e:
            if not isinstance(e, AgentError):
                log.exception("run %s failed unexpectedly", run.lease.run_id)
            ended = ("error", e)
        finally:
            # Free the device before the host sees the end, so its next run is not told "busy".
            self.slot.finish(run)
        log.info("run %s ended: %s", run.lease.run_id, ended[0])
        run.outbox.put(ended)

    # GetReport and Cancel -----------------------------------------------------

    @_unary_errors
    def GetReport(self, request, context):
        """The stored signed envelope of a finished run."""
        run_id = check_run_id(request.run_id)
        run = self.slot.current()
        if run is not None and run.lease.run_id == run_id:
            raise DeviceBusy(
                f"run {run_id} is still in progress; its report is stored when it ends",
                hint="ask again later",
            )
        envelope = self.runs.read_report(run_id)
        self.runs.mark_delivered(run_id)  # before it leaves: one report per run
        return pb.GetReportResponse(run_id=run_id, envelope=envelope)

    @_unary_errors
    def Cancel(self, request, context):
        """Ask the run in progress to stop; it still ends with a signed report."""
        run_id = check_run_id(request.run_id)
        run = self.slot.current()
        if run is None or run.lease.run_id != run_id:
            return pb.CancelResponse(cancelled=False, message=f"run {run_id} is not in progress")
        run.cancel.set()
        log.info("run %s: cancel requested", run_id)
        return pb.CancelResponse(
            cancelled=True, message=f"run {run_id} is stopping; its report says it was cancelled"
        )

    # Prove ---------------------------------------------------------------------

    @_unary_errors
    def Prove(self, request, context):
        """Sign the host's challenge with the device key (no token needed; see ``identity``)."""
        return pb.ProveResponse(
            public_key_raw=self.key.public_key_raw(),
            key_fingerprint=self.key.fingerprint(),
            signature=prove_identity(self.key, bytes(request.challenge)),
        )

    # Leases ------------------------------------------------------------------

    @_unary_errors
    def AcquireLease(self, request, context):
        """Take the device lease, or wait in line for it (see ``lease.RunSlot.acquire``)."""
        result = self.slot.acquire(
            request.holder or context.peer() or "unknown",
            request.purpose,
            request.ttl_s,
            wait_s=request.wait_s,
            ticket=request.ticket,
        )
        response = pb.AcquireLeaseResponse(
            granted=result.granted,
            lease_id=result.lease_id,
            ticket=result.ticket,
            position=result.position,
        )
        if result.current is not None:
            response.lease.CopyFrom(pb.Lease(**result.current.to_json()))
        return response

    @_unary_errors
    def RenewLease(self, request, context):
        """Extend a held lease."""
        lease = self.slot.renew(request.lease_id, request.ttl_s)
        return pb.RenewLeaseResponse(lease=pb.Lease(**lease.to_json()))

    @_unary_errors
    def ReleaseLease(self, request, context):
        """Give a lease back."""
        return pb.ReleaseLeaseResponse(released=self.slot.release(request.lease_id))


def _probe_fingerprint(root: Path) -> dict:
    from ..probes.fingerprint import fingerprint

    return fingerprint(root)


# -- building and running the server ---------------------------------------------


@dataclass
class AgentServer:
    """A built agent: the grpc server, its bound port, the service, health, and its state lock."""

    server: grpc.Server
    port: int
    listen: str
    service: AgentService
    health: health.HealthServicer
    state_lock: StateLock | None = None

    def start(self) -> AgentServer:
        """Start serving and report SERVING."""
        self.server.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Report NOT_SERVING, refuse new calls, wait up to ``grace_s`` for running ones, unlock."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()
        if self.state_lock is not None:
            self.state_lock.release()

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
    runs: Runs | None = None,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    quota_bytes: int | None = None,
    min_free_bytes: int | None = None,
    memory_limit_mb: int | None = None,
    env_probe_timeout_s: float | None = None,
    fingerprint_fn: Callable[[Path], dict] | None = None,
    runtimes_fn: Callable[[], list[RuntimeStatus]] | None = None,
    max_run_s: float = DEFAULT_MAX_RUN_S,
    max_workers: int | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> AgentServer:
    """Build (not start) an agent bound to ``listen`` (``HOST:PORT``; port 0 picks one).

    Refuses a listener without token or mutual TLS anywhere but loopback, and a
    state directory another agent holds (DeviceBusy). ``runs`` defaults to the
    real :class:`~edgequal.agent.runs.Runs` of ``state_dir``. ``quota_bytes``,
    ``min_free_bytes`` (the free-space floor) and ``max_artifact_bytes`` are the
    store's limits, ``memory_limit_mb`` the worker's for plans that set none (None:
    half the board's memory), ``env_probe_timeout_s`` the bound of a runtime environment's
    trial import (None: 20 s); ``wall_clock`` is the device's wall clock (dates in
    reports and what a lease shows; nothing expires on it). ``max_workers``
    defaults to what the call classes need (``admission.pool_threads``).
    """
    tls = TlsServerConfig.coerce(tls)
    check_listen_allowed(listen, token, tls)
    state_dir = Path(state_dir)
    state_lock = StateLock.acquire(state_dir, "serve")
    try:
        if key is None:
            key = load_or_create_device_key(state_dir)
        if store is None:
            store = ArtifactStore(
                state_dir / "artifacts",
                max_artifact_bytes=max_artifact_bytes,
                quota_bytes=quota_bytes,
                **({} if min_free_bytes is None else {"reserve_bytes": min_free_bytes}),
            )
        if runs is None:
            runs = Runs(
                state_dir,
                key,
                store,
                Path(root),
                clock=wall_clock,
                memory_limit_mb=memory_limit_mb,
            )
        service = AgentService(
            store=store,
            key=key,
            runs=runs,
            root=Path(root),
            fingerprint_fn=fingerprint_fn,
            runtimes_fn=runtimes_fn,
            max_run_s=max_run_s,
            slot=RunSlot(on_change=state_lock.set_lease, wall_clock=wall_clock),
            config=config_path(state_dir),
            runtime_envs=RuntimeEnvs(state_dir, probe_timeout_s=env_probe_timeout_s),
        )
        health_servicer = health.HealthServicer()
        # NOT_SERVING until start(), so a probe never sees a half-ready agent as healthy.
        health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
        auth = BearerTokenInterceptor(token) if token else None
        admission = AdmissionInterceptor(auth.authorized if auth else None)
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=max_workers or pool_threads(), thread_name_prefix="edgequal-rpc"
            ),
            # Admission first: a call refused for its token still counts as a public call.
            interceptors=[admission, auth] if auth else [admission],
            options=server_options(),
            maximum_concurrent_rpcs=MAX_CALLS_IN_FLIGHT,
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
        state_lock.set_endpoint(listen, port)
    except BaseException:
        state_lock.release()
        raise
    return AgentServer(server, port, listen, service, health_servicer, state_lock)


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
    SIGTERM. Keyword arguments are those of :func:`build_server`. Recovery never
    stops the agent from starting: a run it cannot sign is moved aside and logged.
    """
    agent = build_server(listen, state_dir, root, token, tls, **kwargs)
    service = agent.service
    for name in service.store.remove_stale_partials():
        log.info("removed stale partial upload %s", name)
    for run_id in service.runs.recover_interrupted():
        log.warning("run %s was interrupted by an agent restart; signed as incomplete", run_id)
    try:
        service.runs.ensure_reserve()
    except QuotaExceeded as e:  # serve anyway: Info, Stat and GetReport need no space
        log.warning("%s; runs are refused until there is room", e)
    agent.start()
    if service.runtime_envs is not None:
        service.runtime_envs.start_probing()  # off the request path; Info shows "probing"
    log.info(
        "edgequal agent %s listening on %s (port %d), key %s",
        __version__,
        listen,
        agent.port,
        service.key.fingerprint(),
    )
    return agent
