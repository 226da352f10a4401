"""Transports to a device's agent: gRPC, SSH and local, behind one interface (base.Transport)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import IdentityProof, PushResult, QualifyRequest, Transport


def open_transport(
    address: str,
    *,
    token: str | None = None,
    known_hosts: Path | None = None,
    local_root: str | None = None,
    ssh_agent_cmd: str | None = None,
    ssh_key: Path | None = None,
    tls: dict[str, str] | None = None,
    pinned_key: bytes | None = None,
) -> Transport:
    """A transport for ``local``, ``grpc://HOST:PORT`` or ``ssh://USER@HOST[:PORT]``.

    ``tls`` holds the PEM files for a ``grpc://`` address (``tls_ca``, and for
    mutual TLS ``tls_cert`` and ``tls_key``); ``pinned_key`` is the raw device key
    the agent must prove it holds before anything else is sent (see Transport).
    """
    if tls and not address.startswith("grpc://"):
        raise UsageError(
            f"TLS options apply to grpc:// addresses, not {address}",
            hint="ssh:// is protected by SSH itself; the local agent listens on loopback",
        )
    if address == "local":
        from .local import LocalTransport

        return LocalTransport(root=local_root, pinned_key=pinned_key)
    if address.startswith("grpc://"):
        from .grpc import GrpcTransport, TlsClientConfig

        tls_config = None
        if tls:
            tls_config = TlsClientConfig(
                *(Path(tls[k]) if tls.get(k) else None for k in ("tls_ca", "tls_cert", "tls_key"))
            )
        return GrpcTransport(
            address.removeprefix("grpc://"), token=token, tls=tls_config, pinned_key=pinned_key
        )
    if address.startswith("ssh://"):
        from .ssh import SSHTransport

        kwargs = {"known_hosts": known_hosts, "key_file": ssh_key, "pinned_key": pinned_key}
        if ssh_agent_cmd:
            kwargs["agent_cmd"] = ssh_agent_cmd
        return SSHTransport(address, **kwargs)
    raise UsageError(
        f"cannot use device address '{address}'",
        hint="use local, a trusted device name, grpc://HOST:PORT or ssh://USER@HOST",
    )


__all__ = ["IdentityProof", "PushResult", "QualifyRequest", "Transport", "open_transport"]
