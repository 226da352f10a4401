"""The cause of a slow window or an unsteady latency phase: throttling, interference or unexplained.

Pure functions over the contention samples of ``probes/contention.py`` and the
throttle evidence of ``probes/telemetry.py``, measured in the same window as the
throughput they explain (docs/measurement.md, "Attribution"):

- ``throttling``: a throttle indicator fired in the window (firmware flags, a clock
  below 97 % of the highest seen, a CPU cooling device engaged, the trip point reached);
- ``interference``: the worker waited for a CPU (run-queue wait) or other processes
  used more CPU, or the hypervisor stole time, more than in the reference window;
- ``unexplained``: the window is slower and neither was measured.

Throttling and under-voltage can fail a run; interference makes it ``inconclusive``
(re-run on a quiet board); an unexplained drop is reported beside the figures.
"""

from __future__ import annotations

from collections.abc import Sequence

# A window more than this much slower than the best counts as a drop (the 97 % rule).
DROP_FRACTION = 0.03
# Rises over the reference window that count as interference: the share of the time
# the worker was runnable that it spent waiting, other processes' CPU (in CPUs), steal.
RUNQ_WAIT_RISE = 0.05
OTHER_CPU_RISE_CPUS = 0.25
STEAL_RISE = 0.02
# Absolute levels for a phase with no reference window (warm latency).
RUNQ_WAIT_PRESENT = 0.05
STEAL_PRESENT = 0.02
TOP_PROCESSES = 5


def declared_ticks_between(a: dict, b: dict, pgid: int | None = None) -> int:
    """CPU ticks the declared co-load (one process group, or all) used from sample ``a`` to ``b``.

    Only processes read in both samples count: one that started or ended between them
    is counted from the next pair on.
    """
    first, last = a.get("declared") or {}, b.get("declared") or {}
    total = 0
    for pid, (group, ticks) in last.items():
        if pid in first and (pgid is None or group == pgid):
            total += max(0, ticks - first[pid][1])
    return total


def _bracket(samples: Sequence[dict], t0: float, t1: float) -> tuple[dict, dict] | None:
    before = [s for s in samples if s["t"] <= t0]
    after = [s for s in samples if s["t"] >= t1]
    a = before[-1] if before else (samples[0] if samples else None)
    b = after[0] if after else (samples[-1] if samples else None)
    if a is None or b is None or b["t"] <= a["t"]:
        return None
    return a, b


