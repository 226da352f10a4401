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
from .parts import _COLORS, _dur, _e, _figure, _get, _label, _num, _png, _table


def _results(r: ReportFile) -> dict:
    return _get(r.predicate, "results") or {}


def _declared_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        coload = _results(r).get("coload")
        if not coload:
            continue
        sustained = {e.get("label"): e for e in coload.get("sustained") or []}
        for entry in coload.get("latency") or []:
            achieved = entry.get("achieved") or {}
            during = _get(sustained.get(entry.get("label")), "achieved", "value")
            rows.append(
                [
                    _label(i),
                    _e(entry.get("label")),
                    _e(entry.get("kind")),
                    _num(achieved.get("value"), "{:.4g}"),
                    _num(achieved.get("target"), "{:.4g}"),
                    _e(achieved.get("unit")),
                    _num(entry.get("cpus"), "{:.3g}"),
                    _num(during, "{:.4g}") if sustained else "not run",
                ]
            )
    if not rows:
        return ""
    headers = ["", "load", "kind", "achieved", "target", "unit", "CPUs"]
    headers += ["achieved in sustained"]
    return "<h3>Declared co-load</h3>" + _table(
        headers, rows, [False, False, False, True, True, False, True, True]
    )


def _coload_latency_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        rounds = _get(_results(r), "coload", "rounds")
        for entry in coload_shapes(_results(r)):
            co = entry["coload"]
            plain, loaded = entry.get("summary") or {}, co.get("summary") or {}
            cause = co.get("cause")
            rows.append(
                [
                    _label(i),
                    _e(entry.get("shape")),
                    _dur(plain.get("p50_ms")),
                    _dur(loaded.get("p50_ms")),
                    _num(co.get("p50_ratio"), "{:.3f}"),
                    _dur(plain.get("p99_ms")),
                    _dur(loaded.get("p99_ms")),
                    _num(co.get("p99_ratio"), "{:.3f}"),
                    _e(f"{co.get('rounds_slower')} of {rounds}"),
                    _e(cause) if cause and cause != "none" else "—",
                ]
            )
    if not rows:
        return ""
    headers = ["", "shape", "plain p50", "co-load p50", "p50 ratio", "plain p99"]
    headers += ["co-load p99", "p99 ratio", "rounds slower", "cause"]
    return "<h3>Latency beside the co-load (interleaved in one run)</h3>" + _table(
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
    fig, axes = _figure(7.5, 3.0)
    ax = axes[0][0]
    for i, shape, loaded, points in series:
        xs, ys = zip(*points)
        ax.plot(
            xs,
            ys,
            marker="o" if loaded else "s",
            linestyle="-" if loaded else "--",
            color=_COLORS[i % len(_COLORS)],
            label=f"{chr(65 + i)} {shape} {'co-load' if loaded else 'plain'}",
        )
    ax.set_xlabel("round")
    ax.set_ylabel("segment p50 (ms)")
    ax.set_title("Plain and co-load segments, interleaved")
    ax.legend(fontsize=7)
    return _png(fig, "segment medians per round, plain and beside the co-load")


def _edge_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        for e in edge_shapes(_results(r)):
            head = [
                _label(i),
                _e(e.get("label")),
                _e(shapes_text(e.get("shapes"))),
                _e(e.get("source")),
            ]
            if not e.get("ok"):
                rows.append(
                    head
                    + [f'<span class="fail">{_e("did not run: " + edge_failure(e))}</span>']
                    + ["—"] * 6
                )
                continue
            s = e.get("summary") or {}
            outputs = shapes_text(e.get("outputs") or {})
            rows.append(
                head
                + [
                    '<span class="pass">ran</span>',
                    _num(e.get("runs"), "{}"),
                    _dur(s.get("p50_ms")),
                    _dur(s.get("p99_ms")),
                    _num(mb(e.get("peak_rss_bytes")), "{:.1f}"),
                    _num(mb(e.get("rss_added_by_inference_bytes")), "{:.1f}"),
                    _e(outputs) if outputs else "—",
                ]
            )
    if not rows:
        return ""
    headers = ["", "label", "shape", "from", "result", "runs", "p50", "p99"]
    headers += ["peak RSS MB", "RSS added by inference MB", "outputs"]
    return "<h3>Edge shapes</h3>" + _table(headers, rows, [False] * 5 + [True] * 5)


def conditions_section(reports: Sequence[ReportFile]) -> str:
    """Declared co-load (loads, latency with and without, segments plot) and edge shapes."""
    parts = [
        _declared_table(reports),
        _coload_latency_table(reports),
        coload_figure(reports) or "",
        _edge_table(reports),
    ]
    return "".join(parts) or '<p class="muted">No declared co-load and no edge shapes.</p>'
