"""Provenance a gate can require: the policy committed before the run, the model's
signature verified on the device.

- A run asked with ``qualify --gate/--policy`` or ``fleet run --gate`` carries the
  policy's sha256 in its signed plan (``plan.policy_sha256``), so the device signed it
  before any figure existed. The gate compares it with the policy it is given: the same
  digest is "committed before the run"; none, or another policy's, is "chosen after the
  run". Either is stated in the gate's output and attestation; a policy with
  ``require_committed = true`` fails a run that did not commit to it.
- ``require_model_signature = true`` fails a report whose ``results.model_signature`` is
  not ``verified`` (agent/model_signature.py).
"""

from __future__ import annotations

from .check_kit import Check
from .policy import Policy

COMMITTED = "committed before the run"
CHOSEN_AFTER = "chosen after the run"


def commitment(predicate: dict, policy: Policy) -> str:
    """Whether the run's signed plan committed to this very policy: :data:`COMMITTED`, or
    :data:`CHOSEN_AFTER` (saying so when it committed to another one)."""
    committed = (predicate.get("plan") or {}).get("policy_sha256")
    if committed == policy.sha256:
        return COMMITTED
    if committed is None:
        return CHOSEN_AFTER
    return f"{CHOSEN_AFTER} (the run committed to another policy, sha256:{committed[:16]}…)"


def commitment_checks(predicate: dict, policy: Policy) -> list[Check]:
    """``require_committed = true``: one check, passed when the run committed to this policy."""
    if not policy.require_committed:
        return []
    said = commitment(predicate, policy)
    ok = said == COMMITTED
    hint = "" if ok else "; qualify with --gate or --policy, or fleet run --gate, to commit it"
    return [
        Check(
            "require_committed",
            "plan",
            ok,
            COMMITTED,
            said.split(" (")[0],
            f"policy {policy.name} (sha256:{policy.sha256[:16]}…) was {said}{hint}",
        )
    ]


def model_signature_checks(results: dict, policy: Policy) -> list[Check]:
    """``require_model_signature = true``: one check, passed when the device verified it."""
    if not policy.require_model_signature:
        return []
    sig = results.get("model_signature") or {}
    status = sig.get("status") or "not checked (an agent from before model signatures)"
    ok = status == "verified"
    message = (
        f"model signature verified by {sig.get('key')} on the device"
        if ok
        else f"model signature {status}" + (f": {sig['reason']}" if sig.get("reason") else "")
    )
    return [Check("require_model_signature", "provenance", ok, "verified", status, message)]
