"""The sustained phase: closed-loop inference for minutes while the board heats.

The worker runs :func:`closed_loop` and reports each window; the agent samples
telemetry and contention at 1 Hz (never the worker) and lines samples up with
windows by CLOCK_MONOTONIC. Scoring (:func:`window_telemetry`, :func:`score_windows`)
is pure and tested on known inputs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import numpy as np
from edgequal.contract.stats import (
    DEGRADED_MIN_STABILITY,
    first_drop_time_s,
    peak_rate,
    stability,
    sustained_rate,
    sustained_verdict,
)

from .attribution import attribute_windows
from .throttle import firmware_throttles, measured_clocks_khz, throttle_reasons, under_voltage
from .timed_outputs import OutputSampler

WINDOW_BUFFER = 1 << 16  # latency samples kept per window for its p50/p90


def closed_loop(
    call: Callable[[], object],
    duration_s: float,
    window_s: float,
    on_window: Callable[[dict], None],
    stop_requested: Callable[[], bool],
    sched: Callable[[], tuple[int, int] | None] | None = None,
    windows_added: Callable[[], int] = lambda: 0,
    sampler: OutputSampler | None = None,
) -> dict:
    """Call ``call`` back to back for ``duration_s``, closing a window every ``window_s``.

    ``windows_added()`` (read once a window closes) is how many windows the caller asked
    for beyond ``duration_s``: the loop runs that many windows longer.

    Window boundaries are CLOCK_MONOTONIC (``time.monotonic``), the clock the agent's
    samplers share. When ``stop_requested()`` turns true the window in progress is
    closed as ``partial`` (it holds the hottest sample) and the loop ends. ``sched``
    (the caller's reader of its own CPU and run-queue wait, ns) is read at each window
    boundary: a window's ``sched_ns`` is ``[cpu_ns, wait_ns]`` within it, or None.
    With ``sampler`` (``timed_outputs.OutputSampler``) every k-th call's outputs are
    kept, outside the call's timed span; the index counts calls from the loop's start.
    Returns ``{windows, stopped_early, started_at, calls}``.
    """
    clock = time.perf_counter_ns
    buf = np.empty(WINDOW_BUFFER, dtype=np.int64)
    windows: list[dict] = []
    start = time.monotonic()
    end = start + duration_s
    w_start = start
    n = 0
    total = 0  # calls since the loop started (the sampler's index)
    due = sampler.next_due if sampler is not None else -1
    w_sched = sched() if sched else None

    def close_window(now: float, partial: bool) -> None:
        nonlocal w_sched
        taken = buf[: min(n, len(buf))]
        end_sched = sched() if sched else None
        sched_ns = (
            [end_sched[0] - w_sched[0], end_sched[1] - w_sched[1]]
            if w_sched is not None and end_sched is not None
            else None
        )
        w_sched = end_sched
        window = {
            "index": len(windows),
            "t0": w_start,
            "t1": now,
            "count": n,
            "rate_per_s": n / (now - w_start),
            "p50_ms": float(np.percentile(taken, 50)) / 1e6,
            "p90_ms": float(np.percentile(taken, 90)) / 1e6,
            "partial": partial,
            "sched_ns": sched_ns,
        }
        windows.append(window)
        on_window(window)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while not stop_requested():
            t0 = clock()
            returned = call()
            buf[n % len(buf)] = clock() - t0
            if total == due:  # outside the timed span
                due = sampler.take(total, returned)
            n += 1
            total += 1
            now = time.monotonic()
            if now - w_start >= window_s or now >= end:
                close_window(now, partial=False)
                w_start, n = now, 0
                end = start + duration_s + windows_added() * window_s
                if now >= end:
                    break
        stopped = stop_requested()
        if stopped and n > 0:
            close_window(time.monotonic(), partial=True)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {"windows": windows, "stopped_early": stopped, "started_at": start, "calls": total}


def nominal_clocks_khz(samples: Sequence[dict]) -> dict[str, int]:
    """The highest clock each cpufreq policy reached in the run: the clock-drop reference."""
    nominal: dict[str, int] = {}
    for s in samples:
        for name, khz in (s.get("clocks_khz") or {}).items():
            if khz:
                nominal[name] = max(nominal.get(name, 0), khz)
    return nominal


def window_telemetry(
    window: dict,
    samples: Sequence[dict],
    trip_c: float | None,
    nominal_khz: dict[str, int] | None = None,
    indicators: Sequence[str] | None = None,
) -> dict:
    """Temperature, clocks and throttle evidence of one window.

    Uses the samples inside the window and the first one after it (a state change
    between the last sample inside and the window's end shows there first). Throttle
    indicators are ``measure.throttle.throttle_reasons``, the one throttle rule, limited
    to ``indicators`` when the device profile names the ones that apply (None: all).
    """
    inside = [s for s in samples if window["t0"] <= s["t"] <= window["t1"]]
    after = [s for s in samples if s["t"] > window["t1"]]
    judged = inside + after[:1]
    temps = [s["temp_c"] for s in inside if s.get("temp_c") is not None]
    clocks = [c for s in inside for c in _clocks(s)]
    max_temp = max(temps) if temps else None
    reasons: list[str] = []
    for s in judged:
        for r in throttle_reasons(s, trip_c=trip_c, nominal_khz=nominal_khz or None):
            if r not in reasons and (indicators is None or r in indicators):
                reasons.append(r)
    return {
        "max_temp_c": max_temp,
        "min_clock_khz": min(clocks) if clocks else None,
        "max_clock_khz": max(clocks) if clocks else None,
        "throttle_flags": any(firmware_throttles(s) for s in judged),
        "throttle_reasons": reasons,
        "under_voltage": any(under_voltage(s) for s in judged),
        "over_trip": trip_c is not None and max_temp is not None and max_temp >= trip_c,
        "samples": len(inside),
    }


def _clocks(sample: dict) -> list[int]:
    clocks = [c for c in (sample.get("clocks_khz") or {}).values() if c]
    return clocks + measured_clocks_khz(sample)  # the firmware's own, where it measures one


INTERFERENCE_EXTENSION = 0.5
"""How much longer than planned a sustained phase may run to replace windows that
interference took: up to half the planned duration again (docs/measurement.md)."""


def windows_needed(planned_windows: int) -> int:
    """Scored windows a sustained verdict needs: half the planned ones, at least two."""
    return max(2, -(-planned_windows // 2))


def score_windows(
    windows: Sequence[dict], started_at: float, planned_windows: int | None = None
) -> dict:
    """Peak, sustained, stability, first throttle, 3 % drop, the cause of drops and the verdict.

    Windows carry ``throttle_reasons`` and ``interference`` (see ``window_telemetry``
    and ``attribution.contention_between``). A full window whose drop interference
    explains is not the board's: it is kept (``scored: false``) but peak, sustained,
    stability and the drop time are over the other full windows. A throttled window is
    always scored. Verdicts: ``failed`` (under-voltage, or throttled with stability
    < 0.90), ``degraded`` (throttled), ``unexplained`` (a drop with neither cause
    measured), ``stable``; ``inconclusive`` when fewer than :func:`windows_needed` of
    ``planned_windows`` (default: the full windows) were left to score, or when a drop
    nothing explains sits beside windows that interference took.
    """
    if not windows:
        return {"windows": 0, "verdict": "failed", "cause": "none", "reason": "no complete window"}
    attribution = attribute_windows(windows)
    # A partial window (the run was stopped inside it) counts for temperature and
    # throttling, not for throughput: its rate over a fraction of a window is noise.
    full = [w for w in windows if not w.get("partial")] or list(windows)
    interfered = [w for w in full if w.get("cause") == "interference"]
    scored = [w for w in full if w.get("cause") != "interference"]
    for w in windows:
        w["scored"] = w in scored
    planned = planned_windows if planned_windows is not None else len(full)
    too_few = len(scored) < min(windows_needed(planned), len(full)) or not scored
    basis = scored or full
    rates = [w["rate_per_s"] for w in basis]
    starts = [w["t0"] - started_at for w in basis]
    peak = peak_rate(rates)
    sustained = sustained_rate(rates)
    throttled_windows = [w for w in windows if w.get("throttle_reasons")]
    first_throttle = throttled_windows[0]["t0"] - started_at if throttled_windows else None
    temps = [w["max_temp_c"] for w in windows if w.get("max_temp_c") is not None]
    stab_all = stability([w["rate_per_s"] for w in full])
    stab = stability(rates)
    under_voltage = any(w.get("under_voltage") for w in windows)
    verdict = sustained_verdict(
        stab,
        throttled=first_throttle is not None,
        under_voltage=under_voltage,
        interference=too_few and bool(interfered),
        crashed=False,
    )
    # A drop nothing explains, in a run that interference took windows from, is more
    # likely interference below the evidence's thresholds than the board's: not decided.
    unexplained_beside_interference = verdict == "unexplained" and bool(interfered)
    if unexplained_beside_interference:
        verdict = "inconclusive"
    return {
        "windows": len(full),
        "scored_windows": len(scored),
        "peak_per_s": peak,
        "sustained_per_s": sustained,
        "stability": stab,
        "stability_with_interference": stab_all,
        "sustained_over_peak": sustained / peak if peak else None,
        "time_to_first_throttle_s": first_throttle,
        "time_to_3pct_drop_s": first_drop_time_s(starts, rates, peak, 0.03),
        "peak_temp_c": max(temps) if temps else None,
        "throttled": first_throttle is not None,
        "under_voltage": under_voltage,
        "cause": _VERDICT_CAUSE[verdict],
        "drops": attribution["drops"],
        "interference_windows": len(interfered),
        "verdict": verdict,
        "reason": _verdict_reason(
            verdict,
            stab,
            stab_all,
            interfered,
            throttled_windows,
            planned,
            unexplained_beside_interference,
        ),  # fmt: skip
    }


# The cause a verdict rests on: failed and degraded need throttling (or under-voltage),
# inconclusive needs interference, unexplained has neither.
_VERDICT_CAUSE = {
    "failed": "throttling",
    "degraded": "throttling",
    "inconclusive": "interference",
    "unexplained": "unexplained",
    "stable": "none",
}


def _verdict_reason(
    verdict, stab, stab_all, interfered, throttled, planned, unexplained_beside=False
) -> str | None:
    if verdict == "stable":
        return None
    if verdict == "inconclusive" and unexplained_beside:
        detail = "; ".join(interfered[0].get("cause_detail") or [])
        return (
            f"throughput fell to {stab:.0%} of its best in a window with no throttling or "
            f"interference measured, while other processes took the CPU in "
            f"{len(interfered)} other window(s) ({detail}); re-run on a quiet board"
        )
    if verdict == "inconclusive":
        detail = "; ".join(interfered[0].get("cause_detail") or [])
        return (
            f"other processes took the CPU in {len(interfered)} window(s) ({detail}), leaving "
            f"fewer than {windows_needed(planned)} of {planned} planned windows to score; "
            "re-run on a quiet board"
        )
    if verdict == "unexplained":
        return (
            f"throughput fell to {stab:.0%} of its best with no throttling or interference "
            "measured (unexplained)"
        )
    names = sorted({r for w in throttled for r in w.get("throttle_reasons", [])})
    if verdict == "failed" and not throttled:
        return "under-voltage"
    low = stab < DEGRADED_MIN_STABILITY
    return f"throttled ({', '.join(names) or 'under-voltage'}); stability {stab:.2f}" + (
        " below 0.90" if low else ""
    )
