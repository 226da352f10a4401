"""Exceptions raised by the host. One root, subclasses name the cause."""


class HostError(Exception):
    """Root of every error the host raises on purpose.

    ``hint`` is a short suggestion printed after the message; ``exit_code``
    follows the CLI contract: 1 gate/verification failed, 2 bad usage or input,
    3 device, transport or runtime failure.
    """

    exit_code = 3

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class UsageError(HostError):
    """Bad arguments or an unusable input file."""

    exit_code = 2


class VerificationFailed(HostError):
    """A report failed verification; the message names the failed check."""

    exit_code = 1


class UntrustedDevice(VerificationFailed):
    """The device is unknown, or its key differs from the pinned one."""


class TransportError(HostError):
    """The device could not be reached or the connection broke."""


class DeviceBusy(TransportError):
    """The device is leased to, or running for, someone else; the message names who and until when."""
