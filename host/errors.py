"""Exceptions raised by the host. One root, subclasses name the cause.

Every message and hint is passed through :func:`redact` when the error is made, so a
password written into an address (``grpc://user:pw@host``, a database URL) never
reaches the terminal, a log line, a fleet index or a JUnit file.
"""

import os
import re

from edgequal.contract.errors import EdgequalError

_CREDENTIALS = re.compile(
    r"(?P<user>(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^\s/@:'\"]*):(?P<secret>[^\s/'\"]+)@"
    r"(?=[\w\[])"
)
REDACTED = "***"


def printable(path) -> str:
    """A file name or path as text that can be printed and sent (UTF-8).

    File names are bytes on POSIX; one that is not UTF-8 reaches Python with
    surrogate escapes, which neither protobuf, JSON reports nor a UTF-8 terminal
    accept. Its undecodable bytes are shown as ``\\xNN``.
    """
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def redact(text: str) -> str:
    """``text`` with the password of every ``[scheme://]user:password@host`` replaced by ``***``."""
    if "@" not in text:
        return text
    return _CREDENTIALS.sub(lambda m: f"{m['user']}:{REDACTED}@", text)


class HostError(EdgequalError):
    """Root of every error the host raises on purpose (on the base the agent's shares:
    ``hint`` and ``exit_code``); message and hint are redacted when it is made."""

    exit_code = 3

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(redact(str(message)), redact(hint) if hint else hint)


class UsageError(HostError):
    """Bad arguments or an unusable input file."""

    exit_code = 2


class VerificationFailed(HostError):
    """A report failed verification; the message names the failed check."""

    exit_code = 1


class UntrustedDevice(VerificationFailed):
    """The device is unknown, or its key differs from the pinned one."""


class NotMeasuredError(HostError):
    """A figure the run did not measure was compared or computed with (``report.latency[0].
    p99_ms < 50`` on a run too short for a p99); the message says why it was not measured."""

    exit_code = 1


class TransportError(HostError):
    """The device could not be reached or the connection broke."""


class DeviceBusy(TransportError):
    """The device is leased to, or running for, someone else; the message names who and until when."""


def refuse_credentials(address: str) -> None:
    """UsageError when ``address`` carries a user's password (``scheme://user:pw@host``) or,
    for ``grpc://``, any user part: edgequal takes secrets from files, never from addresses."""
    scheme, sep, rest = address.partition("://")
    userinfo, at, _ = rest.rpartition("@") if sep else ("", "", "")
    if at and (":" in userinfo or scheme == "grpc"):
        raise UsageError(
            f"device address {address} carries credentials; edgequal never takes them in an "
            "address (they would show in lists, logs and reports)",
            hint="grpc:// authenticates with a token file (--token-file) or mutual TLS, "
            "ssh:// with a key (--ssh-key) or the SSH agent",
        )
