"""What a gate decision claims, in the terms a release pipeline checks.

- The policy's commitment: a run asked with ``qualify --gate/--policy`` or ``fleet run
  --gate`` carries the policy's sha256 in its signed plan (``plan.policy_sha256``), so the
  device signed it before any figure existed. The gate compares it with the policy it is
  given: the same digest is "committed before the run"; none, or another policy's, is
  "chosen after the run". Either is stated in the gate's output and attestation; a policy
  with ``require_committed = true`` fails a run that did not commit to it.
- Each check as a claim: ``{metric, comparator, threshold, measured, sampleSize,
  passed}``, the threshold as the policy wrote it, the sample size the figure rests on
  (latency calls per shape, cold-load processes, golden cases, scored sustained windows),
  as in-toto's proposals for evaluation results ask.
"""

from __future__ import annotations

import re

from edgequal.agent.measure.preemption import decisive_summary

from .checks import Check
from .policy import Policy

COMMITTED = "committed before the run"
CHOSEN_AFTER = "chosen after the run"

_COMPARATORS = {"≤": "<=", "≥": ">=", "<": "<", ">": ">", "=": "=="}
_SHAPE = re.compile(r"\[(.*)\]$")


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


def _threshold(policy_json: dict, check: Check):
    """The policy's value behind a check, as written; None when the check has no one key."""
    name = _SHAPE.sub("", check.name)
    parts = name.split(".")
    node = policy_json
    for part in parts if parts[0] == check.section else [check.section, *parts]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict) and len(node) == 1:  # [status] allowed = [...]
        node = next(iter(node.values()))
    return node if isinstance(node, (int, float, str, bool, list)) else None


def sample_size(predicate: dict, check: Check) -> int | None:
    """How many measurements the checked figure rests on, where the report says."""
    results = predicate.get("results") or {}
    if check.section == "latency":
        shape = _SHAPE.search(check.name)
        for entry in (results.get("latency") or {}).get("per_shape") or []:
            if shape and entry.get("shape") == shape.group(1):
                return decisive_summary(entry).get("count")
        return None
    if check.section == "cold_load":
        runs = (results.get("cold_load") or {}).get("runs")
        return len(runs) if runs else None
    if check.section == "drift":
        cases = (results.get("drift") or {}).get("cases") or []
        return len({row.get("case") for row in cases}) or None
    if check.section == "sustained":
        return (results.get("sustained") or {}).get("scored_windows")
    return None


def check_name(check: Check) -> str:
    """A check's name led by its section (``drift.max_flip_count``, ``verify``), as the
    gate's table, JUnit and the attestation name it."""
    if check.name == check.section or check.name.startswith(f"{check.section}."):
        return check.name
    return f"{check.section}.{check.name}"


def claims(predicate: dict, policy: Policy, checks: list[Check]) -> list[dict]:
    """Every check as ``{metric, comparator, threshold, measured, sampleSize, passed}``."""
    written = policy.to_json()
    out = []
    for check in checks:
        threshold = _threshold(written, check)
        out.append(
            {
                "metric": check_name(check),
                "comparator": _COMPARATORS.get(check.limit[:1], "satisfies"),
                "threshold": threshold if threshold is not None else check.limit,
                "measured": check.measured,
                "sampleSize": sample_size(predicate, check),
                "passed": check.passed,
            }
        )
    return out
