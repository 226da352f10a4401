"""``edgequal report html``: one self-contained HTML page of one or more reports.

Plots are drawn by matplotlib (Agg, no display) and embedded as base64 PNG, the
style sheet is inline, and there is no script: the page opens with no network (no
CDN, font or script is fetched). Several reports on one page overlay their curves.
Every text that comes from a report, a file name or a policy is escaped with
``html.escape``.

Sections: overview with signature status, gate results, latency (histogram and CDF
with the percentiles marked, summary table), sustained throughput, temperature and
clock per window over time with throttle and interference windows shaded, the service
scenarios and energy, the declared co-load and the edge shapes
(``report_html_conditions.py``), the drift table with decision flips, cold load and
memory, findings, the fingerprint.
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .baseline import fingerprint_fields
from .errors import UsageError
from .gate import GateResult
from .regression import decode_samples_ns
from .report_file import ReportFile

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_SHADES = {
    "throttling": ("#d62728", "throttled"),
    "interference": ("#ff7f0e", "interference"),
    "unexplained": ("#7f7f7f", "unexplained drop"),
}
_STATUS_COLORS = {
    "passed": "#1a7f37",
    "degraded": "#9a6700",
    "failed": "#cf222e",
    "inconclusive": "#bc4c00",
    "incomplete": "#8250df",
}

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1f2328;
background:#fff;max-width:1280px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;
padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.retry{color:#bc4c00;font-weight:600}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0;font-weight:600}
.bad{background:#ffebe9;border:1px solid #cf222e;color:#82071e}
.good{background:#dafbe1;border:1px solid #1a7f37;color:#116329}
.warn{background:#fff8c5;border:1px solid #9a6700;color:#633c01}
.diff{background:#fff8c5}.muted{color:#656d76}img.plot{max-width:100%;border:1px solid #d0d7de}
"""


def _e(value: Any) -> str:
    """Escaped text of any value; None as an em dash."""
    if value is None:
        return "—"
    return html.escape(str(value), quote=True)


