"""Transports to a device's agent: gRPC, SSH and local, behind one interface (base.Transport)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import PushResult, QualifyRequest, Transport


def open_transport(
    address: str,
    *,
    token: str | None = None,
    known_hosts: Path | None = None,
    local_root: str | None = None,
    ssh_agent_cmd: str | None = None,
    ssh_key: Path | None = None,
) -> Transport:
    """A transport for ``local``, ``grpc://HOST:PORT`` or ``ssh://USER@HOST[:PORT]``."""
    if address == "local":
        from .local import LocalTransport

        return LocalTransport(root=local_root)
    if address.startswith("grpc://"):
        from .grpc import GrpcTransport

        return GrpcTransport(address.removeprefix("grpc://"), token=token)
    if address.startswith("ssh://"):
        from .ssh import SSHTransport

        kwargs = {"known_hosts": known_hosts, "key_file": ssh_key}
        if ssh_agent_cmd:
            kwargs["agent_cmd"] = ssh_agent_cmd
        return SSHTransport(address, **kwargs)
    raise UsageError(
        f"cannot use device address '{address}'",
        hint="use local, a trusted device name, grpc://HOST:PORT or ssh://USER@HOST",
    )


__all__ = ["PushResult", "QualifyRequest", "Transport", "open_transport"]
