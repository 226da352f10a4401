"""Exceptions raised by the agent. One root, subclasses name the cause."""


class AgentError(Exception):
    """Root of every error the agent raises on purpose.

    ``hint`` is a short suggestion shown after the one-line message;
    ``exit_code`` follows the CLI contract (2 bad input, 3 device/runtime failure).
    """

    exit_code = 3

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


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
