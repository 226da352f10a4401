"""Which calls the agent runs at once: call classes, each with its own limit.

A call belongs to one class, decided before its handler runs:

- ``public``: what anyone who reaches the port may call (``Prove``, the health
  check) and every call refused for a missing or wrong token;
- ``watch``: the health service's ``Watch`` (a stream that lasts);
- ``push``, ``qualify``, ``lease_wait`` (``AcquireLease``, which may wait in line):
  authenticated calls that hold a thread for long;
- ``light``: the other authenticated calls (``Info``, ``Stat``, ``RenewLease``,
  ``ReleaseLease``, ``Cancel``, ``GetReport``).

Every class but ``light`` has a limit on the calls it runs at once (:data:`LIMITS`);
a call over it is answered at once with RESOURCE_EXHAUSTED, naming the class, and
changes nothing. ``light`` calls are never refused for their class: the server's
thread pool is sized (:func:`pool_threads`) so that, with every other class at its
limit, :data:`LIGHT_THREADS` threads are left for them. So a flood of unauthenticated
calls, or long uploads and a run, cannot make a token holder's Info, Stat or lease
renewal fail. Beyond :data:`MAX_CALLS_IN_FLIGHT` calls in flight altogether (running
or waiting for a thread), gRPC refuses new calls of every class: the bound on the
memory the agent spends on callers. docs/protocol.md "Limits" lists these figures.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

log = logging.getLogger(__name__)

_AGENT = "/edgequal.v1.Agent/"
_HEALTH = "/grpc.health.v1.Health/"

CALL_CLASSES = {
    _AGENT + "Prove": "public",
    _HEALTH + "Check": "public",
    _HEALTH + "Watch": "watch",
    _AGENT + "Push": "push",
    _AGENT + "Qualify": "qualify",
    _AGENT + "AcquireLease": "lease_wait",
}
"""Methods outside ``light``; any other authenticated call is ``light``."""

PUBLIC_METHODS = frozenset(m for m, c in CALL_CLASSES.items() if c in ("public", "watch"))
"""Methods answered without credentials."""

LIMITS = {"public": 4, "watch": 2, "push": 8, "qualify": 4, "lease_wait": 8}
"""Calls each class may run at once. ``qualify``: one run measures at a time, the
others are told at once that the device is busy; ``lease_wait``: an Acquire waits at
most 5 s in line, then the host asks again."""

LIGHT_THREADS = 16
"""Threads no other class can take: light calls always find one free soon."""

MAX_CALLS_IN_FLIGHT = 1024
"""Calls the server holds at once, running or queued; gRPC refuses more."""


def pool_threads(limits: dict[str, int] = LIMITS) -> int:
    """The server's thread pool: every limited class at its limit, plus LIGHT_THREADS."""
    return sum(limits.values()) + LIGHT_THREADS


class _Gate:
    """A count of running calls of one class against its limit."""

    def __init__(self, name: str, limit: int):
        self.name = name
        self.limit = limit
        self.running = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.running >= self.limit:
                return False
            self.running += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.running -= 1


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Puts every call in its class (see the module) and refuses one over its class's limit.

    ``authenticated`` tells from the call's metadata whether it carries the agent's
    token; None when the agent has no token (loopback, or mutual TLS, where the
    handshake already admitted the caller).
    """

    def __init__(
        self,
        authenticated: Callable[[object], bool] | None = None,
        limits: dict[str, int] = LIMITS,
    ):
        self._authenticated = authenticated
        self._gates = {name: _Gate(name, limit) for name, limit in limits.items()}

    def call_class(self, method: str, metadata) -> str:
        """The class of a call to ``method`` with ``metadata``."""
        if method in PUBLIC_METHODS:
            return CALL_CLASSES[method]
        if self._authenticated is not None and not self._authenticated(metadata):
            return "public"
        return CALL_CLASSES.get(method, "light")

    def running(self) -> dict[str, int]:
        """Calls running now, per limited class."""
        return {name: gate.running for name, gate in self._gates.items()}

    def intercept_service(self, continuation, handler_call_details):
        """Wrap the handler so it runs only within its class's limit."""
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        name = self.call_class(
            handler_call_details.method, handler_call_details.invocation_metadata
        )
        gate = self._gates.get(name)
        if gate is None:
            return handler
        return _gated(handler, gate)


def _refuse(context, gate: _Gate) -> None:
    log.warning("refused a %s call: %d already running (the limit)", gate.name, gate.limit)
    context.set_trailing_metadata((("edgequal-error", "DeviceBusy"),))
    context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"agent busy: {gate.limit} {gate.name} calls are already running (their limit); "
        "try again shortly",
    )


def _gated(handler: grpc.RpcMethodHandler, gate: _Gate) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour run inside ``gate`` (refused when the gate is full)."""

    def unary_response(behavior):
        def run(request, context):
            if not gate.enter():
                _refuse(context, gate)
            try:
                return behavior(request, context)
            finally:
                gate.leave()

        return run

    def stream_response(behavior):
        def run(request, context):
            if not gate.enter():
                _refuse(context, gate)
            try:
                yield from behavior(request, context)
            finally:
                gate.leave()

        return run

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(
            stream_response(handler.stream_stream), **kwargs
        )
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary_response(handler.stream_unary), **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(stream_response(handler.unary_stream), **kwargs)
    return grpc.unary_unary_rpc_method_handler(unary_response(handler.unary_unary), **kwargs)
