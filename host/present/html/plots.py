"""The report page's matplotlib figures: warm latency (histogram and CDF, percentiles
marked) and sustained throughput, temperature and clock over time with throttle and
interference windows shaded; also the series they plot, which the tables read too."""

from __future__ import annotations

import binascii
from collections.abc import Sequence

import numpy as np
from edgequal.agent.measure.latency import decode_tags
from edgequal.agent.measure.preemption import decided_on_clean, decisive_entry

from ...errors import UsageError
from ...judge.regression import decode_samples_ns
from ...judge.report_file import ReportFile
from .parts import _COLORS, _figure, _get, _png


def _latency_series(reports: Sequence[ReportFile]) -> list[tuple[str, dict, np.ndarray | None]]:
    out = []
    for i, r in enumerate(reports):
        for entry in _get(r.predicate, "results", "latency", "per_shape") or []:
            # The calls that kept the CPU where they decide (agent/measure/preemption.py).
            entry = decisive_entry(entry)
            samples = None
            if entry.get("samples_ns_b64"):
                try:
                    samples = decode_samples_ns(entry["samples_ns_b64"])
                    if decided_on_clean(entry) and entry.get("preempted_b64"):
                        samples = samples[~decode_tags(entry["preempted_b64"], len(samples))]
                    samples = samples / 1e6
                except (UsageError, ValueError, binascii.Error):  # unverified: may be anything
                    samples = None
            label = f"{chr(65 + i)} {entry.get('shape', '')}"
            out.append((label, entry, samples))
    return out


