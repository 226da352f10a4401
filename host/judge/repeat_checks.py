"""Gate checks on repeated runs on one board (``[repeat]``, docs/gating.md): a report of
``qualify --repeat N`` holds N runs' figures and their spread (``results.repeats``).

``min_runs`` asks for at least that many runs; ``max_cv`` limits the coefficient of
variation across the runs of each figure they share (p50, p99, sustained throughput).
A limit on a report without repeated runs fails as not measured, naming the flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import INTEGER, NUMBER, GateSection, limit_check, not_measured

if TYPE_CHECKING:
    from .policy import Policy

NAME = "repeat"
_FIGURES = {"p50_ms": "p50", "p99_ms": "p99", "sustained_per_s": "sustained throughput"}


def repeat_checks(results: dict, policy: Policy) -> list:
    """One check per ``[repeat]`` limit (``max_cv`` per figure the runs share)."""
    limits = dict(policy.repeat)
    if not limits:
        return []
    repeats = (results or {}).get("repeats")
    if not repeats or not repeats.get("runs"):
        return [
            not_measured(
                NAME,
                f"{NAME}.{key}",
                str(value),
                f"{NAME}.{key}: not measured: the report holds one run (qualify with --repeat N)",
            )
            for key, value in limits.items()
        ]
    checks = []
    if "min_runs" in limits:
        checks.append(
            limit_check(
                NAME,
                f"{NAME}.min_runs",
                "repeated runs",
                repeats["n"],
                limits["min_runs"],
                "min",
            )
        )
    if "max_cv" in limits:
        for key, spread in (repeats.get("spread") or {}).items():
            label = _FIGURES.get(key, key)
            values = ", ".join(f"{r['figures'][key]:g}" for r in repeats["runs"])
            checks.append(
                limit_check(
                    NAME,
                    f"{NAME}.max_cv[{key}]",
                    f"CV of {label} over {spread['n']} runs",
                    spread.get("cv"),
                    limits["max_cv"],
                    "max",
                    detail=f"median {spread['median']:g}, runs {values}",
                    missing="not measured: a CV needs two runs",
                )
            )
    return checks


SECTION = GateSection(
    NAME,
    keys={"min_runs": INTEGER, "max_cv": NUMBER},
    checks=repeat_checks,
)
