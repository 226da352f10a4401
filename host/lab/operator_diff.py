"""Per-operator time either side of a change: the operator profiles of the runs before and
after (``results.operators.profile``), or of the runtime versions ``bisect runtime`` measured.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .series import Point, finite_number, value_at


def operators_text(diff: list[dict], top: int = 2) -> str:
    """The ``top`` largest moves of an operator diff: ``Conv +44 %, Resize +210 %`` ('' if none)."""
    ops = [o for o in diff if o.get("ratio") is not None][:top]
    return ", ".join(f"{o['op_type']} {(o['ratio'] - 1) * 100:+.0f} %" for o in ops)


def operator_times(profiles: Iterable[list[dict] | None]) -> dict[str, list[float]]:
    """µs per inference of each operator type over several operator profiles
    (``results.operators.profile.operators`` lists), one value per profile that has it."""
    times: dict[str, list[float]] = {}
    for ops in profiles:
        for op in ops or []:
            us = finite_number(op.get("us_per_run"))
            if op.get("op_type") and us is not None:
                times.setdefault(op["op_type"], []).append(us)
    return times


def operator_diff(before: list[Point], after: list[Point]) -> list[dict]:
    """Per operator type, the median µs per inference either side, their ratio and its share
    of the time after, the largest moves first; [] unless both sides have a profile."""
    return profile_diff(
        [
            value_at(p.report.predicate, "results", "operators", "profile", "operators")
            for p in before
        ],
        [
            value_at(p.report.predicate, "results", "operators", "profile", "operators")
            for p in after
        ],
    )


def profile_diff(
    before: Iterable[list[dict] | None], after: Iterable[list[dict] | None]
) -> list[dict]:
    """:func:`operator_diff` over operator profiles themselves (a history's runs, or the
    runtime versions ``bisect runtime`` measured): the median of each side's profiles."""
    b, a = operator_times(before), operator_times(after)
    if not b or not a:
        return []
    total_after = sum(float(np.median(v)) for v in a.values()) or 1.0
    out = []
    for op in sorted(set(a) | set(b)):
        mb = float(np.median(b[op])) if op in b else None
        ma = float(np.median(a[op])) if op in a else None
        out.append(
            {
                "op_type": op,
                "us_before": mb,
                "us_after": ma,
                "ratio": (ma / mb) if mb and ma is not None else None,
                "share_after": round((ma or 0.0) / total_after, 4),
            }
        )
    out.sort(key=lambda o: -abs((o["us_after"] or 0.0) - (o["us_before"] or 0.0)))
    return out
