"""Verify a signed edgequal report (DSSE envelope over an in-toto Statement v1).

Checks run in a fixed order and the first failure raises, naming the check:

1. envelope: JSON object, ``payloadType`` is the in-toto type, payload and
   signatures are base64 (standard or URL-safe, as DSSE requires verifiers to accept);
2. signature: Ed25519 over ``PAE(payloadType, payload)`` with the *pinned* key of
   the device (the envelope's keyid is only a hint for finding it);
3. statement: ``_type``, ``predicateType``, subjects, the predicate's required keys;
4. artifacts: each given file's sha256 matches a subject;
5. nonce: equals the one the host issued, and was not seen before (replay);
6. run_id: equals the expected one;
7. request (:func:`check_answers_request`, for the host that asked): the signed plan
   is the plan sent, field by field, and the subjects are exactly the artifacts pushed,
   each in its role.

The payload is parsed only after its signature verifies, and it is parsed from the
received bytes, never re-serialized.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from edgequal.contract.artifacts import file_sha256
from edgequal.contract.signing import PAYLOAD_TYPE, pae, subjects_of, validate_statement

from ..errors import UntrustedDevice, UsageError, VerificationFailed
from .trust import DeviceEntry, KnownDevices

_SIGNATURE_SIZE = 64


@dataclass(frozen=True)
class VerifiedReport:
    """A report whose signature, statement and requested bindings all checked out."""

    device_name: str
    statement: dict
    predicate: dict
    subjects: list[dict]
    fingerprint: str

    @property
    def nonce(self) -> str:
        """Return the host nonce the report answers."""
        return self.predicate["nonce"]

    @property
    def run_id(self) -> str:
        """Return the run id."""
        return self.predicate["run_id"]

    @property
    def status(self) -> str:
        """Return passed, degraded, failed, inconclusive or incomplete."""
        return self.predicate["status"]


def _b64decode(text: Any, what: str) -> bytes:
    """Decode standard or URL-safe base64, padded or not; VerificationFailed otherwise."""
    if not isinstance(text, str):
        raise VerificationFailed(f"envelope: {what} is not a base64 string")
    normalized = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(normalized + "=" * (-len(normalized) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise VerificationFailed(f"envelope: {what} is not valid base64") from e


def _parse_envelope(envelope_bytes: bytes) -> tuple[bytes, list[tuple[str | None, bytes]]]:
    """Check 1: return (payload bytes, [(keyid, signature)])."""
    try:
        envelope = json.loads(envelope_bytes)
    except RecursionError:
        raise VerificationFailed("envelope: JSON nested too deeply to be a report") from None
    except (ValueError, TypeError) as e:
        raise VerificationFailed(f"envelope: not JSON ({e})") from e
    if not isinstance(envelope, dict):
        raise VerificationFailed("envelope: not a JSON object")
    payload_type = envelope.get("payloadType")
    if payload_type != PAYLOAD_TYPE:
        raise VerificationFailed(
            f"envelope: payloadType is {payload_type!r}, expected {PAYLOAD_TYPE!r}"
        )
    payload = _b64decode(envelope.get("payload"), "payload")
    raw_signatures = envelope.get("signatures")
    if not isinstance(raw_signatures, list) or not raw_signatures:
        raise VerificationFailed("envelope: no signatures")
    signatures = []
    for i, s in enumerate(raw_signatures):
        if not isinstance(s, dict):
            raise VerificationFailed(f"envelope: signatures[{i}] is not an object")
        keyid = s.get("keyid")
        if keyid is not None and not isinstance(keyid, str):
            raise VerificationFailed(f"envelope: signatures[{i}].keyid is not a string")
        signatures.append((keyid or None, _b64decode(s.get("sig"), f"signatures[{i}].sig")))
    return payload, signatures


def _verifies(entry: DeviceEntry, message: bytes, signature: bytes) -> bool:
    """Return whether ``signature`` is entry's Ed25519 signature of ``message``."""
    if len(signature) != _SIGNATURE_SIZE:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(entry.public_key_raw).verify(signature, message)
    except InvalidSignature:
        return False
    return True


