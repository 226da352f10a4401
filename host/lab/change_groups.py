"""The lab's view of its changes: the changes of one night on several boards grouped by the
fingerprint fields they share, against a change on one board alone.

A **group** is one explanation of one night: every change (any model, figure or board)
whose first run after it is in that night's fleet run (or, a night or two late under
noise, within ``SAME_CHANGE_WINDOW`` of the group's first) and whose culprit names the same
field with the same values either side ("12 of 12 raspberry-pi/5 boards, night 41: kernel
6.6.31 → 6.6.51"). Of a change's culprit, the fields that tell its runs apart
(separation ≥ ``MACHINE_SEPARATION``, else its best one) are what it can share. Each change
is in one group: the one it shares with the most boards (then the most fields). Changes
nothing recorded explains are grouped by their cause (``machine``, ``unexplained``) the
same way. A group of one board is that board's own: its health, not the fleet's.

A **night** is a fleet run (``lab/20261114T0200Z-abc123``), numbered by its place among
the history's fleet runs (1 the oldest); a run recorded outside a fleet is of its UTC day.
A board's **kind** is its device profile (``raspberry-pi/5``), else its board model.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from .change_causes import MACHINE_SEPARATION
from .changes import SAME_CHANGE_WINDOW, Change, ChangeReport

CAUSE_WORDS = {
    "machine": "nothing recorded changed; the machine moved with it",
    "unexplained": "nothing recorded changed, and the machine did not move with it",
}


def night_of(point_json: dict) -> str:
    """A run's night: its fleet run, else its UTC day."""
    return point_json.get("fleet_run") or (point_json.get("measured_at") or "")[:10]


def board_kind(predicate: dict) -> str:
    """A board's kind: its device profile, else its board model, else ``board``."""
    plan = predicate.get("plan") or {}
    fp = predicate.get("fingerprint") or {}
    return str(plan.get("profile") or fp.get("board_model") or fp.get("architecture") or "board")


