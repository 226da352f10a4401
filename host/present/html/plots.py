"""The report page's matplotlib figures: warm latency (histogram and CDF, percentiles
marked) and sustained throughput, temperature and clock over time with throttle and
interference windows shaded; also the series they plot, which the tables read too."""

from __future__ import annotations

import binascii
from collections.abc import Sequence

import numpy as np
from edgequal.contract.preemption import decided_on_clean, decisive_entry, decode_tags

from ...errors import UsageError
from ...judge.regression import decode_samples_ns
from ...judge.report_file import ReportFile
from ..units import scaled_text, table_unit
from .parts import COLORS, get_path, new_figure, png_img, series_name


def latency_series(reports: Sequence[ReportFile]) -> list[tuple[str, dict, np.ndarray | None]]:
    """``(legend label, decisive entry, samples in ms or None)`` per report and input shape."""
    out = []
    for i, r in enumerate(reports):
        for entry in get_path(r.predicate, "results", "latency", "per_shape") or []:
            # The calls that kept the CPU where they decide (contract/preemption.py).
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
            label = f"{series_name(reports, i)} · {entry.get('shape', '')}"
            out.append((label, entry, samples))
    return out


_PERCENTILES = (("p50_ms", "p50", "-", 0.5, "o"), ("p90_ms", "p90", "--", 0.9, "s"))
_PERCENTILES += (("p99_ms", "p99", ":", 0.99, "^"),)
PERCENTILE_LABEL = "percentile-label"
"""The gid of the p50/p90/p99 labels on the histograms (a test checks they never overlap)."""


def latency_plot(reports: Sequence[ReportFile]):
    """The latency figure (a matplotlib Figure), or None without samples.

    One histogram per report and shape, each on its own axis in its own unit (a
    microsecond model is never squashed against zero beside a millisecond one), with
    p50/p90/p99 marked and labelled on rows of their own; beside them the cumulative
    distributions of all, on a log axis when they span more than a factor of three.
    """
    from matplotlib.figure import Figure

    series = [(lab, e, s) for lab, e, s in latency_series(reports) if s is not None and s.size]
    if not series:
        return None
    n = len(series)
    fig = Figure(figsize=(12, max(3.8, 2.0 * n + 0.4)), dpi=100, layout="constrained")
    grid = fig.add_gridspec(n, 2, width_ratios=[1.2, 1])
    cdf_ax = fig.add_subplot(grid[:, 1])
    cdf_unit, cdf_scale = table_unit(float(np.median(s)) for _, _, s in series)
    clean = any(decided_on_clean(e) for _, e, _ in series)
    for k, (label, entry, s) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        summary = entry.get("summary") or {}
        ax = fig.add_subplot(grid[k, 0])
        unit, scale = table_unit([float(np.median(s))])
        values = s * scale
        # Clip at the p99.9, or twice the p99 when the tail is longer (a few preempted runs
        # would squeeze the body into one bin); the far tail is in the table.
        upper = min(float(np.quantile(values, 0.999)), 2 * float(np.quantile(values, 0.99)))
        lower = float(values.min())
        bins = np.linspace(lower, max(upper, lower * 1.01 + 1e-9), 60)
        ax.hist(np.clip(values, None, bins[-1]), bins=bins, color=color, alpha=0.35)
        ax.hist(np.clip(values, None, bins[-1]), bins=bins, color=color, histtype="step")
        for row, (key, name, style, _, _) in enumerate(_PERCENTILES):
            v = summary.get(key)
            if v is None:
                continue
            ax.axvline(v * scale, color="#1f2328", linestyle=style, linewidth=1.0)
            # Each label on its own row below the top: labels never overlap, however close
            # the percentiles are.
            ax.text(
                v * scale,
                0.93 - 0.16 * row,
                f" {name} {scaled_text(v, scale)} {unit}",
                transform=ax.get_xaxis_transform(),
                fontsize=8,
                va="top",
                ha="left",
                gid=PERCENTILE_LABEL,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1},
            )
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_ylabel("runs", fontsize=8)
        ax.set_xlabel(
            f"latency ({unit})" + (", calls that kept the CPU" if clean else ""), fontsize=8
        )
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ordered = np.sort(s * cdf_scale)
        cdf_ax.plot(
            ordered, np.arange(1, ordered.size + 1) / ordered.size, color=color, label=label
        )
        for key, _, _, q, marker in _PERCENTILES:
            if summary.get(key) is not None:
                cdf_ax.plot(summary[key] * cdf_scale, q, marker=marker, color=color, ms=5)
    lows = [float(np.min(s)) for _, _, s in series]
    highs = [float(np.quantile(s, 0.999)) for _, _, s in series]
    if max(highs) > 3 * min(lows) > 0:
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        cdf_ax.set_xscale("log")
        # Plain numbers at 1, 2 and 5 of each decade; no crowded minor labels.
        cdf_ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        cdf_ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        cdf_ax.xaxis.set_minor_formatter(NullFormatter())
    from matplotlib.lines import Line2D

    marks = [
        Line2D([], [], color="#1f2328", marker=m, linestyle="none", label=name)
        for _, name, _, _, m in _PERCENTILES
    ]
    lines, names = cdf_ax.get_legend_handles_labels()
    cdf_ax.legend(handles=lines + marks, fontsize=8, loc="lower right")
    cdf_ax.set_xlabel(f"latency ({cdf_unit})")
    cdf_ax.set_ylabel("fraction of runs ≤ x")
    cdf_ax.set_title("Cumulative distribution (p50, p90, p99 marked)", fontsize=10)
    cdf_ax.set_ylim(0, 1.01)
    cdf_ax.grid(alpha=0.3, which="both")
    return fig


