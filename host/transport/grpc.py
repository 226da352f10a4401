"""The gRPC transport: talks ``edgequal.v1.Agent`` to an agent at ``HOST:PORT``.

Every call has a deadline; gRPC statuses are mapped back to HostError
subclasses in one place (:func:`host_error`), using the agent's
``edgequal-error`` trailing metadata to tell a busy device from a full one.
Pushes are content-addressed and resumable: Stat first, skip what the agent
already holds, stream the rest from the committed offset, and on a broken
connection Stat again and continue.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from edgequal.contract.info import AgentInfo

from ...protos import edgequal_v1_pb2 as pb
from ...protos import edgequal_v1_pb2_grpc as pb_grpc
from ..errors import DeviceBusy, HostError, TransportError, UsageError, refuse_credentials
from .base import (
    IdentityProof,
    OpenOptions,
    ProgressEvent,
    PushResult,
    QualifyRequest,
    Transport,
    holder_name,
)
from .schemes import GRPC, is_scheme

CHUNK_BYTES = 1024 * 1024
"""Push chunk size: far below the agent's 4 MiB receive limit, large enough to keep per-message cost low."""
MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message accepted from the agent (a signed report with raw samples)."""
MIN_PUSH_RATE_BYTES_PER_S = 256 * 1024
"""A push slower than this overall is given up on (the deadline scales with the size)."""
PUSH_RETRIES = 3
ERROR_CLASS_KEY = "edgequal-error"
ERROR_HINT_KEY = "edgequal-hint"
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class TlsClientConfig:
    """TLS for the channel: the CA that signed the agent's certificate, and for mutual TLS
    this host's certificate and key (PEM files). ``server_name`` overrides the name checked
    against the agent's certificate (for agents addressed by IP)."""

    ca_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    server_name: str | None = None

    @classmethod
    def coerce(cls, tls: TlsClientConfig | tuple | None) -> TlsClientConfig | None:
        """Accept a config, a ``(ca_cert[, client_cert, client_key])`` tuple, or None."""
        if tls is None or isinstance(tls, cls):
            return tls
        parts = [None if p is None else Path(p) for p in tls]
        if len(parts) not in (1, 3):
            raise UsageError("TLS takes a CA certificate, optionally with a client cert and key")
        return cls(*parts)

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials from the PEM files."""

        def read(p: Path | None) -> bytes | None:
            if p is None:
                return None
            try:
                return Path(p).read_bytes()
            except OSError as e:
                raise UsageError(f"cannot read TLS file {p}: {e.strerror}") from e

        if (self.client_cert is None) != (self.client_key is None):
            raise UsageError("mutual TLS needs both a client certificate and its key")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_cert),
            private_key=read(self.client_key),
            certificate_chain=read(self.client_cert),
        )


def normalize_address(address: str) -> str:
    """``grpc://HOST:PORT`` or ``HOST:PORT`` -> ``HOST:PORT``; UsageError when there is no port."""
    addr = address.strip()
    refuse_credentials(addr if "://" in addr else f"grpc://{addr}")
    if is_scheme(addr, GRPC):
        addr = GRPC.rest(addr)
    addr = addr.rstrip("/")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(
            f"not a device address: {address!r}", hint="use grpc://HOST:PORT, e.g. grpc://pi5:7441"
        )
    if not 1 <= int(port) <= 65535:
        raise UsageError(
            f"not a device address: {address!r}: port {port} is outside 1-65535",
            hint="use grpc://HOST:PORT, e.g. grpc://pi5:7441",
        )
    return addr


def _error_class(error: grpc.RpcError) -> str:
    """The agent's exception class name from trailing metadata ('' when absent)."""
    if not hasattr(error, "trailing_metadata"):
        return ""
    return dict(error.trailing_metadata() or ()).get(ERROR_CLASS_KEY, "")


