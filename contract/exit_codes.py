"""The exit code a finished measurement's status means, on the agent's and the host's CLI alike."""

from __future__ import annotations


def exit_code_for(status: str, findings: list[dict]) -> int:
    """The CLI exit code of a finished measurement (docs/gating.md's table).

    0 passed or degraded; 3 when the run could not finish (incomplete); 2 when the
    model file is not a model the runtime can read at all (a bad input file); 1 for any
    other outcome: failed, including a model the runtime reads but refuses (an
    unsupported operator: the model is not qualified), and inconclusive.
    """
    if status in ("passed", "degraded"):
        return 0
    if status == "incomplete":
        return 3
    first = findings[0] if findings else {}
    if first.get("kind") == "model_rejected" and not first.get("operator"):
        return 2
    return 1
