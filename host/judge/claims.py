"""What a gate decision claims, in the terms a release pipeline checks: each check as a claim: ``{metric, comparator, threshold, measured, sampleSize,
passed}``, the threshold as the policy wrote it, the sample size the figure rests on
(latency calls per shape, cold-load processes, golden cases, scored sustained windows:
each section's ``sample_size``, declared beside its checks), as in-toto's proposals for
evaluation results ask.
"""

from __future__ import annotations

import re

from .check_kit import Check
from .policy import Policy

_COMPARATORS = {"≤": "<=", "≥": ">=", "<": "<", ">": ">", "=": "=="}
_SHAPE = re.compile(r"\[(.*)\]$")


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


def sample_size(predicate: dict, check: Check, policy: Policy) -> int | None:
    """How many measurements the checked figure rests on, where the report says (its
    section's ``sample_size``)."""
    section = policy.section(check.section)
    if section is None or section.sample_size is None:
        return None
    return section.sample_size(predicate.get("results") or {}, check)


def check_name(check: Check) -> str:
    """A check's name led by its section (``drift.max_flip_count``, ``verify``), as the
    gate's table, JUnit and the attestation name it."""
    if check.name == check.section or check.name.startswith(f"{check.section}."):
        return check.name
    return f"{check.section}.{check.name}"


def claims(predicate: dict, policy: Policy, checks: list[Check]) -> list[dict]:
    """Every check as ``{metric, comparator, threshold, measured, sampleSize, passed,
    judged}``."""
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
                "sampleSize": sample_size(predicate, check, policy),
                "passed": check.passed,
                # False: a figure an inconclusive run did not measure (no verdict on it).
                "judged": getattr(check, "judged", True),
            }
        )
    return out