def _check_signature(
    payload: bytes,
    signatures: list[tuple[str | None, bytes]],
    known: KnownDevices,
    device: str | None,
) -> DeviceEntry:
    """Check 2: return the pinned device whose key signed the payload."""
    message = pae(PAYLOAD_TYPE, payload)
    if device is not None:
        entry = known.get(device)
        if entry is None:
            raise UntrustedDevice(
                f"signature: device {device} is not in {known.path}",
                hint=f"enrol it with `edgequal devices trust {device} ADDRESS` after checking "
                "its key fingerprint on the device",
            )
        if any(_verifies(entry, message, sig) for _, sig in signatures):
            return entry
        claimed = [k for k, _ in signatures if k]
        if not claimed or entry.keyid in (k.lower() for k in claimed):
            raise VerificationFailed(
                f"signature does not verify with the pinned key of device {device} "
                f"({entry.fingerprint}): the report was changed after it was signed"
            )
        other = known.find_by_keyid(claimed[0])
        signer = f"device {other.name}'s key" if other else f"an unknown key (key id {claimed[0]})"
        raise UntrustedDevice(
            f"signature does not verify with the pinned key of device {device} "
            f"({entry.fingerprint}): the report claims to be signed by {signer}",
            hint="the device was re-keyed or someone else signed this report; never accept "
            "it without checking the device's fingerprint",
        )

    # No device named: the keyid says which pinned key to try; DSSE allows it to be absent.
    tried: list[DeviceEntry] = []
    for keyid, sig in signatures:
        candidates = [known.find_by_keyid(keyid)] if keyid else known.list()
        for entry in candidates:
            if entry is None:
                continue
            if _verifies(entry, message, sig):
                return entry
            tried.append(entry)
    if not tried:
        ids = ", ".join(k for k, _ in signatures if k) or "none given"
        raise UntrustedDevice(
            f"signature: the report was signed by a key no known device has (key id {ids})",
            hint="enrol the device with `edgequal devices trust` after checking its "
            "fingerprint, or pass --device",
        )
    raise VerificationFailed(
        f"signature does not verify with the pinned key of device {tried[0].name} "
        f"({tried[0].fingerprint}): the report was changed after it was signed"
    )


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """json object hook: refuse duplicate keys, which parsers resolve differently."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_statement(payload: bytes) -> dict:
    """Check 3: parse the verified payload bytes and validate the statement."""
    try:
        statement = json.loads(
            payload.decode("utf-8"),
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        raise VerificationFailed("statement: JSON nested too deeply to be a report") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise VerificationFailed(f"statement: payload is not UTF-8 JSON ({e})") from e
    try:
        validate_statement(statement)
    except ValueError as e:
        raise VerificationFailed(f"statement: {e}") from e
    return statement


def _check_artifacts(subjects: list[dict], artifacts: Iterable[Path]) -> None:
    """Check 4: every artifact's sha256 must be one of the subjects' digests."""
    digests = {s["sha256"] for s in subjects}
    for path in artifacts:
        path = Path(path)
        try:
            actual = file_sha256(path)
        except OSError as e:
            raise UsageError(f"artifact {path}: cannot read it ({e.strerror})") from e
        if actual in digests:
            continue
        same_name = [s for s in subjects if Path(s["name"]).name == path.name]
        if same_name:
            s = same_name[0]
            raise VerificationFailed(
                f"artifact {path}: sha256 {actual} does not match subject {s['name']} "
                f"sha256 {s['sha256']}"
            )
        listed = ", ".join(f"{s['name']} sha256 {s['sha256']}" for s in subjects)
        raise VerificationFailed(
            f"artifact {path}: sha256 {actual} matches no subject of the report ({listed})"
        )


def payload_sha256(envelope_bytes: bytes) -> str:
    """The hex sha256 of an envelope's payload (the signed statement's bytes): the same
    for every encoding of one report (keyid hints, extra signatures, URL-safe base64)."""
    payload, _ = _parse_envelope(envelope_bytes)
    return hashlib.sha256(payload).hexdigest()


def verify_envelope(
    envelope_bytes: bytes,
    *,
    known: KnownDevices,
    device: str | None = None,
    expected_nonce: str | None = None,
    expected_run_id: str | None = None,
    artifacts: Iterable[Path] = (),
    seen_nonces: Container[str] | None = None,
) -> VerifiedReport:
    """Verify a report envelope and return its contents; raise on the first failed check.

    ``device`` pins which known device must have signed it (else the keyid picks
    one); ``seen_nonces`` holds nonces already accepted, and the caller adds
    ``report.nonce`` to it after acceptance (this function does not mutate it).
    Raises UntrustedDevice for an unknown or different key, VerificationFailed for
    every other failed check, UsageError for an unreadable artifact.
    """
    payload, signatures = _parse_envelope(envelope_bytes)
    entry = _check_signature(payload, signatures, known, device)
    statement = _parse_statement(payload)
    predicate = statement["predicate"]
    subjects = subjects_of(statement)
    _check_artifacts(subjects, artifacts)
    nonce = predicate["nonce"]
    if expected_nonce is not None and nonce != expected_nonce:
        raise VerificationFailed(
            f"nonce: the report answers nonce {nonce}, but the host issued {expected_nonce}",
            hint="the report belongs to another run, or is a replay",
        )
    if seen_nonces is not None and nonce in seen_nonces:
        raise VerificationFailed(
            f"nonce: {nonce} was already used by an accepted report (replay)",
        )
    run_id = predicate["run_id"]
    if expected_run_id is not None and run_id != expected_run_id:
        raise VerificationFailed(
            f"run_id: the report is for run {run_id}, expected {expected_run_id}"
        )
    return VerifiedReport(
        device_name=entry.name,
        statement=statement,
        predicate=predicate,
        subjects=subjects,
        fingerprint=entry.fingerprint,
    )


def _positive_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


DEVICE_FILLED_PLAN_FIELDS = {"memory_limit_mb": _positive_int}
"""Plan fields the host may leave null for the device to fill (docs/report-schema.md: the
worker's memory limit, from the operator's setting or the board's memory), each with
the check its signed value must pass; every other field is signed as sent."""


def check_answers_request(
    report: VerifiedReport, plan: Mapping[str, Any], subjects: Iterable[Mapping[str, str]]
) -> None:
    """Check 7: the report answers the request this host sent; VerificationFailed naming
    the first field that differs.

    ``plan`` is the plan's JSON as sent. The signed plan must hold the same value for
    every field; a field the host did not send may only hold the default the host's own
    plan has for it, and one it left null for the device (:data:`DEVICE_FILLED_PLAN_FIELDS`)
    only a value of that field's kind (the agent fills documented defaults and nothing
    else), so a relay that dropped or changed a phase is caught even though the agent
    signed what it ran.
    ``subjects`` are ``{"sha256", "role"}`` of every artifact pushed (model, its
    external-data files, co-load models, golden set): the report's subjects must be
    exactly those, by digest and role (by digest alone in a report without roles).
    """
    from edgequal.contract.plan import Plan

    signed = report.predicate.get("plan")
    if not isinstance(signed, Mapping):
        raise VerificationFailed("plan: the signed report holds no plan")
    expected = Plan.from_json(plan).to_json()
    for field in sorted(set(expected) | set(signed)):
        if field not in signed:
            raise VerificationFailed(
                f"plan: the signed plan has no {field!r} (sent {expected[field]!r})"
            )
        if field not in expected:
            raise VerificationFailed(
                f"plan: the signed plan has {field!r} = {signed[field]!r}, a field this host "
                "neither sent nor knows a default for"
            )
        filled = DEVICE_FILLED_PLAN_FIELDS.get(field)
        if expected[field] is None and filled is not None and filled(signed[field]):
            continue  # left to the device, which filled in the value it ran with
        if signed[field] != expected[field]:
            raise VerificationFailed(
                f"plan: the signed plan's {field} is {signed[field]!r}, the host asked for "
                f"{expected[field]!r}",
                hint="something between this host and the device changed the request; "
                "the report was not written",
            )
    with_roles = any(s.get("role") for s in report.subjects)

    def key(s: Mapping) -> tuple:
        return (s.get("role"), s["sha256"]) if with_roles else (s["sha256"],)

    pushed = sorted(key(s) for s in subjects)
    got = sorted(key(s) for s in report.subjects)
    if got != pushed:
        extra = [" ".join(map(str, k)) for k in got if k not in pushed]
        missing = [" ".join(map(str, k)) for k in pushed if k not in got]
        raise VerificationFailed(
            "subjects: the report's subjects are not the artifacts this host pushed"
            + (f"; not pushed: {', '.join(extra)}" if extra else "")
            + (f"; missing: {', '.join(missing)}" if missing else ""),
            hint="something between this host and the device changed the request; "
            "the report was not written",
        )
