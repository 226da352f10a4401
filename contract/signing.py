"""Signed reports: an in-toto Statement v1 in a DSSE envelope, signed with Ed25519.

Layers (outside in):

- DSSE envelope ``{"payloadType", "payload": base64(statement), "signatures":
  [{"keyid", "sig"}]}``; the signature covers ``PAE(payloadType, payload bytes)``
  (DSSE protocol v1.0.0), so the payload type is authenticated too.
- in-toto Statement v1: ``_type``, ``subject`` (name + sha256 of every input: model,
  external-data files, co-load models, golden set, each with its role in
  ``annotations.role``), ``predicateType``, ``predicate``.
- The predicate (built by the caller): plan, fingerprint, results, findings, raw
  samples, the host's ``nonce``, ``run_id``, ``status`` and ``reason``.

The statement is serialized once, canonically (sorted keys, no whitespace, UTF-8),
and the envelope too, so signing the same statement with the same key gives the
same bytes. Verifiers check those bytes and never re-serialize. The predicate must
be JSON-clean: str keys, no NaN or Infinity (:func:`json_clean` maps them to None).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .json_tree import leaves
from .keys import DeviceKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://edgequal.dev/qualification/v1"

STATUSES = ("passed", "degraded", "failed", "inconclusive", "incomplete")
# The statuses of a run that measured every planned phase to the end (inconclusive:
# other processes took the CPU while it measured; the report shows the evidence).
MEASURED_STATUSES = ("passed", "degraded", "inconclusive")
REQUIRED_PREDICATE_KEYS = ("nonce", "run_id", "status")

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

SUBJECT_ROLES = ("model", "external_data", "coload", "golden", "model_signature")
"""What a subject is to the run, in its ``annotations.role`` (an in-toto ResourceDescriptor
annotation): the model, one of its external-data files, a co-load model, the golden set,
the model's OMS signature file."""


def canonical_json(obj: Any) -> bytes:
    """Serialize ``obj`` deterministically: sorted keys, no spaces, UTF-8.

    Raises ValueError naming the first NaN/Infinity found (JSON has no such
    numbers; clean them with :func:`json_clean` first) and TypeError for values
    JSON cannot hold. Same input, same bytes; not RFC 8785 for floats, which is
    fine because verifiers check the bytes, not a re-encoding.
    """
    bad = _first_non_finite(obj, "$")
    if bad is not None:
        raise ValueError(f"{bad} is NaN or Infinity, which JSON cannot hold; use None")
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _first_non_finite(obj: Any, path: str) -> str | None:
    """Return the JSON path of the first non-finite float in ``obj``, or None."""
    for where, _, leaf in leaves(obj, path):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            return where
    return None


