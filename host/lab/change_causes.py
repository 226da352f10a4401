"""What a change point is put down to: something recorded, the machine, or nothing.

A change of a series (``host/lab/changes.py``) has a **cause**:

- ``recorded``: a fingerprint field differs either side (its culprit: a kernel, a
  firmware, the model's digest...). A change for the worse fails a fleet run's gate.
- ``machine``: nothing recorded changed, and the machine moved with the figure: one of
  the run's own measurements of the machine (:data:`MACHINE_SIGNALS`) tells the runs
  before from the runs after (separation at least :data:`MACHINE_SEPARATION`) and, for a
  timing figure (:data:`DIRECTED_KINDS`), moved the way the figure did (up where the
  figure got worse for other processes' CPU use and the bare import time, down for the
  share of calls that kept the CPU). Memory, drift and energy move with the machine with
  no fixed sign (measured: an unchanged model's peak memory 73–81 MB over nine loaded
  nights, 82.8 MB on every quiet one after), so for them moving at the same point is
  enough. Shown and recorded, not failed by default: the lab's ``[changes]
  fail_on_machine = true`` fails it too.
- ``unexplained``: nothing recorded changed and the machine did not move with it (or was
  not measured). Failed like a recorded change: nothing says it is the machine.

The machine's measurements, per run, from its signed report:

- **other processes' CPU use** (``interference.other_cpus`` of the first shape's timed
  loop, in CPUs): a neighbour's load;
- **the clean-call fraction** (``1 − preemption.share`` of that loop: the calls that kept
  the CPU): the scheduler's share for the worker;
- **the bare speed**: the runtime's import in the fresh cold-load processes (median
  ``cold_load.import_ms``), the same code whatever the model: no model is involved, so
  it moves with the machine (a clock, a busy sibling, a slow disk), not with the export.
  Where the runtime version changed, that is recorded and the change is ``recorded``.

Pure: report predicates (dicts) in, evidence out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from edgequal.contract.preemption import decisive_entry

MACHINE_SEPARATION = 0.6
"""How well a machine measurement must tell the runs before from those after (|2·AUC − 1|)
for a change with no recorded culprit to be put down to the machine."""

CAUSES = ("recorded", "machine", "unexplained")

DIRECTED_KINDS = ("latency", "tail", "throughput", "stability", "cold")
"""Kinds of figure a busier or slower machine makes worse: for them, the machine explains a
change only when it moved the same way (busier where the figure got worse)."""


@dataclass(frozen=True)
class MachineSignal:
    """One measurement of the machine a run makes: its key, its words, how it is printed,
    and which way it moves when the machine gets in the way."""

    key: str
    label: str
    unit: str
    worse_when: str  # "up" or "down"

    def moved(self, before: float, after: float) -> str:
        """``0.20 → 0.95 CPUs``, ``97 % → 61 %``, ``304 ms → 425 ms``."""
        if self.unit == "share":
            return f"{before:.0%} → {after:.0%}"
        if self.unit == "CPUs":
            return f"{before:.2f} → {after:.2f} CPUs"
        return f"{before:.3g} {self.unit} → {after:.3g} {self.unit}"


MACHINE_SIGNALS = (
    MachineSignal("other_cpus", "other processes' CPU use", "CPUs", "up"),
    MachineSignal("clean_share", "calls that kept the CPU", "share", "down"),
    MachineSignal("bare_import_ms", "the runtime's import (bare speed)", "ms", "up"),
)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def machine_readings(predicate: Mapping) -> dict[str, float]:
    """The machine's measurements one run made (keys of :data:`MACHINE_SIGNALS`; a
    measurement the run did not make is absent, never 0)."""
    results = predicate.get("results") or {}
    shapes = (results.get("latency") or {}).get("per_shape") or []
    out: dict[str, float | None] = {}
    if shapes:
        entry = decisive_entry(shapes[0])
        out["other_cpus"] = _number((entry.get("interference") or {}).get("other_cpus"))
        share = _number((entry.get("preemption") or {}).get("share"))
        out["clean_share"] = None if share is None else 1.0 - share
    imported = ((results.get("cold_load") or {}).get("import_ms") or {}).get("median")
    out["bare_import_ms"] = _number(imported)
    return {k: v for k, v in out.items() if v is not None}


def separation(before: Sequence[float], after: Sequence[float]) -> float:
    """|2·AUC − 1| of two samples (the Mann–Whitney U statistic scaled): 0, no telling them
    apart; 1, every value after beyond every value before."""
    from scipy.stats import mannwhitneyu

    if not before or not after:
        return 0.0
    u = mannwhitneyu(after, before).statistic
    return float(abs(2.0 * u / (len(after) * len(before)) - 1.0))


def machine_evidence(
    before: Sequence[Mapping[str, float]],
    after: Sequence[Mapping[str, float]],
    worse: bool,
    directed: bool = True,
) -> list[dict]:
    """Each machine measurement made either side of a change (``before``/``after``: each
    run's :func:`machine_readings`): its medians, separation and whether it **moved with**
    the change (separates the runs and, ``directed`` (a timing figure), went the way that
    explains the figure's move: worse with a busier machine, better with a quieter one)."""
    out = []
    for signal in MACHINE_SIGNALS:
        b = [r[signal.key] for r in before if signal.key in r]
        a = [r[signal.key] for r in after if signal.key in r]
        if not b or not a:
            continue
        mb, ma = float(np.median(b)), float(np.median(a))
        sep = separation(b, a)
        busier = (ma > mb) if signal.worse_when == "up" else (ma < mb)
        out.append(
            {
                "signal": signal.key,
                "label": signal.label,
                "before": round(mb, 4),
                "after": round(ma, 4),
                "separation": round(sep, 3),
                "moved_with": bool(
                    sep >= MACHINE_SEPARATION and ma != mb and (busier == worse or not directed)
                ),
            }
        )
    return out


def cause_of(culprit: Sequence, machine: Sequence[Mapping]) -> str:
    """``recorded`` (a field changed), ``machine`` (only the machine moved with it) or
    ``unexplained``."""
    if culprit:
        return "recorded"
    return "machine" if any(m["moved_with"] for m in machine) else "unexplained"


def _moved(m: Mapping) -> str:
    signal = next(s for s in MACHINE_SIGNALS if s.key == m["signal"])
    return f"{m['label']} {signal.moved(m['before'], m['after'])}"


def machine_text(machine: Sequence[Mapping]) -> str:
    """What a change with no recorded culprit was read against, after "nothing recorded
    changed there": ``: a machine change (other processes' CPU use 0.20 → 0.95 CPUs)``, or
    `` (the machine did not move with it: …: unexplained)``, or not measured."""
    moved = [m for m in machine if m["moved_with"]]
    if moved:
        return ": a machine change (" + "; ".join(_moved(m) for m in moved) + ")"
    if not machine:
        return " (the machine's load and speed not measured: unexplained)"
    return (
        " (the machine did not move with it: " + "; ".join(_moved(m) for m in machine)
        + ": unexplained)"
    )  # fmt: skip


def fails(worse: bool, cause: str, fail_on_machine: bool) -> bool:
    """Whether a new change fails a fleet run's gate (its JUnit case, the exit code): a
    change for the worse, unless the machine alone explains it and the lab does not ask
    (``[changes] fail_on_machine``)."""
    return worse and (cause != "machine" or fail_on_machine)