def _when(text: str | None) -> dt.datetime:
    return dt.datetime.strptime(text or "1970-01-01T00:00:00Z", "%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ChangeGroup:
    """One night's changes that share an explanation (see the module doc)."""

    night: str
    night_number: int | None
    measured_at: str
    fields: list[dict]
    cause: str
    changes: list[Change]
    boards: list[str]
    kinds: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per board kind: (boards of the group, boards of that kind that ran that night)."""

    @property
    def alone(self) -> bool:
        """One board only: that board's own change (its health), not the fleet's."""
        return len(self.boards) == 1

    def where(self) -> str:
        """``12 of 12 raspberry-pi/5 boards`` (kinds joined), or ``pi5-c alone of 12 …``."""
        parts = [f"{n} of {of} {kind} boards" for kind, (n, of) in self.kinds.items()]
        if self.alone:
            kind, (_, of) = next(iter(self.kinds.items()))
            return f"{self.boards[0]} alone of {of} {kind} board{'s' if of != 1 else ''}"
        return ", ".join(parts)

    def explanation(self) -> str:
        """The shared fields (``kernel 6.6.31 → 6.6.51``), or the cause in words."""
        if self.fields:
            return ", ".join(f"{f['field']} {f['before']} → {f['after']}" for f in self.fields)
        return CAUSE_WORDS.get(self.cause, self.cause)

    def headline(self) -> str:
        """``12 of 12 raspberry-pi/5 boards, night 41: kernel 6.6.31 → 6.6.51`` and, for a
        board alone, that it is the board's health."""
        night = f"night {self.night_number}" if self.night_number else self.night
        text = f"{self.where()}, {night} ({self.measured_at[:10]}): {self.explanation()}"
        if self.alone:
            text += " (that board's health)" if not self.fields else " (that board only)"
        return text

    def to_json(self) -> dict:
        """JSON-ready: the night, what is shared, the boards, and each change's headline."""
        return {
            "night": self.night,
            "night_number": self.night_number,
            "measured_at": self.measured_at,
            "fields": self.fields,
            "cause": self.cause,
            "boards": self.boards,
            "kinds": {k: {"boards": n, "of": of} for k, (n, of) in self.kinds.items()},
            "alone": self.alone,
            "headline": self.headline(),
            "changes": [
                {
                    "device": c.device,
                    "model": c.model,
                    "preset": c.preset,
                    "figure": c.figure,
                    "ratio": c.ratio,
                    "worse": c.worse,
                    "cause": c.cause,
                    "headline": c.headline(),
                }
                for c in self.changes
            ],  # fmt: skip
        }


def _shareable(c: Change) -> list[tuple]:
    """The culprit fields a change can share: those that tell its runs apart, else its best."""
    strong = [x for x in c.culprit if x.get("separation", 0) >= MACHINE_SEPARATION]
    fields = strong or c.culprit[:1]
    return [(x["field"], repr(x["before"]), repr(x["after"])) for x in fields]


def _clusters(members: Sequence[int], changes: Sequence[Change]) -> list[list[int]]:
    """Changes (indices) in runs of time: each within the window of its cluster's first, or
    in its first's fleet run."""
    order = sorted(members, key=lambda i: changes[i].first_after["measured_at"] or "")
    out: list[list[int]] = []
    for i in order:
        c = changes[i]
        if out:
            first = changes[out[-1][0]]
            same_run = c.first_after.get("fleet_run") and c.first_after.get(
                "fleet_run"
            ) == first.first_after.get("fleet_run")
            near = _when(c.first_after["measured_at"]) - _when(first.first_after["measured_at"])
            if same_run or near <= SAME_CHANGE_WINDOW:
                out[-1].append(i)
                continue
        out.append([i])
    return out


def group_changes(found: ChangeReport) -> list[ChangeGroup]:
    """The groups of ``found``'s changes, the latest night first (see the module doc)."""
    changes = found.changes
    kinds: dict[str, str] = {}
    ran: dict[str, set[str]] = {}
    first_seen: dict[str, str] = {}
    for s in found.series:
        for p in s.points:
            kinds[s.device] = board_kind(p.report.predicate)
            night = night_of(p.to_json())
            ran.setdefault(night, set()).add(s.device)
            first_seen[night] = min(first_seen.get(night, "~"), p.to_json()["measured_at"] or "")
        for g in s.gaps:
            night = night_of(g)
            ran.setdefault(night, set()).add(s.device)
            first_seen[night] = min(first_seen.get(night, "~"), g["measured_at"] or "")
    fleet_nights = sorted((t, n) for n, t in first_seen.items() if "/" in n)
    numbers = {n: i for i, (_, n) in enumerate(fleet_nights, start=1)}

    # Candidates: (key, cluster) → the changes in it; the same set under several keys is one
    # candidate with several fields.
    by_key: dict[tuple, list[int]] = {}
    for i, c in enumerate(changes):
        keys = _shareable(c) or [("cause", c.cause)]
        for k in keys:
            by_key.setdefault(k, []).append(i)
    candidates: dict[frozenset, list[tuple]] = {}
    for key, members in by_key.items():
        for cluster in _clusters(members, changes):
            candidates.setdefault(frozenset(cluster), []).append(key)

    def rank(item) -> tuple:
        members, keys = item
        return (-len({changes[i].device for i in members}), -len(keys), min(members))

    taken: set[int] = set()
    groups = []
    for members, keys in sorted(candidates.items(), key=rank):
        mine = sorted(i for i in members if i not in taken)
        if not mine:
            continue
        taken.update(mine)
        own = [changes[i] for i in mine]
        first = min(own, key=lambda c: c.first_after["measured_at"] or "")
        night = night_of(first.first_after)
        boards = sorted({c.device for c in own})
        fields = []
        for key in keys:
            if key[0] == "cause":
                continue
            entry = next(x for c in own for x in c.culprit if x["field"] == key[0])
            fields.append({k: entry.get(k) for k in ("field", "category", "before", "after")})
        per_kind: dict[str, tuple[int, int]] = {}
        for kind in sorted({kinds.get(b, "board") for b in boards}):
            mine_of_kind = [b for b in boards if kinds.get(b, "board") == kind]
            ran_of_kind = {b for b in ran.get(night, set()) | set(boards)
                           if kinds.get(b, "board") == kind}  # fmt: skip
            per_kind[kind] = (len(mine_of_kind), len(ran_of_kind))
        groups.append(
            ChangeGroup(
                night=night,
                night_number=numbers.get(night),
                measured_at=first.first_after["measured_at"] or "",
                fields=fields,
                cause=first.cause if not fields else "recorded",
                changes=sorted(own, key=lambda c: (c.device, c.model, c.figure)),
                boards=boards,
                kinds=per_kind,
            )
        )
    # The latest night first; within a night, the widest explanation first.
    groups.sort(key=lambda g: (first_seen.get(g.night, g.measured_at), len(g.boards)), reverse=True)
    return groups
