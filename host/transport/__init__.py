"""Transports to a device's agent: gRPC, SSH and local, behind one interface (base.Transport)."""

from __future__ import annotations

import importlib

from ..errors import UsageError
from .base import IdentityProof, OpenOptions, PushResult, QualifyRequest, Transport
from .schemes import SCHEMES, forms, scheme_of
from .ssh_options import SSHOptions


def open_transport(
    address: str,
    *,
    token: str | None = None,
    local_root: str | None = None,
    ssh: SSHOptions | None = None,
    tls: dict[str, str] | None = None,
    pinned_key: bytes | None = None,
) -> Transport:
    """A transport for ``local``, ``grpc://HOST:PORT`` or ``ssh://USER@HOST[:PORT]``.

    ``ssh`` (:class:`SSHOptions`) says how to reach an ``ssh://`` address; ``tls`` holds the PEM files for a ``grpc://`` address (``tls_ca``, and for
    mutual TLS ``tls_cert`` and ``tls_key``); ``pinned_key`` is the raw device key
    the agent must prove it holds before anything else is sent (see Transport).
    """
    scheme = scheme_of(address)
    if tls and (scheme is None or not scheme.tls):
        with_tls = ", ".join(s.prefix for s in SCHEMES if s.tls)
        raise UsageError(
            f"TLS options apply to {with_tls} addresses, not {address}",
            hint="ssh:// is protected by SSH itself; the local agent listens on loopback",
        )
    if scheme is not None:
        module, cls = scheme.transport.split(":")
        transport = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
        options = OpenOptions(
            token=token, local_root=local_root, ssh=ssh, tls=tls, pinned_key=pinned_key
        )
        return transport.open_address(address, options)
    raise UsageError(
        f"cannot use device address '{address}'",
        hint=f"use local, a trusted device name, {forms()}",
    )


__all__ = [
    "IdentityProof",
    "PushResult",
    "QualifyRequest",
    "SSHOptions",
    "Transport",
    "open_transport",
]
