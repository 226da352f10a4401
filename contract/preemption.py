"""Which figures of a latency shape decide: the calls that kept the CPU, or all of them.

The worker tags every timed call it was switched out during (measure/latency.py). A
shape whose clean calls are enough (``preemption.clean_enough``) is decided on them:
its verdict, steadiness and tail, the gate's limits, compare and a baseline read the
``clean`` summary and the untagged samples. The as-measured ``summary`` and every raw
sample stay in the report beside them. Pure: report dicts and numpy in, figures out.
"""

from __future__ import annotations

import base64

import numpy as np


def decided_on_clean(entry: dict) -> bool:
    """The shape's clean calls were enough to decide on (a tagged loop that got them)."""
    pre = entry.get("preemption") or {}
    return bool(pre.get("clean_enough")) and bool(entry.get("clean"))


def decisive_summary(entry: dict) -> dict:
    """The summary a verdict or a limit reads: ``clean`` when it decides, else ``summary``."""
    return entry["clean"] if decided_on_clean(entry) else (entry.get("summary") or {})


def decisive_samples_ns(entry: dict) -> np.ndarray | None:
    """The raw samples (int64 ns) a baseline, compare or a confidence interval reads: those
    of the calls that kept the CPU when they decide, else all; None without raw samples."""
    raw = entry.get("samples_ns_b64")
    if not raw:
        return None
    samples = np.frombuffer(base64.b64decode(raw), dtype="<i8").astype(np.int64)
    tags = entry.get("preempted_b64")
    if not tags or not decided_on_clean(entry):
        return samples
    return samples[~decode_tags(tags, len(samples))]


def decisive_entry(entry: dict) -> dict:
    """``entry`` with ``summary`` replaced by the clean one when it decides (the entry itself
    when it does not); read its samples with :func:`decisive_samples_ns`."""
    if not decided_on_clean(entry) or "as_measured" in entry:  # untagged, or already swapped
        return entry
    return {**entry, "summary": entry["clean"], "as_measured": entry.get("summary")}


def preemption_evidence(interference: dict | None) -> dict:
    """What competed while the calls were tagged, from the same span's contention figures:
    the worker's run-queue wait share, other processes' CPUs, steal (None where unread)."""
    ev = interference or {}
    return {
        "runq_wait_share": ev.get("runq_wait_share"),
        "other_cpus": ev.get("other_cpus"),
        "steal_share": ev.get("steal_share"),
        "top_processes": [p["name"] for p in ev.get("top_processes") or []][:3],
    }


def excluded_text(entry: dict) -> str | None:
    """One line: how many calls were excluded and why, how long the worker waited."""
    pre = entry.get("preemption")
    if not pre:
        return None
    calls, excluded = pre["calls"], pre["excluded"]
    text = f"{excluded} of {calls} calls excluded (preempted)"
    ev = pre.get("evidence") or {}
    wait = ev.get("runq_wait_share")
    if wait is not None:
        text += f"; the worker waited {wait:.0%} of its runnable time"
    others = ev.get("other_cpus")
    if others:
        text += f"; other processes used {others:.2f} CPUs"
        if ev.get("top_processes"):
            text += f" ({', '.join(ev['top_processes'])})"
    if ev.get("steal_share"):
        text += f"; steal {ev['steal_share']:.0%}"
    extended = pre.get("extended_s") or 0.0
    # Under a tenth of a second past the plan is the loop's own last call, not a run-on.
    if extended >= 0.1 and entry.get("loop_s"):
        text += (
            f"; timed {entry['loop_s']:.1f} s, {extended:.1f} s past the plan's time, "
            "for clean calls"
        )
        if pre.get("limit_s"):
            text += f" (bound {pre['limit_s']:g} s)"
    if not pre["clean_enough"]:
        text += f"; {calls - excluded} clean, {pre['needed']} needed"
    return text


def encode_tags(preempted: np.ndarray) -> str:
    """Per-sample preemption tags as base64 of ``np.packbits`` (one bit a sample, big-endian)."""
    return base64.b64encode(np.packbits(preempted.astype(bool)).tobytes()).decode()


def decode_tags(text: str, count: int) -> np.ndarray:
    """The inverse of :func:`encode_tags`: ``count`` booleans."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(text), dtype=np.uint8))
    return bits[:count].astype(bool)
