"""The options every device command shares, and the device they name.

``add_connection_options``, ``add_tls_options`` and ``add_board_ssh_options`` put them on a
parser; ``ssh_options_from_args`` reads the SSH ones back;
:func:`open_device_from_args` opens the device ``--device`` names with them (identity
proved first) through the library's ``edgequal.connect``. Imported by the parser and by
each command module; it imports the device library only when a device is opened.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key`` for a grpc:// device (kept in its entry)."""
    parser.add_argument(
        "--tls-ca", type=Path, help="CA certificate (PEM) that signed the agent's TLS certificate"
    )
    parser.add_argument("--tls-cert", type=Path, help="this host's certificate for mutual TLS")
    parser.add_argument("--tls-key", type=Path, help="the private key of --tls-cert")


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """How to reach a device: token and TLS (grpc://), known_hosts, key and agent command (ssh://)."""
    parser.add_argument("--token-file", type=Path, help="bearer token for a grpc:// device")
    add_tls_options(parser)
    parser.add_argument(
        "--known-hosts", type=Path, help="known_hosts for ssh:// (default ~/.ssh/known_hosts)"
    )
    parser.add_argument("--agent-cmd", help="edgequal-agent command on an ssh:// device")
    parser.add_argument("--ssh-key", type=Path, help="private key file for an ssh:// device")


def add_board_ssh_options(parser) -> None:
    """``--known-hosts``, ``--ssh-key`` and ``--agent-cmd`` of a command that reaches a board over
    SSH only (``agent runtime``); read back by ``ssh_options_from_args``."""
    parser.add_argument("--known-hosts", type=Path)
    parser.add_argument("--ssh-key", type=Path, help="private key file for SSH")
    parser.add_argument("--agent-cmd", help="edgequal-agent command on the board")


def ssh_options_from_args(args):
    """The command's SSH settings (``--known-hosts``, ``--ssh-key``, ``--agent-cmd``, those it
    has) as one :class:`SSHOptions`."""
    from ..host.transport.ssh_options import SSHOptions

    return SSHOptions(
        known_hosts=getattr(args, "known_hosts", None),
        key_file=getattr(args, "ssh_key", None),
        agent_cmd=getattr(args, "agent_cmd", None),
    )


def open_device_from_args(args):
    """The device ``--device`` names, opened with the connection options (identity proved):
    an :class:`edgequal.Device` from ``edgequal.connect``, as a library caller gets it."""
    from edgequal.device import connect

    device = connect(
        args.device,
        token_file=args.token_file,
        ssh=ssh_options_from_args(args),
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    if device.unrecorded:
        from ..host.present.terminal.summary import print_note

        print_note(
            f"{device.address} proved the key of device '{device.name}' but is not one of its "
            f"addresses (not recorded; `edgequal devices trust {device.name} {device.address}` "
            "records it)"
        )
    return device


def tls_from_args(args) -> dict[str, str] | None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key`` as the device entry keeps them, or None."""
    from ..host.devices.resolve import tls_options

    return tls_options(args.tls_ca, args.tls_cert, args.tls_key) or None