def json_clean(obj: Any) -> Any:
    """Return a copy of ``obj`` JSON can hold: NaN/Inf -> None, tuples -> lists.

    numpy scalars and arrays (anything with ``tolist()``) become Python values,
    so measurement code can hand over arrays without this module importing numpy.
    """
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if hasattr(obj, "tolist"):
        return json_clean(obj.tolist())
    raise TypeError(f"{type(obj).__name__} cannot be written to a report")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of a payload type and body.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` with lengths in bytes,
    ASCII decimal.
    """
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def build_statement(subjects: Sequence[Mapping[str, str]], predicate: Mapping[str, Any]) -> dict:
    """Return an in-toto Statement v1 over ``subjects`` ({name, sha256}) with ``predicate``.

    Raises ValueError if a subject is malformed or the predicate lacks
    ``nonce``, ``run_id`` or a known ``status``.
    """
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [_subject(s) if isinstance(s, Mapping) else s for s in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate) if isinstance(predicate, Mapping) else predicate,
    }
    validate_statement(statement)
    return statement


def _subject(s: Mapping[str, str]) -> dict:
    """``{name, sha256[, role]}`` as an in-toto ResourceDescriptor."""
    out: dict = {"name": s.get("name"), "digest": {"sha256": s.get("sha256")}}
    if s.get("role") is not None:
        out["annotations"] = {"role": s["role"]}
    return out


def subjects_of(statement: Mapping) -> list[dict]:
    """A validated statement's subjects as ``{"name", "sha256", "role"}``; ``role`` is None
    where the subject carries none (reports of agents from before subject roles)."""
    return [
        {
            "name": s["name"],
            "sha256": s["digest"]["sha256"],
            "role": (s.get("annotations") or {}).get("role"),
        }
        for s in statement["subject"]
    ]


class RolesUnmarked(ValueError):
    """The report's subjects carry no roles (an agent from before them), so which one is
    the golden set or a co-load model cannot be told; only the model is known (the first)."""


def subject_with_role(subjects: Sequence[Mapping], role: str) -> Mapping | None:
    """The subject (``{"name", "sha256", "role"}``) with ``role``, or None when there is none.

    A report without roles says only which subject is the model (agents always put it
    first); asked for another role among several subjects it raises RolesUnmarked, since
    file names say nothing (a golden set may be called anything).
    """
    if any(s.get("role") for s in subjects):
        return next((s for s in subjects if s.get("role") == role), None)
    if role == "model":
        return subjects[0] if subjects else None
    if len(subjects) <= 1:
        return None
    raise RolesUnmarked(
        f"the report's subjects carry no roles, so its {role} subject cannot be told "
        "(signed by an agent older than subject roles)"
    )


def validate_statement(statement: Any) -> None:
    """Raise ValueError naming the first problem with an edgequal statement.

    Checks ``_type``, ``predicateType``, the subject list (non-empty, unique
    names, each with a lowercase hex sha256), and the predicate's required keys:
    ``nonce`` and ``run_id`` non-empty strings, ``status`` one of STATUSES, and
    ``reason`` (when present) a string or null, required for ``incomplete``.
    Unknown fields are allowed, as in-toto requires of consumers.
    """
    if not isinstance(statement, Mapping):
        raise ValueError("statement is not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"_type is {statement.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(
            f"predicateType is {statement.get('predicateType')!r}, expected {PREDICATE_TYPE!r}"
        )
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise ValueError("subject must be a non-empty list")
    names = set()
    roles: list[str | None] = []
    for i, s in enumerate(subjects):
        if not isinstance(s, Mapping):
            raise ValueError(f"subject[{i}] is not an object")
        name = s.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"subject[{i}] has no name")
        if name in names:
            raise ValueError(f"subject name {name!r} appears twice")
        names.add(name)
        digest = s.get("digest")
        sha = digest.get("sha256") if isinstance(digest, Mapping) else None
        if not isinstance(sha, str) or not _SHA256_HEX.fullmatch(sha):
            raise ValueError(f"subject {name!r} has no sha256 digest (64 lowercase hex digits)")
        annotations = s.get("annotations", {})
        if not isinstance(annotations, Mapping):
            raise ValueError(f"subject {name!r}: annotations is not an object")
        role = annotations.get("role")
        if role is not None and role not in SUBJECT_ROLES:
            raise ValueError(f"subject {name!r}: role {role!r} is not one of {SUBJECT_ROLES}")
        roles.append(role)
    if any(r is not None for r in roles) and (None in roles or roles.count("model") != 1):
        raise ValueError("subjects must all carry a role, exactly one of them 'model', or none")
    if roles.count("golden") > 1:
        raise ValueError("a report has at most one golden set among its subjects")
    predicate = statement.get("predicate")
    if not isinstance(predicate, Mapping):
        raise ValueError("predicate is not an object")
    for key in REQUIRED_PREDICATE_KEYS:
        if key not in predicate:
            raise ValueError(f"predicate has no {key!r}")
    for key in ("nonce", "run_id"):
        if not isinstance(predicate[key], str) or not predicate[key]:
            raise ValueError(f"predicate {key!r} must be a non-empty string")
    status = predicate["status"]
    if status not in STATUSES:
        raise ValueError(f"predicate status is {status!r}, expected one of {', '.join(STATUSES)}")
    reason = predicate.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("predicate reason must be a string or null")
    if status == "incomplete" and not reason:
        raise ValueError("an incomplete report must say why (predicate reason)")


def sign_envelope(key: DeviceKey, statement: Mapping[str, Any]) -> bytes:
    """Sign ``statement`` with ``key`` and return the DSSE envelope as canonical JSON bytes."""
    validate_statement(statement)
    return sign_payload(key, canonical_json(statement))


def sign_payload(key: DeviceKey, payload: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """A DSSE envelope (canonical JSON bytes) over ``payload``, signed with ``key`` (Ed25519
    over the pre-authentication encoding); the host signs its gate decisions with it too."""
    signature = key.sign(pae(payload_type, payload))
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.keyid(), "sig": base64.b64encode(signature).decode("ascii")}],
    }
    return canonical_json(envelope)
