"""Which device a ``--device`` argument names, how to reach it, and trusting a new one.

``local`` is the agent this host starts on loopback; a NAME is looked up in
``known_devices``; a ``grpc://`` or ``ssh://`` address is used as it is (the
trusted device reached at that address, or holding the key the agent proves,
lends its name and token). Every device first proves it holds its pinned key,
before a token, model or golden set is sent. A device reached over ``ssh://``
whose key is not pinned yet is enrolled on first use: its host key was checked
against known_hosts, and its report-signing key is proved over that channel.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from edgequal.contract.auth import read_token_file
from edgequal.contract.errors import BadInput
from edgequal.contract.keys import fingerprint_of

from ..errors import TransportError, UntrustedDevice, UsageError
from ..transport import SSHOptions, Transport, open_transport
from ..transport.schemes import LOCAL, REMOTE, SSH, is_scheme, scheme_of, takes_tls
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
    """A device ready to use: its transport, its name in the trust store, the address shown.

    The transport's agent has proved it holds the device's pinned key.
    """

    transport: Transport
    name: str
    address: str
    known: KnownDevices
    unrecorded: bool = False
    """The device was found by the key it proved at ``address``, which is none of its
    recorded addresses (and was not added: ``devices trust NAME ADDRESS`` adds it)."""


def tls_options(
    ca: Path | None = None, cert: Path | None = None, key: Path | None = None
) -> dict[str, str]:
    """``--tls-ca/--tls-cert/--tls-key`` as the known-devices options (absolute paths).

    Mutual TLS needs both the certificate and its key; each file must exist.
    """
    given = {"tls_ca": ca, "tls_cert": cert, "tls_key": key}
    if (cert is None) != (key is None):
        raise UsageError(
            "mutual TLS needs both --tls-cert and --tls-key",
            hint="give this host's certificate and its private key (PEM)",
        )
    options = {}
    for option, path in given.items():
        if path is None:
            continue
        path = Path(path).expanduser()
        if not path.is_file():
            raise UsageError(f"--{option.replace('_', '-')}: file not found: {path}")
        options[option] = str(path.resolve())
    return options


def open_device(
    device: str,
    token_file: Path | None = None,
    ssh: SSHOptions | None = None,
    known: KnownDevices | None = None,
    tls: dict[str, str] | None = None,
    token: str | None = None,
    name: str | None = None,
) -> OpenDevice:
    """Open a transport to ``device`` (``local``, a trusted NAME, ``grpc://`` or ``ssh://``).

    ``ssh`` (:class:`SSHOptions`) says how to reach an ``ssh://`` address (known_hosts, key,
    agent command). ``token``, when given, is the token itself (read by the caller, for example from a lab
    file's ``token_env``); else :func:`resolve_token` finds it.

    ``name`` binds the connection, and so its token, to one device: ``device`` is then an
    address of it (a lab file's), and the agent there must prove the key pinned for
    ``name``. A name pinned for no key, or another key proved there, is UntrustedDevice
    with nothing sent: a lab device's token never goes to whichever trusted device answers
    at its address.

    Before anything else crosses the connection, the agent proves it holds the
    pinned key (a fresh challenge; UntrustedDevice when it holds another one);
    only then does the token go with the calls. A device's security settings
    (its TLS files) belong to the device, not to one address: every address of it
    is reached with them unless ``tls`` is given. An address no trusted device
    has is matched by the key it proved: the device pinned with that key is used,
    over its own TLS (the connection is made again with it, and the key proved
    again, before the token goes; a peer that cannot is refused), and the address
    is not recorded (``OpenDevice.unrecorded`` says so; ``devices trust NAME
    ADDRESS`` records it). Otherwise an ``ssh://`` address is enrolled (its host
    key was checked against known_hosts), and anything else raises
    UntrustedDevice, having sent nothing.
    """
    from .trust import default_device_name

    known = known or KnownDevices()
    if name is not None:
        entry = _bound_entry(known, name, device)
        address = device
    elif device == "local":
        entry = known.get("local") or known.find_by_address("local")
        address = "local"
    else:
        entry = _lookup(known, device)
        address = device if "://" in device else entry.address
    given_tls = tls
    if tls is None and entry is not None and takes_tls(address):
        tls = entry.tls or None
    pinned = entry.public_key_raw if entry else None
    transport = open_transport(address, tls=tls, pinned_key=pinned, ssh=ssh)
    unrecorded = False
    with _closed_on_error(transport):
        raw = transport.prove_identity(pinned)
        if entry is None:
            entry = known.find_by_key(raw)
            if entry is not None:
                # The same device, reached at an address it was not pinned at: one name,
                # one key, and its own security settings; the address is not recorded.
                unrecorded = address != "local"
                if given_tls is None and entry.tls and takes_tls(address):
                    transport.close()
                    transport = _reopen_with_device_tls(address, entry, ssh)
            elif is_scheme(address, LOCAL):
                entry = known.trust("local", "local", raw)  # the agent this host started
            elif is_scheme(address, SSH):
                # The SSH host key was checked against known_hosts; the device key was proved over it.
                name = default_device_name(SSH.rest(address))
                entry = known.trust(name, address, raw)
            else:
                raise UntrustedDevice(
                    f"device {device} is not trusted (its key {fingerprint_of(raw)} is pinned "
                    "for no device); nothing was sent to it",
                    hint=f"edgequal devices trust NAME {device}",
                )
    if name is not None:
        unrecorded = address != "local" and address not in entry.addresses
    with _closed_on_error(transport):
        transport.use_token(token if token else resolve_token(token_file, entry.token_file))
    return OpenDevice(transport, entry.name, address, known, unrecorded)


def _bound_entry(known: KnownDevices, name: str, address: str) -> DeviceEntry:
    """The pinned entry of ``name``, to be reached at ``address``; UntrustedDevice (nothing
    sent) when no key is pinned for it."""
    if address != "local" and "://" not in address:
        raise UsageError(f"device {name}: {address!r} is not an address (grpc://, ssh://, local)")
    entry = known.get(name)
    if entry is None:
        raise UntrustedDevice(
            f"device {name} is not trusted (no key is pinned for it); nothing was sent to "
            f"{address}",
            hint=f"edgequal devices trust {name} {address}",
        )
    return entry


def _reopen_with_device_tls(address: str, entry: DeviceEntry, ssh: SSHOptions | None) -> Transport:
    """A transport to ``address`` over ``entry``'s TLS whose agent proved ``entry``'s key.

    An address that proved the key of a device pinned with TLS, over a connection
    without it, is either that device listening with TLS there too, or a relay
    forwarding the proof: the token goes to neither before the proof is made again
    over the device's TLS. UntrustedDevice (nothing sent) when it cannot be.
    """
    transport = open_transport(address, tls=entry.tls, pinned_key=entry.public_key_raw, ssh=ssh)
    with _closed_on_error(transport):
        try:
            transport.prove_identity(entry.public_key_raw)
        except TransportError as e:
            raise UntrustedDevice(
                f"{address} proved the key of device {entry.name} without TLS, but {entry.name} "
                f"is pinned with TLS and {address} does not answer over it ({e}); nothing was "
                "sent to it",
                hint=f"something between this host and {entry.name} may be relaying it; reach "
                f"it at {entry.address}",
            ) from None
    return transport


@contextlib.contextmanager
def _closed_on_error(transport: Transport):
    """Close ``transport`` when the block raises (Ctrl-C included)."""
    try:
        yield
    except BaseException:
        transport.close()
        raise


CLOSE_NAME_CUTOFF = 0.75
"""difflib's ratio a name must reach to be offered as "did you mean" for an unknown device."""


def _lookup(known: KnownDevices, device: str) -> DeviceEntry | None:
    """The pinned device called ``device``, or reached at the address ``device``."""
    entry = known.get(device)
    if entry is None and "://" not in device:
        import difflib

        names = ["local"] + [e.name for e in known.list() if e.name != "local"]
        # Only a name a typo away ("pi55", "board3"); at 0.5 "nosuchboard" met "board-3".
        close = difflib.get_close_matches(device, names, n=1, cutoff=CLOSE_NAME_CUTOFF)
        raise UsageError(
            f"unknown device '{device}' (known: {', '.join(names)}); nothing was sent",
            hint=f"did you mean '{close[0]}'?"
            if close
            else f"trust it first: edgequal devices trust {device} grpc://HOST:PORT",
        )
    if entry is None:
        entry = known.find_by_address(device)
    return entry


def trust_device(
    known: KnownDevices,
    name: str,
    address: str,
    token_file: Path | None = None,
    expected_fingerprint: str | None = None,
    tls: dict[str, str] | None = None,
    replace_key: bool = False,
) -> DeviceEntry:
    """Pin as ``name`` the key the agent at ``address`` proves it holds.

    The agent signs a fresh challenge and the key that signed it is the one
    pinned; only then is the token sent (an Info call checks it is accepted).
    ``expected_fingerprint`` (``SHA256:...``, compared out of band) must match
    when given; nothing is pinned otherwise. ``tls`` (see :func:`tls_options`) is
    used for the connection and stored in the entry.

    A name already pinned is trusted again (a new address, token or TLS files) only
    by an agent proving the pinned key, before its token leaves, as every command
    does; the device's TLS files and token file apply unless new ones are given.
    ``replace_key`` pins a new key for it, and needs ``expected_fingerprint``: the
    new key's fingerprint, confirmed on the device.
    """
    if scheme_of(address) not in REMOTE:
        raise UsageError(f"cannot trust address '{address}'", hint="use grpc://HOST:PORT")
    existing = known.get(name)
    if replace_key and not expected_fingerprint:
        raise UsageError(
            "--replace-key needs --fingerprint: the new key's fingerprint, read on the device",
            hint=f"run `edgequal-agent key show` on {name} and compare it out of band",
        )
    if existing is not None and tls is None and takes_tls(address):
        tls = existing.tls or None  # the device's security settings, not the address's
    token = resolve_token(token_file, existing.token_file if existing else None)
    pinned = existing.public_key_raw if existing is not None and not replace_key else None
    with open_transport(address, tls=tls, pinned_key=pinned) as transport:
        raw = transport.prove_identity(pinned)
        fingerprint = fingerprint_of(raw)
        if expected_fingerprint and expected_fingerprint != fingerprint:
            raise UsageError(
                f"device key fingerprint is {fingerprint}, not the expected {expected_fingerprint}"
            )
        other = known.find_by_key(raw)
        if other is not None and other.name != name:
            raise UsageError(
                f"key {fingerprint} is already pinned for device {other.name}; nothing was sent",
                hint=f"run `edgequal devices forget {other.name}` first to rename it",
            )
        transport.use_token(token)
        transport.info()  # the token (or client certificate) is accepted
    return known.trust(
        name,
        address,
        raw,
        replace=replace_key,
        token_file=str(token_file.resolve()) if token_file else None,
        tls=tls,
    )