def latency_figure(reports: Sequence[ReportFile]) -> str | None:
    """Histogram and CDF of the raw latency samples, p50/p90/p99 marked; one curve per report and shape."""
    series = [(lab, e, s) for lab, e, s in _latency_series(reports) if s is not None and s.size]
    if not series:
        return None
    micro = max(float(np.median(s)) for _, _, s in series) < 1.0
    scale, unit = (1000.0, "µs") if micro else (1.0, "ms")
    fig, axes = _figure(12, 4.2, 1, 2)
    hist_ax, cdf_ax = axes[0]
    # Clip the axis at the largest p99.9, or twice the p99 when the tail is longer (a few
    # preempted runs would squeeze the body into one bin); the far tail is in the table.
    upper = (
        max(
            min(float(np.quantile(s, 0.999)), 2 * float(np.quantile(s, 0.99))) for _, _, s in series
        )
        * scale
    )
    lower = min(float(s.min()) for _, _, s in series) * scale
    bins = np.linspace(lower, upper * 1.02, 80)
    for k, (label, entry, s) in enumerate(series):
        color = _COLORS[k % len(_COLORS)]
        values = s * scale
        hist_ax.hist(
            np.clip(values, None, bins[-1]),
            bins=bins,
            histtype="step",
            color=color,
            label=label,
            linewidth=1.4,
        )
        ordered = np.sort(values)
        cdf_ax.plot(
            ordered,
            np.arange(1, ordered.size + 1) / ordered.size,
            color=color,
            label=label,
            linewidth=1.4,
        )
        summary = entry.get("summary") or {}
        for key, style in (("p50_ms", "-"), ("p90_ms", "--"), ("p99_ms", ":")):
            v = summary.get(key)
            if v is None:
                continue
            hist_ax.axvline(v * scale, color=color, linestyle=style, linewidth=1.0, alpha=0.8)
            cdf_ax.axvline(v * scale, color=color, linestyle=style, linewidth=1.0, alpha=0.8)
            q = {"p50_ms": 0.5, "p90_ms": 0.9, "p99_ms": 0.99}[key]
            cdf_ax.annotate(
                key.removesuffix("_ms"),
                (v * scale, q),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=8,
                color=color,
            )
    hist_ax.set_xlabel(f"latency ({unit})")
    hist_ax.set_ylabel("runs")
    hist_ax.set_title("Warm latency (p50 solid, p90 dashed, p99 dotted; tail clipped)")
    if any(decided_on_clean(e) for _, e, _ in series):
        hist_ax.set_xlabel(f"latency ({unit}), the calls that kept the CPU")
    cdf_ax.set_xlabel(f"latency ({unit})")
    cdf_ax.set_ylabel("fraction of runs ≤ x")
    cdf_ax.set_title("Cumulative distribution")
    cdf_ax.set_xlim(lower, upper * 1.02)
    cdf_ax.set_ylim(0, 1.01)
    for ax in (hist_ax, cdf_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    return _png(fig, "latency histogram and cumulative distribution")


def window_cause(w: dict, clock_ref: float | None) -> str:
    """A window's cause: the report's own ``cause`` when present, else the throttle rule of
    agent/measure/sustained.py (flags, trip point, clock under 95 % of the highest seen)."""
    cause = w.get("cause")
    if cause:
        return str(cause)
    low_clock = bool(clock_ref and w.get("min_clock_khz") and w["min_clock_khz"] < 0.95 * clock_ref)
    if w.get("throttle_flags") or w.get("over_trip") or low_clock:
        return "throttling"
    return "none"


_SHADES = {
    "throttling": ("#d62728", "throttled"),
    "interference": ("#ff7f0e", "interference"),
    "unexplained": ("#7f7f7f", "unexplained drop"),
}


def _sustained_series(r: ReportFile):
    s = _get(r.predicate, "results", "sustained") or {}
    windows = s.get("windows_detail") or []
    if not windows:
        return None
    start = s.get("loop_started_monotonic_s")
    if start is None:
        start = windows[0].get("t0", 0.0)
    clock_ref = max((w.get("max_clock_khz") or 0) for w in windows) or None
    rows = []
    for w in windows:
        t0 = (w.get("t0") or 0.0) - start
        t1 = (w.get("t1") or 0.0) - start
        rows.append((t0, t1, w, window_cause(w, clock_ref)))
    return s, rows


def sustained_figure(reports: Sequence[ReportFile]) -> str | None:
    """Throughput, temperature and clock over time, throttle and interference windows shaded."""
    data = [(i, r, _sustained_series(r)) for i, r in enumerate(reports)]
    data = [(i, r, d) for i, r, d in data if d is not None]
    if not data:
        return None
    from matplotlib.patches import Patch

    fig, axes = _figure(12, 7.5, 3, 1, sharex=True)
    rate_ax, temp_ax, clock_ax = axes[:, 0]
    shaded = set()
    any_temp = any_clock = False
    for i, r, (s, rows) in data:
        color = _COLORS[i % len(_COLORS)]
        label = f"{chr(65 + i)} {r.label}"
        full = [(t0, t1, w) for t0, t1, w, _ in rows if not w.get("partial")]
        if full:
            xs = [t0 for t0, _, _ in full] + [full[-1][1]]
            ys = [w.get("rate_per_s") or 0.0 for _, _, w in full]
            rate_ax.stairs(ys, xs, baseline=None, color=color, label=label, linewidth=1.6)
        for t0, t1, _, cause in rows:
            if cause in _SHADES:
                shade_color, _ = _SHADES[cause]
                for ax in (rate_ax, temp_ax, clock_ax):
                    ax.axvspan(
                        t0,
                        t1,
                        color=shade_color,
                        alpha=0.15 if len(data) == 1 else 0.08,
                        linewidth=0,
                    )
                shaded.add(cause)
        telemetry = s.get("telemetry_samples") or []
        temps = [(p["t"], p["temp_c"]) for p in telemetry if p.get("temp_c") is not None]
        if not temps:  # older reports: the per-window maximum
            temps = [
                ((t0 + t1) / 2, w["max_temp_c"])
                for t0, t1, w, _ in rows
                if w.get("max_temp_c") is not None
            ]
        if temps:
            any_temp = True
            temp_ax.plot(*zip(*temps), color=color, label=label, linewidth=1.4)
            if s.get("trip_c") is not None:
                temp_ax.axhline(s["trip_c"], color=color, linestyle="--", linewidth=1.0, alpha=0.7)
        clocks = [(p["t"], p["clock_khz"] / 1000.0) for p in telemetry if p.get("clock_khz")]
        if not clocks:
            clocks = [
                ((t0 + t1) / 2, w["min_clock_khz"] / 1000.0)
                for t0, t1, w, _ in rows
                if w.get("min_clock_khz")
            ]
        if clocks:
            any_clock = True
            clock_ax.plot(*zip(*clocks), color=color, label=label, linewidth=1.4)
    rate_ax.set_ylabel("inferences / s")
    rate_ax.set_title("Sustained throughput per window")
    temp_ax.set_ylabel("temperature (°C)")
    temp_ax.set_title("Temperature" + ("" if any_temp else " — no sensor: absent, not estimated"))
    clock_ax.set_ylabel("CPU clock (MHz)")
    clock_ax.set_title("Clock" + ("" if any_clock else " — not readable on this device"))
    clock_ax.set_xlabel("time since the loop started (s)")
    handles = [
        Patch(color=_SHADES[c][0], alpha=0.3, label=_SHADES[c][1]) for c in _SHADES if c in shaded
    ]
    for ax in (rate_ax, temp_ax, clock_ax):
        ax.grid(alpha=0.3)
        lines, labels = ax.get_legend_handles_labels()
        if lines or handles:
            ax.legend(handles=lines + handles, fontsize=8, loc="best")
    return _png(fig, "sustained throughput, temperature and clock over time")
