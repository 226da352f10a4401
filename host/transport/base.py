"""The one host-side interface every transport (gRPC, SSH, local) implements.

The CLI holds a ``Transport`` and never asks which kind it is. The report bytes
a transport returns are exactly the DSSE envelope the agent signed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ProgressEvent = dict
"""A progress event from the agent: ``{"type": "run"|"phase"|"progress"|"log", ...}``.

Every transport's first event is ``{"type": "run", "run_id": ...}``, passed on as
soon as the agent accepted the run (see docs/protocol.md).
"""


@dataclass
class PushResult:
    """What a push did: the digest, the artifact size, and how many bytes crossed the wire."""

    digest: str
    size: int
    bytes_sent: int


@dataclass
class QualifyRequest:
    """One qualification to run on the device.

    ``plan`` is the JSON-ready plan dict (preset, runtime, threads, durations...);
    ``nonce`` is the host's fresh random value the signed report must echo.
    """

    model_digest: str
    plan: dict
    nonce: str
    golden_digest: str | None = None
    model_name: str = "model"
    golden_name: str | None = None
    holder: str = ""


class Transport(ABC):
    """A connection from the host to one device's agent."""

    address: str
    lease_id: str | None = None
    """The device lease this connection holds (its qualifications run under it), if any."""

    def acquire_lease(
        self,
        purpose: str,
        ttl_s: float,
        wait_s: float | None = 0.0,
        on_wait: Callable[[dict], None] | None = None,
    ) -> dict:
        """Take the device lease: fail fast (``wait_s=0``), wait up to ``wait_s``, or (None)
        without limit, in order of arrival. Returns the lease as JSON; raises DeviceBusy."""
        from ..errors import TransportError

        raise TransportError(f"{self.address}: this transport has no device leases")

    def renew_lease(self, ttl_s: float) -> dict:
        """Extend the held lease to ``ttl_s`` from now."""
        from ..errors import TransportError

        raise TransportError(f"{self.address}: this transport has no device leases")

    def release_lease(self) -> bool:
        """Give the held lease back; False when there was none (or it had expired)."""
        return False

    @abstractmethod
    def info(self) -> dict:
        """The agent's Info: fingerprint, runtimes, key (raw base64 and fingerprint), busy state."""

    @abstractmethod
    def push(
        self, path: Path, digest: str, on_progress: Callable[[int, int], None] | None = None
    ) -> PushResult:
        """Upload ``path`` (sha256 ``digest``) unless the agent holds it; resume a partial upload."""

    @abstractmethod
    def qualify(self, request: QualifyRequest, on_event: Callable[[ProgressEvent], None]) -> bytes:
        """Run a qualification, streaming events to ``on_event``; return the signed envelope bytes."""

    @abstractmethod
    def get_report(self, run_id: str) -> bytes:
        """Fetch a stored signed report by run id."""

    @abstractmethod
    def cancel(self, run_id: str) -> None:
        """Ask the agent to stop a run; it still ends with a signed report."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
