"""The report page's section on a run under real conditions: declared co-load and edge shapes.

The declared loads with their achieved rates, the main model's figures with and
without the co-load (and the per-round medians of the interleaved segments, plotted),
and one row per edge shape with its latency and memory, or why it did not run. Every
text from a report is escaped, as in the rest of the page (host/present/html/report.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.conditions import coload_shapes, edge_failure, edge_shapes, mb, shapes_text
from ...judge.report_file import ReportFile
from .parts import (
    COLORS,
    escape,
    fmt_duration,
    fmt_num,
    get_path,
    html_table,
    legend_label,
    new_figure,
    png_img,
)


def _results(r: ReportFile) -> dict:
    return get_path(r.predicate, "results") or {}


def _declared_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        coload = _results(r).get("coload")
        if not coload:
            continue
        sustained = {e.get("label"): e for e in coload.get("sustained") or []}
        for entry in coload.get("latency") or []:
            achieved = entry.get("achieved") or {}
            during = get_path(sustained.get(entry.get("label")), "achieved", "value")
            rows.append(
                [
                    legend_label(i),
                    escape(entry.get("label")),
                    escape(entry.get("kind")),
                    fmt_num(achieved.get("value"), "{:.4g}"),
                    fmt_num(achieved.get("target"), "{:.4g}"),
                    escape(achieved.get("unit")),
                    fmt_num(entry.get("cpus"), "{:.3g}"),
                    fmt_num(during, "{:.4g}") if sustained else "not run",
                ]
            )
    if not rows:
        return ""
    headers = ["", "load", "kind", "achieved", "target", "unit", "CPUs"]
    headers += ["achieved in sustained"]
    return "<h3>Declared co-load</h3>" + html_table(
        headers, rows, [False, False, False, True, True, False, True, True]
    )


def _coload_latency_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        rounds = get_path(_results(r), "coload", "rounds")
        for entry in coload_shapes(_results(r)):
            co = entry["coload"]
            plain, loaded = entry.get("summary") or {}, co.get("summary") or {}
            cause = co.get("cause")
            rows.append(
                [
                    legend_label(i),
                    escape(entry.get("shape")),
                    fmt_duration(plain.get("p50_ms")),
                    fmt_duration(loaded.get("p50_ms")),
                    fmt_num(co.get("p50_ratio"), "{:.3f}"),
                    fmt_duration(plain.get("p99_ms")),
                    fmt_duration(loaded.get("p99_ms")),
                    fmt_num(co.get("p99_ratio"), "{:.3f}"),
                    escape(f"{co.get('rounds_slower')} of {rounds}"),
                    escape(cause) if cause and cause != "none" else "—",
                ]
            )
    if not rows:
        return ""
    headers = ["", "shape", "plain p50", "co-load p50", "p50 ratio", "plain p99"]
    headers += ["co-load p99", "p99 ratio", "rounds slower", "cause"]
    return "<h3>Latency beside the co-load (interleaved in one run)</h3>" + html_table(
        headers, rows, [False, False] + [True] * 6
    )


def coload_figure(reports: Sequence[ReportFile]) -> str | None:
    """Median of each plain and co-load segment per round, one line per report and shape."""
    series = []
    for i, r in enumerate(reports):
        for entry in coload_shapes(_results(r)):
            segments = entry["coload"].get("segments") or []
            for loaded in (False, True):
                points = [
                    (s.get("round"), s.get("p50_ms"))
                    for s in segments
                    if bool(s.get("coload")) == loaded and s.get("p50_ms") is not None
                ]
                if points:
                    series.append((i, entry.get("shape"), loaded, points))
    if not series:
        return None
    fig, axes = new_figure(7.5, 3.0)
    ax = axes[0][0]
    for i, shape, loaded, points in series:
        xs, ys = zip(*points)
        ax.plot(
            xs,
            ys,
            marker="o" if loaded else "s",
            linestyle="-" if loaded else "--",
            color=COLORS[i % len(COLORS)],
            label=f"{chr(65 + i)} {shape} {'co-load' if loaded else 'plain'}",
        )
    ax.set_xlabel("round")
    ax.set_ylabel("segment p50 (ms)")
    ax.set_title("Plain and co-load segments, interleaved")
    ax.legend(fontsize=7)
    return png_img(fig, "segment medians per round, plain and beside the co-load")


def _edge_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        for e in edge_shapes(_results(r)):
            head = [
                legend_label(i),
                escape(e.get("label")),
                escape(shapes_text(e.get("shapes"))),
                escape(e.get("source")),
            ]
            if not e.get("ok"):
                rows.append(
                    head
                    + [f'<span class="fail">{escape("did not run: " + edge_failure(e))}</span>']
                    + ["—"] * 6
                )
                continue
            s = e.get("summary") or {}
            outputs = shapes_text(e.get("outputs") or {})
            rows.append(
                head
                + [
                    '<span class="pass">ran</span>',
                    fmt_num(e.get("runs"), "{}"),
                    fmt_duration(s.get("p50_ms")),
                    fmt_duration(s.get("p99_ms")),
                    fmt_num(mb(e.get("peak_rss_bytes")), "{:.1f}"),
                    fmt_num(mb(e.get("rss_added_by_inference_bytes")), "{:.1f}"),
                    escape(outputs) if outputs else "—",
                ]
            )
    if not rows:
        return ""
    headers = ["", "label", "shape", "from", "result", "runs", "p50", "p99"]
    headers += ["peak RSS MB", "RSS added by inference MB", "outputs"]
    return "<h3>Edge shapes</h3>" + html_table(headers, rows, [False] * 5 + [True] * 5)


def conditions_section(reports: Sequence[ReportFile]) -> str:
    """Declared co-load (loads, latency with and without, segments plot) and edge shapes."""
    parts = [
        _declared_table(reports),
        _coload_latency_table(reports),
        coload_figure(reports) or "",
        _edge_table(reports),
    ]
    return "".join(parts) or '<p class="muted">No declared co-load and no edge shapes.</p>'
