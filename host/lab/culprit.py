"""Why a change happened, as far as the runs recorded it: the culprit (every fingerprint
field that differs either side, ranked by how well it separates the runs before from those
after) and other processes' CPU use either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from edgequal.contract.preemption import decisive_entry

from ..judge.baseline import change_category, fingerprint_fields
from .change_causes import separation as numeric_separation
from .series import Point, finite_number, value_at


def culprit_fields(culprit: list[dict]) -> list[dict]:
    """A change's culprit fields, the model first (a new export explains most), then the
    golden set, then the rest as :func:`culprit` ranked them."""
    first = {"model": 0, "golden": 1}
    return sorted(culprit, key=lambda c: first.get(c["field"], 2))


def culprit_field_text(c: Mapping) -> str:
    """One culprit field in words: ``model m.onnx sha256 1a2b… → 3c4d…`` (a digest's file
    name said once where it did not change), ``runtime.version 1.20.0 → 1.21.0``."""
    before, after = str(c["before"]), str(c["after"])
    b_name, b_sep, b_digest = before.rpartition(" sha256 ")
    a_name, a_sep, a_digest = after.rpartition(" sha256 ")
    if b_sep and a_sep and b_name == a_name:
        return f"{c['field']} {b_name} sha256 {b_digest} → {a_digest}"
    return f"{c['field']} {before} → {after}"


def culprit_text(culprit: list[dict]) -> str:
    """Every culprit field of a change, the model first, joined: what a headline names."""
    return ", ".join(culprit_field_text(c) for c in culprit_fields(culprit))


def load_either_side(before: list[Point], after: list[Point]) -> dict | None:
    """Other processes' CPU use (``other_cpus``, measured by the agent in each run's timed
    loop of its first shape) either side of a change: medians and separation; None where a
    side has no such measurement (a board without /proc/stat)."""

    def other(points: list[Point]) -> list[float]:
        out = []
        for p in points:
            entries = value_at(p.report.predicate, "results", "latency", "per_shape") or []
            ev = (decisive_entry(entries[0]).get("interference") or {}) if entries else {}
            if finite_number(ev.get("other_cpus")) is not None:
                out.append(float(ev["other_cpus"]))
        return out

    b, a = other(before), other(after)
    if not b or not a:
        return None
    return {
        "other_cpus_before": round(float(np.median(b)), 3),
        "other_cpus_after": round(float(np.median(a)), 3),
        "separation": round(_separation(b, a), 3),
    }


def _separation(before: list, after: list) -> float:
    """How well a field's values tell the runs before from those after, 0 (not at all) to 1.

    Numbers (a start temperature): |2·AUC − 1| of the values (the Mann–Whitney U statistic
    scaled); anything else: the share of runs whose value occurs on one side only.
    """
    b = [v for v in before if v is not None]
    a = [v for v in after if v is not None]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a + b)
    if numeric and a and b:
        return numeric_separation(b, a)
    ab = [_hashable(v) for v in before]
    aa = [_hashable(v) for v in after]
    only_before = sum(1 for v in ab if v not in set(aa))
    only_after = sum(1 for v in aa if v not in set(ab))
    total = len(ab) + len(aa)
    return (only_before + only_after) / total if total else 0.0


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)


def culprit(before: list[Point], after: list[Point], window: int = 1) -> list[dict]:
    """Every fingerprint field that differs between the runs either side of the change,
    ranked by how well it separates the runs before from those after (best first).

    "Either side" spans ``window`` runs beyond the adjacent pair each way: under noise a
    change's first slow run can look like the runs before it, so the detected point may
    sit a run late (or early) of the night the firmware or model changed. Each field's
    ``before``/``after`` are its values at its own change nearest the point.
    """
    if not before or not after:
        return []
    fields_before = [fingerprint_fields(p.report.predicate, p.report.subjects) for p in before]
    fields_after = [fingerprint_fields(p.report.predicate, p.report.subjects) for p in after]
    near = fields_before[-(window + 1) :] + fields_after[: window + 1]
    split = min(window + 1, len(fields_before))  # index in ``near`` of the first run after
    out = []
    keys = sorted({k for f in near for k in f})
    for key in keys:
        steps = [i for i in range(1, len(near)) if near[i - 1].get(key) != near[i].get(key)]
        if not steps:
            continue
        i = min(steps, key=lambda j: (abs(j - split), j))  # the step nearest the point
        score = _separation([f.get(key) for f in fields_before], [f.get(key) for f in fields_after])
        out.append(
            {
                "field": key,
                "category": change_category(key),
                "before": near[i - 1].get(key),
                "after": near[i].get(key),
                "separation": round(score, 3),
            }
        )
    out.sort(key=lambda c: (-c["separation"], c["field"]))
    return out