def latency_figure(reports: Sequence[ReportFile]) -> str | None:
    """The latency figure as an inline PNG (:func:`latency_plot`), or None without samples."""
    fig = latency_plot(reports)
    return None if fig is None else png_img(fig, "latency histogram and cumulative distribution")


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


def sustained_series(r: ReportFile):
    s = get_path(r.predicate, "results", "sustained") or {}
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
    data = [(i, r, sustained_series(r)) for i, r in enumerate(reports)]
    data = [(i, r, d) for i, r, d in data if d is not None]
    if not data:
        return None
    from matplotlib.patches import Patch

    fig, axes = new_figure(12, 7.5, 3, 1, sharex=True)
    rate_ax, temp_ax, clock_ax = axes[:, 0]
    shaded = set()
    any_temp = any_clock = False
    causes = []
    for i, _, (s, rows) in data:
        color = COLORS[i % len(COLORS)]
        label = series_name(reports, i)
        if s.get("cause") not in (None, "none"):
            causes.append(f"{chr(65 + i)}: {s.get('verdict')}, cause {s['cause']}")
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
        first = s.get("time_to_first_throttle_s") if s.get("throttled") else None
        if first is not None:
            for ax in (rate_ax, temp_ax):
                ax.axvline(first, color=color, linestyle="-.", linewidth=1.2)
            temp_ax.plot([], [], color=color, linestyle="-.", label=f"{label}: first throttle")
        if temps:
            any_temp = True
            temp_ax.plot(*zip(*temps), color=color, label=label, linewidth=1.4)
            if s.get("trip_c") is not None:
                temp_ax.axhline(
                    s["trip_c"],
                    color=color,
                    linestyle="--",
                    linewidth=1.0,
                    alpha=0.7,
                    label=f"{chr(65 + i)} trip point {s['trip_c']:g} °C",
                )
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
    rate_ax.set_title(
        "Sustained throughput per window" + (f" ({'; '.join(causes)})" if causes else "")
    )
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
    return png_img(fig, "sustained throughput, temperature and clock over time")
