"""The one host-side interface every transport (gRPC, SSH, local) implements.

The CLI holds a ``Transport`` and never asks which kind it is. The report bytes
a transport returns are exactly the DSSE envelope the agent signed.
"""

from __future__ import annotations

import getpass
import secrets
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UntrustedDevice
from .ssh_options import SSHOptions

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
    extra_files: list[dict] = field(default_factory=list)
    """The model's external-data files, pushed beside it: ``{"name", "sha256"}`` each."""

    def extra_subjects(self) -> list[dict]:
        """``extra_files`` in the wire form, as in-toto subjects ``{"name", "digest": {"sha256"}}``."""
        return [{"name": f["name"], "digest": {"sha256": f["sha256"]}} for f in self.extra_files]


@dataclass(frozen=True)
class IdentityProof:
    """What the agent answered to a challenge: its raw Ed25519 key and the signature."""

    public_key_raw: bytes
    signature: bytes


CHALLENGE_BYTES = 32
"""Fresh random bytes the host sends to ``Prove`` (the agent takes 16 to 1024)."""


def holder_name() -> str:
    """``user@host``: who this host is, on the leases it takes and in a fleet index."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class OpenOptions:
    """What a command may say about reaching a device; each transport takes what applies
    to its scheme (:meth:`Transport.open_address`)."""

    token: str | None = None
    local_root: str | None = None
    ssh: SSHOptions | None = None
    """How to reach an ``ssh://`` address (None: as ``ssh`` itself would)."""
    tls: dict[str, str] | None = None
    """PEM files for TLS (``tls_ca``, and for mutual TLS ``tls_cert`` and ``tls_key``)."""
    pinned_key: bytes | None = None


class Transport(ABC):
    """A connection from the host to one device's agent.

    Nothing but :meth:`prove` reaches the device before the agent has proved it
    holds its device key: every other method first calls :meth:`ensure_identity`
    (a fresh challenge, checked against ``pinned_key`` when one is set), and the
    gRPC transport attaches its token only afterwards. So a token, a model or a
    golden set never goes to an agent that did not prove it holds the expected key.
    """

    address: str
    pinned_key: bytes | None = None
    """The raw key the device must prove it holds (None: any key, e.g. at enrolment)."""

    @classmethod
    def open_address(cls, address: str, options: OpenOptions) -> Transport:
        """A transport to ``address`` (of this transport's scheme, ``schemes.py``): each
        transport reads its own address and takes the options that apply to it."""
        raise NotImplementedError

    proven_key: bytes | None = None
    """The raw device key the agent proved it holds (None until :meth:`prove_identity`)."""
    last_run_id: str | None = None
    """The run id of the latest qualify, known as soon as the agent accepted it."""

    @abstractmethod
    def prove(self, challenge: bytes) -> IdentityProof:
        """Ask the agent to sign ``challenge`` with its device key (sends no token)."""

    def prove_identity(self, pinned_key_raw: bytes | None) -> bytes:
        """Make the agent prove it holds a device key; return that raw key.

        A fresh challenge is signed by the agent and checked here. With
        ``pinned_key_raw`` the key must be that one (UntrustedDevice otherwise);
        without it (enrolment, or finding a device by its key) any key that signed
        the challenge is returned, for the caller to pin or look up.
        """
        from edgequal.contract.identity import verify_identity_proof
        from edgequal.contract.keys import fingerprint_of

        challenge = secrets.token_bytes(CHALLENGE_BYTES)
        proof = self.prove(challenge)
        if not verify_identity_proof(proof.public_key_raw, challenge, proof.signature):
            raise UntrustedDevice(
                f"the agent at {self.address} did not prove it holds a device key "
                "(its answer to the challenge does not verify)",
                hint="this is not an edgequal agent, or something between relays it; "
                "nothing was sent to it",
            )
        if pinned_key_raw is not None and proof.public_key_raw != pinned_key_raw:
            raise UntrustedDevice(
                f"the agent at {self.address} holds key {fingerprint_of(proof.public_key_raw)}, "
                f"not the pinned {fingerprint_of(pinned_key_raw)}: device identity changed "
                "(re-keyed or impersonated); nothing was sent to it",
                hint="if the device was re-keyed on purpose, check the new fingerprint on the "
                "device, then `edgequal devices forget NAME` and trust it again",
            )
        self.proven_key = proof.public_key_raw
        self._identity_proven()
        return proof.public_key_raw

    def _identity_proven(self) -> None:
        """Hook: the device proved its key (the gRPC transport attaches its token here)."""

    def use_token(self, token: str | None) -> None:
        """Set the device's bearer token, sent only once it proved its key (SSH needs none)."""

    def ensure_identity(self) -> None:
        """Prove the device's identity (against ``pinned_key``) unless this connection did."""
        if self.proven_key is None:
            self.prove_identity(self.pinned_key)

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
