"""Exceptions: the one root both sides share (:class:`EdgequalError`), the agent's root
(:class:`AgentError`, also raised by contract code the host runs) and its subclasses, which
name the cause. The host's root, ``host/errors.py`` ``HostError``, stands on the same base,
so a command line turns any of them into one line and an exit code in one place."""


class EdgequalError(Exception):
    """Root of every error edgequal raises on purpose, host or agent.

    ``hint`` is a short suggestion shown after the one-line message; ``exit_code`` follows
    the CLI contract (1 gate or verification failed, 2 bad usage or input, 3 device,
    transport or runtime failure).
    """

    exit_code = 3

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class AgentError(EdgequalError):
    """Root of every error the agent (and the contract code both sides run) raises on purpose."""


class BadInput(AgentError):
    """A file or argument the user gave cannot be used."""

    exit_code = 2


class ModelRejected(AgentError):
    """The runtime refused to load the model (unsupported operator, bad file)."""

    exit_code = 2


class GoldenMismatch(BadInput):
    """A golden set does not fit the model it is used with."""


class RuntimeUnavailable(AgentError):
    """The requested runtime is not installed or cannot work in this environment."""


class WorkerFailed(AgentError):
    """The worker process crashed, hung or was killed."""


class DigestMismatch(AgentError):
    """Bytes do not match the sha256 they were declared with."""

    exit_code = 2


class ArtifactCorrupt(AgentError):
    """A stored artifact no longer hashes to its digest (corrupted at rest)."""

    def __init__(
        self, message: str, *, name: str, digest: str, actual: str, hint: str | None = None
    ):
        super().__init__(message, hint=hint)
        self.name = name
        self.digest = digest
        self.actual = actual


class DeviceBusy(AgentError):
    """Another measurement holds the device."""


class QuotaExceeded(AgentError):
    """An upload would exceed the size limit or the disk quota."""

    exit_code = 2


class BadRawInput(BadInput):
    """A raw file of a golden set (image, audio clip, text) that its pipeline cannot decode:
    truncated, a decompression bomb, a lying header, not UTF-8. ``stage`` names where it
    was refused (``decode`` or ``preprocess``)."""

    def __init__(self, message: str, hint: str | None = None, *, stage: str = "decode"):
        super().__init__(message, hint)
        self.stage = stage
