"""Who may call the agent: a bearer token, mutual TLS, or (only on loopback) anyone local.

Every RPC except the standard health service and ``Prove`` (which only signs a
challenge, so a host can check the device's key before it sends a token) must carry
``authorization: Bearer <token>`` when the agent has a token; the token is
compared in constant time and a wrong or missing one is answered with
UNAUTHENTICATED before any handler runs. With mutual TLS the TLS handshake
itself refuses a client without a certificate from the configured CA. An agent
with neither listens only on loopback, so nothing off the machine can push
files to it or run models on it.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from edgequal.contract.auth import parse_listen
from edgequal.contract.errors import BadInput

log = logging.getLogger(__name__)

HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
"""The standard health service answers without a token, so probes need no secret."""

PROVE_METHOD = "/edgequal.v1.Agent/Prove"
"""Answered without a token: the host checks the device's key before it sends its token."""

AUTHORIZATION_KEY = "authorization"
BEARER_PREFIX = "bearer "


@dataclass(frozen=True)
class TlsServerConfig:
    """Server certificate and key (PEM files); ``client_ca`` set means mutual TLS."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @classmethod
    def coerce(cls, tls: TlsServerConfig | tuple | None) -> TlsServerConfig | None:
        """Accept a config, a ``(cert, key[, client_ca])`` tuple, or None."""
        if tls is None or isinstance(tls, cls):
            return tls
        parts = [None if p is None else Path(p) for p in tls]
        if len(parts) not in (2, 3) or parts[0] is None or parts[1] is None:
            raise BadInput("TLS needs a certificate and a key (and optionally a client CA)")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the name ``localhost``; other names are not resolved."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen_allowed(listen: str, token: str | None, tls: TlsServerConfig | None) -> None:
    """Refuse an unauthenticated listener anywhere but loopback (BadInput naming the address).

    Server-only TLS does not identify the client, so it counts as authentication
    only with a client CA (mutual TLS).
    """
    host, _ = parse_listen(listen)
    authenticated = bool(token) or (tls is not None and tls.client_ca is not None)
    if not authenticated and not is_loopback_host(host):
        raise BadInput(
            f"refusing to listen on {listen} without authentication: anyone who can reach it "
            "could push files and run models on this device",
            hint="give --token-file FILE or --tls-cert/--tls-key/--client-ca, "
            "or listen on 127.0.0.1",
        )
    if token and tls is None and not is_loopback_host(host):
        log.warning(
            "listening on %s with a bearer token but without TLS: the token crosses the "
            "network in clear text; use --tls-cert/--tls-key on untrusted networks",
            listen,
        )


def server_credentials(tls: TlsServerConfig) -> grpc.ServerCredentials:
    """TLS server credentials; with ``client_ca`` the client must present a certificate it signed."""
    try:
        cert = Path(tls.cert).read_bytes()
        key = Path(tls.key).read_bytes()
        ca = Path(tls.client_ca).read_bytes() if tls.client_ca else None
    except OSError as e:
        raise BadInput(f"cannot read TLS file {e.filename}: {e.strerror}") from e
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects every RPC but health and Prove whose ``authorization`` is not ``Bearer <token>``."""

    def __init__(self, token: str):
        if not token:
            raise ValueError("an empty token would let anyone in")
        self._expected = token.encode("utf-8")

    def authorized(self, metadata) -> bool:
        """Whether ``metadata`` carries ``authorization: Bearer <the token>``."""
        for key, value in metadata or ():
            if key != AUTHORIZATION_KEY:
                continue
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value[: len(BEARER_PREFIX)].lower() != BEARER_PREFIX:
                return False
            presented = value[len(BEARER_PREFIX) :].strip().encode("utf-8")
            # Constant time, so response timing does not reveal how much of a guess matched.
            return hmac.compare_digest(presented, self._expected)
        return False

    def intercept_service(self, continuation, handler_call_details):
        """Pass authorized calls (and health, Prove) through; answer others with UNAUTHENTICATED."""
        method = handler_call_details.method
        if method.startswith(HEALTH_METHOD_PREFIX) or method == PROVE_METHOD:
            return continuation(handler_call_details)
        if self.authorized(handler_call_details.invocation_metadata):
            log.debug("authorized %s", method)
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        log.warning("rejected %s: missing or wrong bearer token", method)
        return _rejecting_handler(handler)


def _deny(request_or_iterator, context):
    context.abort(
        grpc.StatusCode.UNAUTHENTICATED,
        "missing or wrong bearer token: this agent requires 'authorization: Bearer <token>'",
    )


def _rejecting_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that only aborts, never reading requests."""
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_deny, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_deny, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(_deny, **kwargs)
    return grpc.unary_unary_rpc_method_handler(_deny, **kwargs)
