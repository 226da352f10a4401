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
from .check_kit import Check
from .gate import GateResult
from .policy import Policy

TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


def host_key_dir() -> Path:
    """Where the host's signing key lives: ``<config dir>/host_key``."""
    return config_dir() / "host_key"


def load_host_key() -> DeviceKey:
    """This host's Ed25519 signing key, created (mode 0600) on first use."""
    return load_or_create_device_key(host_key_dir())


def check_name(check: Check) -> str:
    """A check's name in the attestation, led by its section (``drift.max_flip_count``,
    ``verify``), as the gate's table and JUnit name it."""
    if check.name == check.section or check.name.startswith(f"{check.section}."):
        return check.name
    return f"{check.section}.{check.name}"


def policy_descriptor(policy: Policy) -> dict:
    """The policy as a resource descriptor: its file's name and sha256 (canonical JSON of
    the parsed policy when it came from no file)."""
    source = Path(policy.source)
    try:
        data = source.read_bytes()
        name = source.name
    except OSError:
        data, name = canonical_json(policy.to_json()), f"{policy.name}.policy.json"
    return {"name": name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}


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
            "configuration": [policy_descriptor(policy)],
            "passedTests": [check_name(c) for c in result.checks if c.passed],
            "warnedTests": [],
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