def _num(value: Any, fmt: str = "{:.4g}", unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        text = fmt.format(value)
    except (TypeError, ValueError):
        text = str(value)
    return _e(f"{text} {unit}".rstrip())


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()
) -> str:
    """A table; ``rows`` cells are already-escaped HTML."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if i < len(numeric) and numeric[i] else ""
            cells.append(f"<td{cls}>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _status(status: Any) -> str:
    color = _STATUS_COLORS.get(str(status), "#1f2328")
    return f'<span style="color:{color};font-weight:600">{_e(status)}</span>'


# ---------------------------------------------------------------------------
# Figures


def _figure(width_in: float, height_in: float, rows: int = 1, cols: int = 1, sharex=False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, sharex=sharex, squeeze=False)
    return fig, axes


def _png(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _latency_series(reports: Sequence[ReportFile]) -> list[tuple[str, dict, np.ndarray | None]]:
    out = []
    for i, r in enumerate(reports):
        for entry in _get(r.predicate, "results", "latency", "per_shape") or []:
            samples = None
            if entry.get("samples_ns_b64"):
                try:
                    samples = decode_samples_ns(entry["samples_ns_b64"]) / 1e6
                except UsageError:  # an unverified report's samples may be anything
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


# ---------------------------------------------------------------------------
# Sections


def _overview(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        p = r.predicate
        runtime = _get(p, "results", "runtime") or _get(p, "results", "cold_load", "runtime") or {}
        sig_class = "pass" if r.verified else "fail"
        rows.append(
            [
                _e(chr(65 + i)),
                _e(r.model_name or r.path.name),
                _e(p.get("run_id")),
                _status(p.get("status")),
                _e(p.get("reason")),
                f'<span class="{sig_class}">{_e(r.signature)}</span>',
                _e(" ".join(str(x) for x in (runtime.get("runtime"), runtime.get("version")) if x)),
                _e(p.get("finished_at")),
                _e(r.path),
            ]
        )
    out = _table(
        ["", "model", "run", "status", "reason", "signature", "runtime", "signed at", "file"], rows
    )
    for r in reports:
        if not r.verified:
            out += (
                f'<div class="banner bad">{_e(r.path)}: the signature did not verify. The figures '
                f"below come from an unverified payload: {_e(r.signature)}</div>"
            )
    return out


def _gate_section(results: Sequence[GateResult]) -> str:
    out = []
    for g in results:
        cls = "good" if g.passed else ("warn" if g.retry else "bad")
        out.append(f'<div class="banner {cls}">{_e(g.summary)}</div>')
        rows = []
        for c in g.checks:
            mark = (
                '<span class="pass">pass</span>'
                if c.passed
                else '<span class="retry">re-run</span>'
                if c.retry
                else '<span class="fail">FAIL</span>'
            )
            rows.append([_e(c.name), _e(c.limit), _e(c.measured), mark, _e(c.message)])
        out.append(f"<h3>Policy {_e(g.policy)} · {_e(g.report)}</h3>")
        out.append(
            _table(["check", "limit", "measured", "result", "message"], rows, [False, True, True])
        )
        if g.baseline:
            changes = g.baseline.get("fingerprint_changes") or []
            out.append(
                f"<p>Baseline {_e(g.baseline.get('report'))} (run {_e(g.baseline.get('run_id'))}).</p>"
            )
            if changes:
                out.append(
                    _table(
                        ["changed", "field", "baseline", "this report"],
                        [
                            [
                                _e(c["category"]),
                                _e(c["field"]),
                                _e(c["baseline"]),
                                _e(c["candidate"]),
                            ]
                            for c in changes
                        ],
                    )
                )
            else:
                out.append('<p class="muted">Fingerprint unchanged since the baseline.</p>')
    return "".join(out)


def _latency_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for label, entry, _ in _latency_series(reports):
        s = entry.get("summary") or {}
        warm = entry.get("warmup") or {}

        def ci(key, s=s):
            pair = s.get(key)
            return "—" if not pair else _e(f"{pair[0]:.4g}–{pair[1]:.4g}")

        cause = entry.get("cause")
        interference = entry.get("interference") or {}
        note = ""
        if cause and cause != "none":
            note = _e(cause)
            if interference.get("top_processes"):
                note += ": " + _e(
                    ", ".join(
                        f"{p.get('name')} {p.get('cpu_share') or 0:.2f} CPU"
                        for p in interference["top_processes"][:3]
                    )
                )
        rows.append(
            [
                _e(label),
                _num(s.get("count"), "{}"),
                _num(s.get("p50_ms")),
                ci("p50_ci_ms"),
                _num(s.get("p90_ms")),
                _num(s.get("p95_ms")),
                _num(s.get("p99_ms")),
                ci("p99_ci_ms"),
                _num(s.get("p99_9_ms")),
                _num(s.get("max_ms")),
                _num(s.get("cv"), "{:.3f}"),
                "yes" if warm.get("steady") else _e(f"no: {warm.get('reason')}"),
                note or "—",
            ]
        )
    if not rows:
        return '<p class="muted">No latency measured.</p>'
    return _table(
        [
            "report shape",
            "n",
            "p50 ms",
            "p50 95 % CI",
            "p90",
            "p95",
            "p99",
            "p99 95 % CI",
            "p99.9",
            "max",
            "CV",
            "steady",
            "cause",
        ],
        rows,
        [False] + [True] * 10,
    )


def _sustained_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    windows = []
    for i, r in enumerate(reports):
        data = _sustained_series(r)
        if data is None:
            continue
        s, series = data
        rows.append(
            [
                _e(chr(65 + i)),
                _num(s.get("duration_s"), "{:g}", "s"),
                _num(s.get("peak_per_s"), "{:.1f}"),
                _num(s.get("sustained_per_s"), "{:.1f}"),
                _num(s.get("stability"), "{:.3f}"),
                _num(s.get("time_to_first_throttle_s"), "{:.0f}", "s")
                if s.get("throttled")
                else "never",
                _num(s.get("peak_temp_c"), "{:.1f}", "°C"),
                _num(s.get("headroom_c"), "{:.1f}", "°C"),
                _e(s.get("verdict")),
                _e(s.get("cause") or "—"),
            ]
        )
        for t0, t1, w, cause in series:
            if cause in ("none", None):
                continue
            inter = w.get("interference") or {}
            top = ", ".join(
                f"{p.get('name')} {p.get('cpu_share') or 0:.2f} CPU"
                for p in inter.get("top_processes") or []
            )
            windows.append(
                [
                    _e(chr(65 + i)),
                    _e(w.get("index")),
                    _e(f"{t0:.1f}–{t1:.1f} s"),
                    _e(cause),
                    _e("; ".join(map(str, w.get("cause_detail") or [])) or "—"),
                    _num(w.get("rate_per_s"), "{:.1f}"),
                    _num(inter.get("cpu_share"), "{:.0%}"),
                    _num(inter.get("runq_wait_share"), "{:.0%}"),
                    _num(inter.get("other_cpu_share"), "{:.0%}"),
                    _num(inter.get("steal_share"), "{:.0%}"),
                    _e(top or "—"),
                ]
            )
    if not rows:
        return '<p class="muted">No sustained phase in these reports.</p>'
    out = _table(
        [
            "",
            "duration",
            "peak /s",
            "sustained /s",
            "stability",
            "first throttle",
            "peak temp",
            "headroom",
            "verdict",
            "cause",
        ],
        rows,
        [False] + [True] * 7,
    )
    if windows:
        out += "<h3>Windows with a cause</h3>" + _table(
            [
                "",
                "window",
                "time",
                "cause",
                "evidence",
                "rate /s",
                "worker CPU",
                "run-queue wait",
                "other CPU",
                "steal",
                "top processes",
            ],
            windows,
            [False, True, False, False, False, True, True, True, True, True],
        )
    return out


def _drift_section(reports: Sequence[ReportFile]) -> str:
    out = []
    for i, r in enumerate(reports):
        drift = _get(r.predicate, "results", "drift")
        if not drift:
            continue
        rows = []
        for name, o in (drift.get("outputs") or {}).items():
            tol = o.get("tolerance") or {}
            ok = o.get("passed")
            rows.append(
                [
                    _e(name),
                    _e(tol.get("class")),
                    _num(o.get("max_abs"), "{:.3g}"),
                    _num(o.get("mean_abs"), "{:.3g}"),
                    _num(o.get("max_rel"), "{:.3g}"),
                    _num(o.get("cosine"), "{:.6f}"),
                    "exact" if o.get("exact") else _num(o.get("psnr_db"), "{:.1f}"),
                    _num(o.get("top1_agreement"), "{:.0%}"),
                    _e(f"{o.get('nan_count', 0)}/{o.get('inf_count', 0)}"),
                    _num(o.get("smallest_passing_atol"), "{:.2g}"),
                    '<span class="pass">pass</span>'
                    if ok
                    else f'<span class="fail">FAIL</span> {_e(o.get("reason"))}',
                ]
            )
        out.append(f"<h3>{_e(chr(65 + i))}: {_e(r.label)}</h3>")
        out.append(
            _table(
                [
                    "output",
                    "tolerance",
                    "max abs",
                    "mean abs",
                    "max rel",
                    "cosine",
                    "PSNR dB",
                    "top-1",
                    "NaN/Inf",
                    "min atol",
                    "result",
                ],
                rows,
                [False, False] + [True] * 8,
            )
        )
        d = drift.get("decisions")
        if d:
            flips = ", ".join(map(str, d.get("flips") or [])) or "none"
            near = ", ".join(map(str, d.get("flips_near_threshold") or [])) or "none"
            cls = "pass" if d.get("passed") else "fail"
            out.append(
                _table(
                    [
                        "decision rule",
                        "cases",
                        "flips",
                        "flip rate",
                        "near threshold",
                        "flips near threshold",
                        "flipped cases",
                        "flipped near threshold",
                        "result",
                    ],
                    [
                        [
                            _e(d.get("rule")),
                            _num(d.get("total_cases"), "{}"),
                            _num(d.get("flip_count"), "{}"),
                            _num(d.get("flip_rate"), "{:.2%}"),
                            _num(d.get("near_threshold_count"), "{}"),
                            _num(d.get("flips_near_threshold_count"), "{}"),
                            _e(flips),
                            _e(near),
                            f'<span class="{cls}">{"pass" if d.get("passed") else "FAIL"}</span>',
                        ]
                    ],
                    [False, True, True, True, True, True],
                )
            )
    return "".join(out) or '<p class="muted">No golden set: drift not measured.</p>'


def _cold_memory_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        cold = _get(r.predicate, "results", "cold_load") or {}
        mem = _get(r.predicate, "results", "memory") or {}

        def med(key, cold=cold):
            return _num(_get(cold, key, "median"), "{:.3g}")

        def mb(key, mem=mem):
            v = mem.get(key)
            return _num(None if v is None else v / (1 << 20), "{:.1f}")

        rows.append(
            [
                _e(chr(65 + i)),
                _num(len(cold.get("runs") or []), "{}"),
                med("import_ms"),
                med("load_ms"),
                med("first_inference_ms"),
                med("total_ms"),
                med("process_to_result_ms"),
                _num(cold.get("page_cache_evicted")),
                mb("peak_rss_bytes"),
                mb("rss_added_by_load_bytes"),
            ]
        )
    return _table(
        [
            "",
            "cold runs",
            "import ms",
            "load ms",
            "first inference ms",
            "total ms",
            "process to result ms",
            "page cache evicted",
            "peak RSS MB",
            "RSS added by load MB",
        ],
        rows,
        [False] + [True] * 9,
    )


def _label(i: int) -> str:
    return _e(chr(65 + i))


def _batch_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        sweep = _get(r.predicate, "results", "batch_sweep")
        if not sweep:
            continue
        if sweep.get("skipped"):
            rows.append([_label(i), _e(sweep["skipped"])] + ["—"] * 6)
            continue
        best = _get(sweep, "best", "batch")
        for p in sweep.get("points") or []:
            if p.get("error"):
                rows.append([_label(i), _num(p.get("batch"), "{}"), _e(p["error"])] + ["—"] * 5)
                continue
            rows.append(
                [
                    _label(i),
                    _num(p.get("batch"), "{}") + (" (best)" if p.get("batch") == best else ""),
                    _num(p.get("items_per_s"), "{:.4g}"),
                    _num(p.get("items_per_s_per_core"), "{:.4g}"),
                    _num(p.get("p50_ms"), "{:.3g}"),
                    _num(p.get("p90_ms"), "{:.3g}"),
                    _num(p.get("ms_per_item"), "{:.3g}"),
                    _num(p.get("calls"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "batch", "items/s", "items/s per core", "p50 ms", "p90 ms", "ms/item", "calls"]
    return "<h3>Batch sweep</h3>" + _table(headers, rows, [False, False] + [True] * 6)


def _threads_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        scaling = _get(r.predicate, "results", "thread_scaling")
        if not scaling:
            continue
        rec = scaling.get("recommended") or {}
        for p in scaling.get("points") or []:
            mark = " (recommended)" if p.get("threads") == rec.get("threads") else ""
            rows.append(
                [
                    _label(i),
                    _num(p.get("threads"), "{}") + mark,
                    _num(p.get("calls_per_s"), "{:.4g}"),
                    _num(p.get("p50_ms"), "{:.3g}"),
                    _num(p.get("p90_ms"), "{:.3g}"),
                ]
            )
        if rec.get("reason"):
            rows.append([_label(i), _e("why"), _e(rec["reason"]), "", ""])
    if not rows:
        return ""
    headers = ["", "threads", "calls/s", "p50 ms", "p90 ms"]
    return "<h3>Thread scaling</h3>" + _table(headers, rows, [False, False, True, True, True])


def _server_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        server = _get(r.predicate, "results", "server")
        if not server:
            continue
        runs = [("at target", server.get("at_target") or {})]
        runs += [(f"step {k + 1}", s) for k, s in enumerate(server.get("steps") or [])]
        for name, run in runs:
            rows.append(
                [
                    _label(i),
                    _e(name),
                    _num(run.get("target_rate_per_s"), "{:.4g}"),
                    _num(run.get("achieved_rate_per_s"), "{:.4g}"),
                    _num(run.get("p50_ms"), "{:.3g}"),
                    _num(run.get("p90_ms"), "{:.3g}"),
                    _num(run.get("p99_ms"), "{:.3g}"),
                    _num(run.get("saturated")),
                    _num(run.get("held")),
                ]
            )
        rows.append(
            [
                _label(i),
                _e("highest rate held"),
                _num(server.get("max_rate_held_per_s"), "{:.4g}"),
                _e(f"capacity {_num(server.get('capacity_per_s'), '{:.4g}')} /s"),
                _e(f"p99 bound {_num(server.get('p99_bound_ms'), '{:.3g}')} ms"),
                _e(f"{server.get('callers')} callers"),
                "",
                "",
                "",
            ]
        )
    if not rows:
        return ""
    headers = ["", "run", "target /s", "achieved /s", "p50 ms", "p90 ms", "p99 ms"]
    headers += ["saturated", "held"]
    return "<h3>Server scenario (latency includes queueing)</h3>" + _table(
        headers, rows, [False, False] + [True] * 5
    )


def _operators_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        ops = _get(r.predicate, "results", "operators")
        if not ops:
            continue
        for o in _get(ops, "profile", "operators") or []:
            rows.append(
                [
                    _label(i),
                    _e(o.get("op_type")),
                    _num(o.get("us_per_run"), "{:.4g}"),
                    _num(None if o.get("share") is None else o["share"] * 100, "{:.1f}", "%"),
                    _num(o.get("nodes"), "{}"),
                ]
            )
        for node in _get(ops, "cpu_fallback", "cpu_nodes") or []:
            text = f"{node.get('node')} fell back to the CPU"
            rows.append([_label(i), _e(node.get("op_type")), _e(text), "", ""])
        for o in _get(ops, "delegate", "left_operators") or []:
            rows.append(
                [
                    _label(i),
                    _e(o.get("op_type")),
                    _e("left by the delegate"),
                    "",
                    _num(o.get("nodes"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "operator", "µs per inference", "share", "nodes"]
    return "<h3>Operators</h3>" + _table(headers, rows, [False, False, True, True, True])


def _energy_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        power = _get(r.predicate, "results", "sustained", "power")
        if not power:
            continue
        if not power.get("present"):
            rows.append([_label(i), _e(f"absent: {power.get('reason')}")] + ["—"] * 4)
            continue
        summary = power.get("summary") or {}
        rows.append(
            [
                _label(i),
                _e(power.get("total_from")),
                _num(_get(power, "idle", "watts"), "{:.3g}"),
                _num(summary.get("power_w_median"), "{:.3g}"),
                _num(summary.get("mj_per_inference_median"), "{:.4g}"),
                _num(summary.get("mj_per_inference_above_idle_median"), "{:.4g}"),
            ]
        )
    if not rows:
        return ""
    headers = ["", "rail (board total)", "idle W", "W (median window)", "mJ/inference"]
    headers += ["mJ/inference above idle"]
    return "<h3>Energy per inference</h3>" + _table(
        headers, rows, [False, False, True, True, True, True]
    )


def _scenarios_section(reports: Sequence[ReportFile]) -> str:
    parts = [
        _batch_table(reports),
        _threads_table(reports),
        _server_table(reports),
        _operators_table(reports),
        _energy_table(reports),
    ]
    return "".join(parts) or '<p class="muted">No service scenario or energy figures.</p>'


def _findings_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        for f in r.predicate.get("findings") or []:
            rows.append(
                [
                    _e(chr(65 + i)),
                    _e(f.get("kind")),
                    _e(f.get("phase")),
                    _e(f.get("cause")),
                    _e(f.get("message")),
                    _e(f.get("operator") or f.get("input")),
                    _e(f.get("hint")),
                ]
            )
    if not rows:
        return '<p class="muted">No findings.</p>'
    return _table(["", "kind", "phase", "cause", "message", "operator / input", "hint"], rows)


def _fingerprint_section(reports: Sequence[ReportFile]) -> str:
    fields = [fingerprint_fields(r.predicate, r.subjects) for r in reports]
    keys = sorted(set().union(*fields)) if fields else []
    rows = []
    for key in keys:
        values = [f.get(key) for f in fields]
        differs = len(reports) > 1 and any(v != values[0] for v in values)
        cells = [f'<span class="diff">{_e(v)}</span>' if differs else _e(v) for v in values]
        rows.append([_e(key)] + cells)
    return _table(["field"] + [f"{chr(65 + i)}" for i in range(len(reports))], rows)


def render_report_html(
    reports: Sequence[ReportFile], gate: Sequence[GateResult] = (), title: str | None = None
) -> str:
    """The whole page as a string."""
    title = title or ("edgequal report: " + ", ".join(r.model_name or r.path.name for r in reports))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network: nothing on this page may be fetched, whatever a report contains.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">generated {_e(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))} '
        f"by edgequal · {len(reports)} report(s)</p>",
        "<h2>Overview and signatures</h2>",
        _overview(reports),
    ]
    if gate:
        parts += ["<h2>Gate</h2>", _gate_section(gate)]
    parts += ["<h2>Warm latency</h2>"]
    fig = latency_figure(reports)
    parts += [
        fig or '<p class="muted">No raw latency samples to plot.</p>',
        _latency_table(reports),
    ]
    parts += ["<h2>Sustained</h2>"]
    fig = sustained_figure(reports)
    parts += [fig or "", _sustained_table(reports)]
    parts += ["<h2>Service scenarios and energy</h2>", _scenarios_section(reports)]
    # Imported here: the section's module draws with this module's helpers.
    from .report_html_conditions import conditions_section

    parts += ["<h2>Co-load and edge shapes</h2>", conditions_section(reports)]
    parts += ["<h2>Output drift and decision flips</h2>", _drift_section(reports)]
    parts += ["<h2>Cold load and memory</h2>", _cold_memory_section(reports)]
    parts += ["<h2>Findings</h2>", _findings_section(reports)]
    parts += ["<h2>Fingerprint</h2>", _fingerprint_section(reports)]
    parts += ["</body></html>"]
    return "\n".join(parts)


def write_report_html(
    path: str | Path, reports: Sequence[ReportFile], gate: Sequence[GateResult] = ()
) -> Path:
    """Write the page (parents created); returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report_html(reports, gate), encoding="utf-8")
    return path
