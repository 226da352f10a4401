"""Proof that the agent holds its device key, for a host to check before it sends anything.

The host sends a fresh random challenge; the agent signs it with the device key
over DSSE PAE(``IDENTITY_PROOF_TYPE``, challenge). Reports are signed over
PAE(``application/vnd.in-toto+json``, payload), and PAE encodes the type and
both lengths, so no proof is ever a valid report signature and no report
signature a valid proof: a host cannot make the device sign a report by
choosing a challenge.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import BadInput
from .keys import DeviceKey
from .signing import pae

IDENTITY_PROOF_TYPE = "application/vnd.edgequal.identity-proof.v1"
MIN_CHALLENGE_BYTES = 16
MAX_CHALLENGE_BYTES = 1024


def check_challenge(challenge: bytes) -> bytes:
    """Return ``challenge`` if it is 16 to 1024 bytes, else raise BadInput."""
    if not isinstance(challenge, bytes) or not (
        MIN_CHALLENGE_BYTES <= len(challenge) <= MAX_CHALLENGE_BYTES
    ):
        size = len(challenge) if isinstance(challenge, bytes) else type(challenge).__name__
        raise BadInput(
            f"an identity challenge is {MIN_CHALLENGE_BYTES} to {MAX_CHALLENGE_BYTES} bytes, "
            f"not {size}",
            hint="send fresh random bytes, e.g. secrets.token_bytes(32)",
        )
    return challenge


def proof_message(challenge: bytes) -> bytes:
    """The bytes a proof signs: PAE of the identity-proof type and the challenge."""
    return pae(IDENTITY_PROOF_TYPE, check_challenge(challenge))


def prove_identity(key: DeviceKey, challenge: bytes) -> bytes:
    """The device key's 64-byte signature over :func:`proof_message`."""
    return key.sign(proof_message(challenge))


def verify_identity_proof(public_key_raw: bytes, challenge: bytes, signature: bytes) -> bool:
    """True when ``signature`` proves the holder of ``public_key_raw`` signed ``challenge``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(
            signature, proof_message(challenge)
        )
    except (InvalidSignature, ValueError, BadInput):
        return False
    return True
