"""Signed gate decisions: a gate's result as an in-toto Statement v1 with the Test Result
predicate, in a DSSE envelope signed by this host's key (docs/gating.md "Signed gate
decisions").

The statement's subjects are the device report the gate verified (the envelope's bytes,
by sha256) and the model that report is about (its subject digest); the predicate is
``https://in-toto.io/attestation/test-result/v0.1``: ``result`` (``PASSED`` or
``FAILED``), the passed and failed checks by name, and the policy as ``configuration``
(its file's sha256). A release pipeline then needs two signatures for one model digest:
the device's on the figures, and the host's on the decision.

The host key is Ed25519, made on first use in the host's config directory
(``host_key/``, mode 0600), by the same rule that makes the agent's device key;
``edgequal key show`` prints what a consumer pins.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from edgequal.contract.keys import DeviceKey, load_or_create_device_key
from edgequal.contract.signing import STATEMENT_TYPE, canonical_json, sign_payload

from ..errors import UsageError
from ..paths import config_dir
from .claims import check_name
from .gate import GateResult
from .policy import Policy

TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


def host_key_dir() -> Path:
    """Where the host's signing key lives: ``<config dir>/host_key``."""
    return config_dir() / "host_key"


def load_host_key() -> DeviceKey:
    """This host's Ed25519 signing key, created (mode 0600) on first use."""
    return load_or_create_device_key(host_key_dir())


def policy_descriptor(policy: Policy, commitment: str | None = None) -> dict:
    """The policy as a resource descriptor: its file's name and sha256 as the gate read it
    (canonical JSON of the parsed policy when it came from no file), annotated with whether
    the run committed to it before its figures existed."""
    name = (
        Path(policy.source).name if policy.file_sha256 is not None else f"{policy.name}.policy.json"
    )
    out = {"name": name, "digest": {"sha256": policy.sha256}}
    if commitment is not None:
        out["annotations"] = {"commitment": commitment}
    return out


def claims_descriptor(claims: list[dict]) -> dict:
    """The gate's claims as a resource descriptor: their canonical JSON's sha256, and the
    claims themselves in its annotations (the Test Result predicate has no field of its own
    for them, and its ``configuration`` is a list of resource descriptors)."""
    digest = hashlib.sha256(canonical_json(claims)).hexdigest()
    return {"name": "claims.json", "digest": {"sha256": digest}, "annotations": {"claims": claims}}


def gate_statement(
    result: GateResult, policy: Policy, envelope: bytes, model: dict, report_name: str
) -> dict:
    """The in-toto Statement of a verified report's gate result (see the module doc)."""
    if not result.verified:
        raise UsageError(
            f"no gate decision is signed for {report_name}: the report did not verify",
            hint="a signed decision is about a verified device report only",
        )
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": report_name, "digest": {"sha256": hashlib.sha256(envelope).hexdigest()}},
            {"name": model["name"], "digest": {"sha256": model["sha256"]}},
        ],
        "predicateType": TEST_RESULT_TYPE,
        "predicate": {
            "result": "PASSED" if result.passed else "FAILED",
            "configuration": [
                policy_descriptor(policy, result.commitment),
                claims_descriptor(result.claims),
            ],
            "passedTests": [check_name(c) for c in result.checks if c.passed],
            "warnedTests": [check_name(c) for c in result.not_judged_checks],
            "failedTests": [check_name(c) for c in result.failed_checks],
        },
    }


def sign_gate_decision(
    result: GateResult,
    policy: Policy,
    envelope: bytes,
    model: dict,
    report_name: str,
    key: DeviceKey | None = None,
) -> bytes:
    """The DSSE envelope (bytes) of :func:`gate_statement`, signed with ``key`` (default:
    this host's key, created on first use)."""
    statement = gate_statement(result, policy, envelope, model, report_name)
    return sign_payload(key or load_host_key(), canonical_json(statement))
