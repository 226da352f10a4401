"""Which device a ``--device`` argument names, how to reach it, and trusting a new one.

``local`` is the agent this host starts on loopback; a NAME is looked up in
``known_devices``; a ``grpc://`` or ``ssh://`` address is used as it is (a
trusted device pinned at that address lends its name and token). A device
reached over ``ssh://`` that is not pinned yet is enrolled on first use: its
host key was checked against known_hosts, and its report-signing key is read
over that channel.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from edgequal.agent.auth import read_token_file
from edgequal.agent.errors import BadInput

from .errors import UntrustedDevice, UsageError
from .transport import Transport, open_transport
from .trust import DeviceEntry, KnownDevices


def read_token(path: Path) -> str:
    """A device token from a file, read by the agent's own rule (one token on one line)."""
    try:
        return read_token_file(Path(path).expanduser())
    except BadInput as e:
        raise UsageError(str(e), hint=e.hint) from e


def resolve_token(token_file: Path | None, entry_token_file: str | None) -> str | None:
    """The device token: ``--token-file``, then ``$EDGEQUAL_TOKEN``, then the device's config entry."""
    if token_file:
        return read_token(Path(token_file))
    if os.environ.get("EDGEQUAL_TOKEN"):
        return os.environ["EDGEQUAL_TOKEN"].strip()
    if entry_token_file:
        return read_token(Path(entry_token_file))
    return None


@dataclass
class OpenDevice:
    """A device ready to use: its transport, its name in the trust store, the address shown."""

    transport: Transport
    name: str
    address: str
    known: KnownDevices


def open_device(
    device: str,
    token_file: Path | None = None,
    known_hosts: Path | None = None,
    agent_cmd: str | None = None,
    ssh_key: Path | None = None,
    known: KnownDevices | None = None,
) -> OpenDevice:
    """Open a transport to ``device`` (``local``, a trusted NAME, ``grpc://`` or ``ssh://``).

    An unknown name, or a ``grpc://`` address no trusted device has, raises
    UntrustedDevice; an ``ssh://`` address not pinned yet is enrolled.
    """
    from .install_commands import default_device_name

    known = known or KnownDevices()
    if device == "local":
        transport = open_transport("local")
        _pin_or_close(transport, known, "local", "local")
        return OpenDevice(transport, "local", "local", known)
    entry = _lookup(known, device)
    address = entry.address if entry else device
    token = resolve_token(token_file, entry.token_file if entry else None)
    transport = open_transport(
        address, token=token, known_hosts=known_hosts, ssh_agent_cmd=agent_cmd, ssh_key=ssh_key
    )
    if entry is not None:
        return OpenDevice(transport, entry.name, address, known)
    if address.startswith("ssh://"):
        # The SSH host key was checked against known_hosts; the device key is read over that channel.
        name = default_device_name(address.removeprefix("ssh://"))
        _pin_or_close(transport, known, name, address)
        return OpenDevice(transport, name, address, known)
    transport.close()
    raise UntrustedDevice(
        f"device {device} is not trusted", hint=f"edgequal devices trust NAME {device}"
    )


def _pin_or_close(transport: Transport, known: KnownDevices, name: str, address: str) -> None:
    """Pin the device's key on first use; close the transport when that fails."""
    from .qualify import pin_device_key

    try:
        pin_device_key(transport, known, name, address)
    except BaseException:
        transport.close()
        raise


def _lookup(known: KnownDevices, device: str) -> DeviceEntry | None:
    """The pinned device called ``device``, or pinned at the address ``device``."""
    entry = known.get(device)
    if entry is None and "://" not in device:
        raise UntrustedDevice(
            f"unknown device '{device}'", hint=f"edgequal devices trust {device} grpc://HOST:PORT"
        )
    if entry is None:
        entry = next((e for e in known.list() if e.address == device), None)
    return entry


def trust_device(
    known: KnownDevices,
    name: str,
    address: str,
    token_file: Path | None = None,
    expected_fingerprint: str | None = None,
) -> DeviceEntry:
    """Read the key the agent at ``address`` presents and pin it as ``name``.

    ``expected_fingerprint`` (``SHA256:...``, compared out of band) must match
    when given; nothing is pinned otherwise.
    """
    from edgequal.agent.keys import fingerprint_of

    if not address.startswith(("grpc://", "ssh://")):
        raise UsageError(f"cannot trust address '{address}'", hint="use grpc://HOST:PORT")
    token = resolve_token(token_file, None)
    with open_transport(address, token=token) as transport:
        info = transport.info()
    raw = base64.b64decode(info["public_key_b64"])
    fingerprint = fingerprint_of(raw)
    if expected_fingerprint and expected_fingerprint != fingerprint:
        raise UsageError(
            f"device key fingerprint is {fingerprint}, not the expected {expected_fingerprint}"
        )
    return known.trust(
        name,
        address,
        raw,
        token_file=str(token_file.resolve()) if token_file else None,
    )