def contention_between(
    samples: Sequence[dict],
    t0: float,
    t1: float,
    cpu_count: int,
    ticks_per_s: int,
    worker_sched_ns: Sequence[int] | None = None,
) -> dict | None:
    """What competed with the worker from ``t0`` to ``t1`` (CLOCK_MONOTONIC s), or None.

    ``worker_sched_ns`` is the worker's own ``[cpu_ns, wait_ns]`` from ``t0`` to ``t1``.
    The machine-wide figures use the last sample at or before ``t0`` and the first at or
    after ``t1``, so their span covers the window (``span_s`` says how long it was). Returns
    ``{span_s, worker_cpus, cpu_share, runq_wait_share, other_cpus, other_cpu_share,
    steal_share, top_processes}``: ``worker_cpus`` CPUs the worker used on average;
    ``cpu_share`` of the time the worker was runnable, the share it ran
    (``runq_wait_share`` = 1 - that; None without schedstat); ``other_cpus`` CPUs used
    by other processes (not the worker, not the agent, not a declared co-load:
    ``coload_cpus`` is that, when one was declared); ``other_cpu_share`` that over
    all CPUs; ``steal_share`` of all CPU time taken by a hypervisor; ``top_processes``
    ``[{name, cpu_share}]`` the busiest others, ``cpu_share`` in CPUs.
    """
    pair = _bracket(samples, t0, t1)
    if pair is None:
        return None
    a, b = pair
    span = b["t"] - a["t"]
    out: dict = {"span_s": round(span, 3)}
    worker_cpus = 0.0
    if worker_sched_ns is not None and t1 > t0:
        cpu_ns, wait_ns = worker_sched_ns
        worker_cpus = cpu_ns / 1e9 / (t1 - t0)
        runnable = cpu_ns + wait_ns
        out["worker_cpus"] = round(worker_cpus, 4)
        out["cpu_share"] = round(cpu_ns / runnable, 4) if runnable > 0 else None
        out["runq_wait_share"] = round(wait_ns / runnable, 4) if runnable > 0 else None
    else:
        out.update(worker_cpus=None, cpu_share=None, runq_wait_share=None)
    if a.get("cpu") and b.get("cpu"):
        total = b["cpu"]["total"] - a["cpu"]["total"]
        busy_s = (b["cpu"]["busy"] - a["cpu"]["busy"]) / ticks_per_s
        agent_s = 0.0
        if a.get("agent_ticks") is not None and b.get("agent_ticks") is not None:
            agent_s = (b["agent_ticks"] - a["agent_ticks"]) / ticks_per_s
        declared_s = declared_ticks_between(a, b) / ticks_per_s
        other_cpus = max(0.0, (busy_s - agent_s - declared_s) / span - worker_cpus)
        out["other_cpus"] = round(other_cpus, 4)
        if a.get("declared") is not None or b.get("declared") is not None:
            out["coload_cpus"] = round(declared_s / span, 4)
        out["other_cpu_share"] = round(other_cpus / cpu_count, 4)
        out["steal_share"] = (
            round((b["cpu"]["steal"] - a["cpu"]["steal"]) / total, 4) if total > 0 else 0.0
        )
    else:
        out.update(other_cpus=None, other_cpu_share=None, steal_share=None)
    # A scan's ticks cover others_since..t; a window gets the share that overlaps it.
    used: dict[str, float] = {}
    for s in samples:
        since = s.get("others_since")
        if not s.get("others") or since is None or s["t"] <= since:
            continue
        overlap = min(s["t"], b["t"]) - max(since, a["t"])
        if overlap <= 0:
            continue
        weight = overlap / (s["t"] - since)
        for name, ticks in s["others"].items():
            used[name] = used.get(name, 0.0) + ticks * weight
    top = sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PROCESSES]
    out["top_processes"] = [
        {"name": name, "cpu_share": round(ticks / ticks_per_s / span, 3)} for name, ticks in top
    ]
    return out


def contention_over(
    samples: Sequence[dict], segments: Sequence[dict], cpu_count: int, ticks_per_s: int
) -> dict | None:
    """``contention_between`` over several segments (``{t0, t1, sched_ns}``) of one condition.

    The worker's CPU and run-queue wait are summed over the segments (exact: read at
    their edges); the machine-wide figures are each segment's, weighted by its length
    (1 Hz samples bracket a segment, so they blur into its neighbours: they count only
    undeclared processes, which do not follow the segments). None without samples.
    """
    parts = []
    for s in segments:
        e = contention_between(samples, s["t0"], s["t1"], cpu_count, ticks_per_s, s["sched_ns"])
        if e is not None:
            parts.append((s["t1"] - s["t0"], s["sched_ns"], e))
    seconds = sum(d for d, _, _ in parts)
    if not parts or seconds <= 0:
        return None
    out: dict = {"span_s": round(seconds, 3), "segments": len(parts)}
    scheds = [sched for _, sched, _ in parts]
    if all(sched is not None for sched in scheds):
        cpu = sum(sched[0] for sched in scheds)
        wait = sum(sched[1] for sched in scheds)
        out["worker_cpus"] = round(cpu / 1e9 / seconds, 4)
        out["cpu_share"] = round(cpu / (cpu + wait), 4) if cpu + wait else None
        out["runq_wait_share"] = round(wait / (cpu + wait), 4) if cpu + wait else None
    else:
        out.update(worker_cpus=None, cpu_share=None, runq_wait_share=None)
    for key in ("other_cpus", "other_cpu_share", "steal_share", "coload_cpus"):
        values = [(d, e.get(key)) for d, _, e in parts]
        if all(v is not None for _, v in values):
            out[key] = round(sum(d * v for d, v in values) / seconds, 4)
        elif key != "coload_cpus":
            out[key] = None
    used: dict[str, float] = {}
    for d, _, e in parts:
        for p in e["top_processes"]:
            used[p["name"]] = used.get(p["name"], 0.0) + d * p["cpu_share"]
    top = sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PROCESSES]
    out["top_processes"] = [{"name": n, "cpu_share": round(v / seconds, 3)} for n, v in top]
    return out


