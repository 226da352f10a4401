"""The page's runtime environments: per report, each environment measured side by side
(p50/p99 with the ratio to the baseline and its interval, cold load, first inference,
peak memory, drift, flips between), and the median of every timed segment in the order
the segments ran, so the ABBA interleaving and any drift of the board show."""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.report_file import ReportFile
from ...judge.runtime_envs import (
    drift_between_text,
    env_rows,
    env_section,
    env_shape,
    interference_text,
    ratio_text,
)
from .parts import COLORS, escape, fmt_duration, fmt_num, get_path, html_table, new_figure, png_img


def _rows(reports: Sequence[ReportFile]) -> list[list[str]]:
    rows = []
    for i, r in enumerate(reports):
        results = get_path(r.predicate, "results") or {}
        for row in env_rows(results):
            name = escape(row["name"]) + (" (baseline)" if row["baseline"] else "")
            if row["status"] != "ok":
                rows.append(
                    [escape(chr(65 + i)), name, escape(row["runtime"]), escape(row["reason"] or "")]
                )
                continue
            drift = (
                "—" if row["drift_passed"] is None else ("ok" if row["drift_passed"] else "failed")
            )
            rows.append(
                [
                    escape(chr(65 + i)),
                    name,
                    escape(row["runtime"]),
                    fmt_duration(row["p50_ms"]),
                    "1×"
                    if row["baseline"]
                    else escape(ratio_text(row["p50_ratio"], row["p50_ratio_ci"]))
                    + (
                        ""
                        if row["decisive"]
                        else '<br><span class="muted">' + escape(interference_text(row)) + "</span>"
                    ),
                    fmt_duration(row["p99_ms"]),
                    "1×"
                    if row["baseline"]
                    else escape(ratio_text(row["p99_ratio"], row["p99_ratio_ci"])),
                    fmt_duration(row["cold_load_ms"]),
                    "1×" if row["baseline"] else escape(ratio_text(row["cold_load_ratio"], None)),
                    fmt_duration(row["first_inference_ms"]),
                    fmt_num(row["peak_rss_mb"], "{:.1f}"),
                    escape(drift),
                    "—" if row["baseline"] else fmt_num(row["flips_between"], "{}"),
                    "—" if row["baseline"] else escape(drift_between_text(row)),
                ]
            )
    return rows


def segments_figure(reports: Sequence[ReportFile]) -> str | None:
    """Each environment's segment medians in the order they ran (one panel per report)."""
    series = []
    for i, r in enumerate(reports):
        section = env_section(get_path(r.predicate, "results") or {})
        if section is None:
            continue
        lines = []
        for entry in section["environments"]:
            segments = (env_shape(entry) or {}).get("segments") or []
            points = [(s["t0"], s["p50_ms"]) for s in segments if s.get("p50_ms") is not None]
            if points:
                lines.append((entry.get("name", "?"), points))
        if lines:
            series.append((chr(65 + i), lines))
    if not series:
        return None
    fig, axes = new_figure(12, 3.2, 1, len(series))
    for ax, (label, lines) in zip(axes[0], series):
        start = min(t for _, points in lines for t, _ in points)
        for k, (name, points) in enumerate(lines):
            ax.plot(
                [t - start for t, _ in points],
                [v for _, v in points],
                marker="o",
                color=COLORS[k % len(COLORS)],
                label=name,
            )
        ax.set_title(f"{label}: segment medians in run order")
        ax.set_xlabel("s since the first segment")
        ax.set_ylabel("p50 ms")
        ax.legend(fontsize=8)
    return png_img(fig, "segment medians per runtime environment")


def runtime_envs_section(reports: Sequence[ReportFile]) -> str:
    """The table and the segments plot, or a line saying no report measured environments."""
    rows = _rows(reports)
    if not rows:
        return '<p class="muted">No runtime environments measured side by side (qualify with --runtime-env NAME --runtime-env default).</p>'
    headers = [
        "",
        "environment",
        "runtime",
        "p50",
        "p50 ratio [95 % CI]",
        "p99",
        "p99 ratio [95 % CI]",
        "cold load",
        "cold load ratio",
        "first inference",
        "peak RSS MB",
        "drift",
        "flips between",
        "drift between",
    ]
    numeric = [False, False, False] + [True] * 8 + [False, True, True]
    return html_table(headers, rows, numeric) + (segments_figure(reports) or "")