def host_error(error: grpc.RpcError, address: str, timeout_s: float | None = None) -> HostError:
    """The HostError for a failed call to the agent at ``address`` (one place for all RPCs)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else "") or ""
    trailing = dict(error.trailing_metadata() or ()) if hasattr(error, "trailing_metadata") else {}
    kind = trailing.get(ERROR_CLASS_KEY, "")
    hint = trailing.get(ERROR_HINT_KEY)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return TransportError(
            f"device at {address}: token rejected ({details})",
            hint="give the device's token with --token-file, $EDGEQUAL_TOKEN or its config entry",
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return TransportError(f"device at {address}: permission denied ({details})", hint=hint)
    if code == grpc.StatusCode.UNAVAILABLE:
        return TransportError(
            f"device at {address} does not answer ({details})",
            hint="check the address, that `edgequal-agent serve` runs there, and that TLS "
            "settings match on both sides",
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        within = f" within {timeout_s:g} s" if timeout_s else ""
        return TransportError(
            f"device at {address} did not answer{within}",
            hint="check the address and the network; a slow link needs a longer --timeout",
        )
    if kind == "DeviceBusy":
        msg = details if details.startswith(("device busy", "lease")) else f"device busy: {details}"
        return DeviceBusy(msg, hint=hint)
    if code == grpc.StatusCode.INVALID_ARGUMENT or kind == "QuotaExceeded":
        return UsageError(details, hint=hint)
    if code == grpc.StatusCode.CANCELLED:
        return TransportError(f"call to device at {address} was cancelled ({details})", hint=hint)
    return TransportError(f"device at {address}: {code.name}: {details}", hint=hint)


class GrpcTransport(Transport):
    """A connection to one agent over gRPC (insecure on loopback, else token and/or TLS)."""

    @classmethod
    def open_address(cls, address: str, options: OpenOptions) -> GrpcTransport:
        """``grpc://HOST:PORT``, with the token and the TLS files when given."""
        tls = None
        if options.tls:
            tls = TlsClientConfig(
                *(
                    Path(options.tls[k]) if options.tls.get(k) else None
                    for k in ("tls_ca", "tls_cert", "tls_key")
                )
            )
        return cls(GRPC.rest(address), token=options.token, tls=tls, pinned_key=options.pinned_key)

    def __init__(
        self,
        address: str,
        token: str | None = None,
        tls: TlsClientConfig | tuple | None = None,
        timeout_s: float = 10,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        qualify_timeout_s: float | None = None,
        holder: str | None = None,
        pinned_key: bytes | None = None,
    ):
        self.address = normalize_address(address)
        self.pinned_key = pinned_key
        self.timeout_s = float(timeout_s)
        self.chunk_bytes = int(chunk_bytes)
        self.qualify_timeout_s = qualify_timeout_s
        self.holder = holder or holder_name()
        self.last_run_id: str | None = None
        self._token = token
        # The token is attached only once the agent proved its key (_identity_proven).
        self._metadata: tuple = ()
        options = [
            ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
            # Notice a dead link in tens of seconds; the agent permits 30 s pings.
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        tls = TlsClientConfig.coerce(tls)
        if tls is not None:
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            self._channel = grpc.secure_channel(self.address, tls.credentials(), options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._stub = pb_grpc.AgentStub(self._channel)

    # -- helpers --------------------------------------------------------------

    def use_token(self, token: str | None) -> None:
        """Set the bearer token (sent only once the agent proved its key)."""
        self._token = token
        if self.proven_key is not None:
            self._identity_proven()

    def _identity_proven(self) -> None:
        self._metadata = (("authorization", f"Bearer {self._token}"),) if self._token else ()

    def _unary(self, method, request, timeout_s: float | None = None):
        self.ensure_identity()
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise host_error(e, self.address, timeout_s) from None

    def _check_digest(self, digest: str) -> str:
        d = digest[len("sha256:") :] if digest.startswith("sha256:") else digest
        if not _DIGEST_RE.fullmatch(d):
            raise UsageError(f"not a sha256 digest: {digest!r}")
        return d

    # -- Transport ------------------------------------------------------------

    def prove(self, challenge: bytes) -> IdentityProof:
        """``Prove``: the agent signs ``challenge`` with its device key; no token is sent."""
        try:
            r = self._stub.Prove(pb.ProveRequest(challenge=challenge), timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise host_error(e, self.address, self.timeout_s) from None
        return IdentityProof(bytes(r.public_key_raw), bytes(r.signature))

    def info(self) -> dict:
        """The agent's Info (:meth:`AgentInfo.to_json`, the same over every transport) plus the address."""
        r = self._unary(self._stub.Info, pb.InfoRequest())
        return {"address": self.address, **AgentInfo.from_pb2(r).to_json()}

    def stat(self, digest: str) -> tuple[int, bool]:
        """``(committed_size, complete)`` of an artifact on the agent."""
        r = self._unary(self._stub.Stat, pb.StatRequest(digest=self._check_digest(digest)))
        return r.committed_size, r.complete

    def push(
        self, path: Path, digest: str, on_progress: Callable[[int, int], None] | None = None
    ) -> PushResult:
        """Upload ``path`` unless the agent holds it; resume from the agent's committed offset."""
        digest = self._check_digest(digest)
        path = Path(path)
        try:
            size = path.stat().st_size
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from e
        committed, complete = self.stat(digest)
        if complete:
            if on_progress:
                on_progress(size, size)
            return PushResult(digest=digest, size=size, bytes_sent=0)
        sent_total = 0
        restarted = False
        for attempt in range(PUSH_RETRIES + 1):
            # A partial longer than the file cannot be its prefix; the agent restarts it at 0.
            offset = committed if committed <= size else 0
            counter = _SentCounter()
            remaining = size - offset
            timeout_s = self.timeout_s + remaining / MIN_PUSH_RATE_BYTES_PER_S
            try:
                response = self._stub.Push(
                    self._chunks(path, digest, size, offset, counter, on_progress),
                    timeout=timeout_s,
                    metadata=self._metadata,
                )
            except grpc.RpcError as e:
                sent_total += counter.bytes
                if offset > 0 and not restarted and _error_class(e) == "DigestMismatch":
                    # The partial we resumed was not a prefix of this file (say, a tail
                    # torn by a power cut); the agent deleted it, so send it all once more.
                    restarted = True
                    committed = 0
                    continue
                if e.code() == grpc.StatusCode.UNAVAILABLE and attempt < PUSH_RETRIES:
                    time.sleep(0.5 * 2**attempt)
                    committed, complete = self.stat(digest)
                    if complete:
                        return PushResult(digest=digest, size=size, bytes_sent=sent_total)
                    continue
                raise host_error(e, self.address, timeout_s) from None
            sent_total += counter.bytes
            if response.complete:
                return PushResult(digest=digest, size=size, bytes_sent=sent_total)
            raise TransportError(
                f"device at {self.address} holds {response.committed_size} of {size} bytes of "
                f"sha256:{digest} after the upload ended",
                hint="push again; it resumes from there",
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _chunks(
        self,
        path: Path,
        digest: str,
        size: int,
        offset: int,
        counter: _SentCounter,
        on_progress: Callable[[int, int], None] | None,
    ) -> Iterator[pb.PushChunk]:
        """The chunks of ``path`` from ``offset``; the first carries digest and total size."""
        with open(path, "rb") as f:
            f.seek(offset)
            first = True
            while first or offset < size:
                data = f.read(min(self.chunk_bytes, size - offset))
                if not data and offset < size:
                    raise UsageError(f"{path} shrank while it was being pushed")
                if first:
                    chunk = pb.PushChunk(digest=digest, offset=offset, data=data, total_size=size)
                    first = False
                else:
                    chunk = pb.PushChunk(offset=offset, data=data)
                yield chunk
                offset += len(data)
                counter.bytes += len(data)
                if on_progress:
                    on_progress(offset, size)

    def qualify(self, request: QualifyRequest, on_event: Callable[[ProgressEvent], None]) -> bytes:
        """Run a qualification, passing each progress event to ``on_event``; return the envelope.

        If the connection breaks, the run goes on on the device and its report is
        kept there: ``last_run_id`` names it for :meth:`get_report`.
        """
        self.ensure_identity()
        self.last_run_id = None
        message = pb.QualifyRequest(
            model_digest=self._check_digest(request.model_digest),
            golden_digest=self._check_digest(request.golden_digest)
            if request.golden_digest
            else "",
            plan_json=json.dumps(request.plan, sort_keys=True),
            nonce=request.nonce,
            model_name=request.model_name,
            golden_name=request.golden_name or "",
            holder=request.holder or self.holder,
            extra_subjects_json=json.dumps(request.extra_subjects()) if request.extra_files else "",
            lease_id=self.lease_id or "",
        )
        stream = self._stub.Qualify(
            message, timeout=self.qualify_timeout_s, metadata=self._metadata
        )
        envelope = None
        try:
            for msg in stream:
                if msg.run_id and msg.run_id != self.last_run_id:
                    self.last_run_id = msg.run_id
                    # The agent's first message says it accepted the run: tell the caller now.
                    on_event({"type": "run", "run_id": msg.run_id})
                body = msg.WhichOneof("body")
                if body == "event_json":
                    on_event(json.loads(msg.event_json))
                elif body == "envelope":
                    envelope = bytes(msg.envelope)
        except grpc.RpcError as e:
            err = host_error(e, self.address, self.qualify_timeout_s)
            if (
                self.last_run_id
                and isinstance(err, TransportError)
                and e.code()
                in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED,
                )
            ):
                err.hint = (
                    f"the device keeps run {self.last_run_id} going and stores its report; "
                    "fetch it later by run id"
                )
            raise err from None
        finally:
            # On an exception from on_event (or Ctrl-C) stop listening; the run goes on.
            stream.cancel()
        if envelope is None:
            raise TransportError(
                f"device at {self.address} ended run {self.last_run_id} without a signed report",
                hint="fetch it by run id, or look at the agent's log",
            )
        return envelope

    def get_report(self, run_id: str) -> bytes:
        """A stored signed envelope by run id."""
        return bytes(self._unary(self._stub.GetReport, pb.GetReportRequest(run_id=run_id)).envelope)

    def cancel(self, run_id: str) -> None:
        """Ask the agent to stop ``run_id``; UsageError when it is not in progress."""
        r = self._unary(self._stub.Cancel, pb.CancelRequest(run_id=run_id))
        if not r.cancelled:
            raise UsageError(r.message)

    def acquire_lease(
        self,
        purpose: str,
        ttl_s: float,
        wait_s: float | None = 0.0,
        on_wait: Callable[[dict], None] | None = None,
    ) -> dict:
        """Take the device lease; wait in line (asking again with the ticket) up to ``wait_s``
        (None: without limit). ``on_wait`` gets ``{"position", "lease"}`` after each wait."""
        deadline = None if wait_s is None else time.monotonic() + float(wait_s)
        ticket = ""
        while True:
            left = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
            chunk = min(left, 5.0) if (wait_s is None or wait_s > 0) else 0.0
            if ticket and chunk == 0:
                chunk = 0.01  # keep our place for the last look
            r = self._unary(
                self._stub.AcquireLease,
                pb.AcquireLeaseRequest(
                    holder=self.holder, purpose=purpose, ttl_s=ttl_s, wait_s=chunk, ticket=ticket
                ),
                timeout_s=self.timeout_s + chunk,
            )
            current = _lease_json(r.lease) if r.HasField("lease") else None
            if r.granted:
                self.lease_id = r.lease_id
                return current or {}
            ticket = r.ticket
            if on_wait is not None:
                on_wait({"position": r.position, "lease": current})
            if deadline is not None and time.monotonic() >= deadline:
                from edgequal.contract.lease import Lease

                held = Lease.from_json(current).describe() if current else "others are waiting"
                raise DeviceBusy(
                    f"device busy: {held}; waited {wait_s:g} s (place {r.position} in line)",
                    hint="wait longer (--wait TIMEOUT), or without a limit (--wait)",
                )

    def renew_lease(self, ttl_s: float) -> dict:
        """Extend the held lease to ``ttl_s`` from now; DeviceBusy when it was lost."""
        if not self.lease_id:
            raise DeviceBusy(f"device at {self.address}: no lease held")
        r = self._unary(
            self._stub.RenewLease, pb.RenewLeaseRequest(lease_id=self.lease_id, ttl_s=ttl_s)
        )
        return _lease_json(r.lease)

    def release_lease(self) -> bool:
        """Give the held lease back; False when none was held (or it had expired)."""
        if not self.lease_id:
            return False
        lease_id, self.lease_id = self.lease_id, None
        r = self._unary(self._stub.ReleaseLease, pb.ReleaseLeaseRequest(lease_id=lease_id))
        return r.released

    def health(self) -> str:
        """The standard health service's status name for the whole agent (e.g. ``SERVING``)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise host_error(e, self.address, self.timeout_s) from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def _lease_json(lease) -> dict:
    """A protobuf ``Lease`` as the JSON of ``edgequal.agent.service.lease.Lease``."""
    return {
        "run_id": lease.run_id,
        "holder": lease.holder,
        "started_unix_ms": lease.started_unix_ms,
        "expires_unix_ms": lease.expires_unix_ms,
        "purpose": lease.purpose,
        "expected_end_unix_ms": lease.expected_end_unix_ms,
    }


class _SentCounter:
    """Bytes of artifact data handed to gRPC during one Push call."""

    def __init__(self):
        self.bytes = 0