def interference_rise(evidence: dict | None, reference: dict | None) -> list[str]:
    """How ``evidence`` shows more interference than ``reference`` (empty: it does not)."""
    if not evidence or not reference:
        return []
    reasons = []

    def rise(key: str) -> float | None:
        if evidence.get(key) is None or reference.get(key) is None:
            return None
        return evidence[key] - reference[key]

    wait = rise("runq_wait_share")
    if wait is not None and wait >= RUNQ_WAIT_RISE:
        reasons.append(f"run-queue wait +{wait:.0%} of runnable time")
    other = rise("other_cpus")
    if other is not None and other >= OTHER_CPU_RISE_CPUS:
        reasons.append(f"other processes +{other:.2f} CPUs")
    steal = rise("steal_share")
    if steal is not None and steal >= STEAL_RISE:
        reasons.append(f"steal +{steal:.0%}")
    return reasons


def interference_present(evidence: dict | None, declared: bool = False) -> list[str]:
    """Interference in a span judged on its own (no reference): the worker waited, or time was stolen.

    ``declared``: the span ran beside a declared co-load, so waiting for a CPU is what
    was measured, not interference: only undeclared processes' CPU and steal count.
    """
    if not evidence:
        return []
    reasons = []
    wait = None if declared else evidence.get("runq_wait_share")
    if wait is not None and wait >= RUNQ_WAIT_PRESENT:
        reasons.append(f"run-queue wait {wait:.0%} of runnable time")
    steal = evidence.get("steal_share")
    if steal is not None and steal >= STEAL_PRESENT:
        reasons.append(f"steal {steal:.0%}")
    if wait is None and (evidence.get("other_cpus") or 0) >= OTHER_CPU_RISE_CPUS * 2:
        reasons.append(f"other processes used {evidence['other_cpus']:.2f} CPUs")
    return reasons


def _shared_throughout(evidence: dict | None, reference: dict | None) -> list[str]:
    """A drop in a window other processes shared, measured against a fastest window they
    shared too: the reference is not the board's own rate, so the drop is not the board's."""
    here, there = interference_present(evidence), interference_present(reference)
    if not (here and there):
        return []
    return [f"{here[0]} here and in the fastest window too (no quiet window to compare with)"]


def attribute_windows(windows: Sequence[dict]) -> dict:
    """Give each window a ``cause`` and the run a verdict, from evidence in the same windows.

    Each window needs ``rate_per_s``, ``throttle_reasons`` (list) and ``interference``
    (``contention_between``'s dict or None); partial windows count for throttling
    only. The reference is the fastest full window. Returns ``{drops, reference_index}``
    and sets ``cause`` (``none``, ``throttling``, ``interference``,
    ``unexplained``) and ``cause_detail`` on each window. A drop is interference when its
    evidence rose over the reference's, or when other processes took the CPU both in it
    and in the reference (the fastest window was not the board's own rate either).
    """
    full = [w for w in windows if not w.get("partial")]
    if not full:
        return {"drops": 0, "reference_index": None}
    reference = max(full, key=lambda w: w["rate_per_s"])
    best = reference["rate_per_s"]
    drops = 0
    for w in windows:
        detail: list[str] = []
        dropped = not w.get("partial") and w["rate_per_s"] < (1 - DROP_FRACTION) * best
        if w.get("throttle_reasons"):
            cause, detail = "throttling", list(w["throttle_reasons"])
        elif not dropped:
            cause = "none"
        else:
            detail = interference_rise(w.get("interference"), reference.get("interference"))
            if not detail:
                detail = _shared_throughout(w.get("interference"), reference.get("interference"))
            cause = "interference" if detail else "unexplained"
        drops += dropped
        w["cause"] = cause
        w["cause_detail"] = detail
    return {"drops": drops, "reference_index": reference["index"]}


def declared_cpus(
    samples: Sequence[dict], pgids, ticks_per_s: int, seconds: float
) -> dict[int, float] | None:
    """CPUs each co-load process group used over the sampled span, per second of ``seconds``."""
    if len(samples) < 2 or seconds <= 0:
        return None
    return {
        pgid: declared_ticks_between(samples[0], samples[-1], pgid) / ticks_per_s / seconds
        for pgid in pgids
    }
