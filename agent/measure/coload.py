"""Latency with and without a declared co-load, interleaved in one run; the co-load's achieved rate.

The timed loop alternates plain and co-load segments, ``rounds`` of each, in ABBA
order (plain first in even rounds, co-load first in odd ones), so a slow drift of the
board (heat, a clock change) falls on both conditions alike. Between segments
``set_coload`` pauses or resumes the co-load (the worker sends SIGSTOP or SIGCONT to
its process groups) and the model runs untimed for ``settle_s``, so a segment starts
with the co-load already running (or already quiet). Pure: the caller hands in the
call, the switch and its own CPU reader; nothing here starts a process or sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
from edgequal.contract.stats import summarize_latency

from .attribution import interference_present
from .latency import LatencySettings, encode_samples, time_loop_ns, warm_up

SETTLE_S = 0.1
"""Untimed calls after each switch: a resumed co-load is back at its pace well within this."""


def interleaved_latency(
    call: Callable[[], object],
    settings: LatencySettings,
    rounds: int,
    set_coload: Callable[[bool], None],
    on_phase: Callable[[str], None] = lambda name: None,
    sched: Callable[[], tuple[int, int] | None] | None = None,
    settle_s: float = SETTLE_S,
) -> dict:
    """Warm up (co-load paused), then ``rounds`` plain and ``rounds`` co-load segments.

    Each segment times ``min_runs / rounds`` runs and ``min_s / rounds`` seconds (at
    most ``max_runs / rounds`` runs), so each condition gets the plan's runs and
    seconds. Returns the plain condition in the shape of ``latency.measure_latency``
    (``warmup, loop_s, summary, samples_ns_b64``) plus ``segments``
    (``{round, coload, runs, p50_ms, switched, t0, t1, sched_ns}``: ``t0``/``t1``
    on CLOCK_MONOTONIC around the timed part, ``switched`` when the co-load was
    paused or resumed before its settle) and ``coload``
    (``{summary, samples_ns_b64, p50_ratio, p99_ratio, rounds_slower}``). The co-load
    is left paused.
    """
    set_coload(False)
    on_phase("warmup")
    warm = warm_up(call, settings)
    warm.pop("median_ns")
    per_runs = max(1, -(-settings.min_runs // rounds))
    per_s = settings.min_s / rounds
    cap = max(per_runs, settings.max_runs // rounds)
    taken: dict[bool, list[np.ndarray]] = {False: [], True: []}
    segments = []
    t_start = time.monotonic()
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for loaded in order:
            on_phase(f"latency round {r + 1}/{rounds} {'with' if loaded else 'without'} co-load")
            set_coload(loaded)
            switched = time.monotonic()
            settle_until = switched + settle_s
            while time.monotonic() < settle_until:
                call()
            samples = np.empty(cap, dtype=np.int64)
            before = sched() if sched else None
            t0 = time.monotonic()
            n = time_loop_ns(call, samples, per_runs, per_s)
            t1 = time.monotonic()
            after = sched() if sched else None
            taken[loaded].append(samples[:n].copy())
            segments.append(
                {
                    "round": r,
                    "coload": loaded,
                    "runs": n,
                    "p50_ms": round(float(np.median(samples[:n])) / 1e6, 6),
                    "switched": switched,
                    "t0": t0,
                    "t1": t1,
                    "sched_ns": _delta(before, after),
                }
            )
    set_coload(False)
    plain = np.concatenate(taken[False])
    loaded = np.concatenate(taken[True])
    plain_summary = summarize_latency(plain)
    loaded_summary = summarize_latency(loaded)
    return {
        "warmup": warm,
        "loop_s": round(time.monotonic() - t_start, 6),
        "summary": plain_summary,
        "samples_ns_b64": encode_samples(plain),
        "segments": segments,
        "coload": {
            "summary": loaded_summary,
            "samples_ns_b64": encode_samples(loaded),
            "p50_ratio": _ratio(loaded_summary.get("p50_ms"), plain_summary.get("p50_ms")),
            "p99_ratio": _ratio(
                loaded_summary.get("p99_ms") or loaded_summary.get("p95_ms"),
                plain_summary.get("p99_ms") or plain_summary.get("p95_ms"),
            ),
            "rounds_slower": rounds_slower(segments),
        },
    }


def rounds_slower(segments: Sequence[dict]) -> int:
    """Rounds whose co-load segment's median is above the same round's plain one."""
    by_round: dict[int, dict[bool, float]] = {}
    for s in segments:
        by_round.setdefault(s["round"], {})[s["coload"]] = s["p50_ms"]
    return sum(1 for pair in by_round.values() if len(pair) == 2 and pair[True] > pair[False])


def achieved(
    reports: Sequence[dict], spans: Sequence[tuple[float, float]] | None = None
) -> float | None:
    """A co-load process's achieved rate: counted units per second while it ran.

    ``reports`` are its ``{"t", "count"}`` lines (CLOCK_MONOTONIC s, a running total);
    with ``spans`` only the reports inside each span count (the co-load segments of an
    interleaved loop: a paused process reports nothing), else all of them. None when
    fewer than two reports fall in any span.
    """
    spans = spans or [(float("-inf"), float("inf"))]
    units = seconds = 0.0
    for t0, t1 in spans:
        inside = [r for r in reports if t0 <= r["t"] <= t1]
        if len(inside) < 2:
            continue
        units += inside[-1]["count"] - inside[0]["count"]
        seconds += inside[-1]["t"] - inside[0]["t"]
    return units / seconds if seconds > 0 else None


def _ratio(a, b) -> float | None:
    return round(a / b, 4) if a and b else None


def _delta(before, after) -> list[int] | None:
    if before is None or after is None:
        return None
    return [after[0] - before[0], after[1] - before[1]]


def coload_cause(loaded: dict) -> str:
    """``interference`` when undeclared processes or the hypervisor took the CPU during the
    co-load segments; else ``none``."""
    return (
        "interference"
        if interference_present(loaded.get("interference"), declared=True)
        else "none"
    )
