"""The HTML trend page of the history: figures over time per board × model, with the
firmware, kernel, OS and runtime changes marked where they happened.

One section per (device, model): p50 and p99 latency on axes of their own (each in the
unit rule of ``present/units.py``) and sustained throughput (inferences/s) against the
measurement time, a dashed vertical line numbered at the top at each run whose firmware
or runtime differs from the run before, the numbered list of what changed, and the table
of runs. A run that is not a point (failed, inconclusive, incomplete: ``GAP_STATUSES``)
is a marked gap in every line, a dotted line of its status' colour at its time, and its
figures are "—" in the table; a night of the lab (a fleet run) in which the board × model
has no run at all is a gap too (a grey dotted line, "not run"): the line never joins
across it, and nothing is drawn as 0. Plots are matplotlib PNGs embedded as base64, as on
the report page (``report.py``): the page is one file, fetches nothing, runs no
script, and every text that comes from the database is escaped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...lab.results import OK_STATUSES
from ..units import duration_text, spread_text, table_unit
from .parts import CSS, escape, fmt_num, html_table, png_img, status_badge

CHANGE_LABELS = {
    "firmware": "firmware",
    "runtime": "runtime",
    "runtime_version": "runtime version",
    "kernel": "kernel",
    "os_release": "OS",
    "board": "board",
    "model": "model file",
}


def _change_text(row: dict) -> str:
    """What changed since the run before, with the new values (``firmware → 2025-01-10``)."""
    parts = []
    for field in row.get("changes") or []:
        label = CHANGE_LABELS.get(field, field)
        value = row.get(field) if field != "model" else (row.get("model_sha256") or "")[:12]
        parts.append(f"{label} → {value if value is not None else '—'}")
    return ", ".join(parts)


INCONCLUSIVE = "inconclusive"
INCONCLUSIVE_COLOR = "#9a6700"
GAP_COLORS = {"inconclusive": INCONCLUSIVE_COLOR, "failed": "#cf222e", "incomplete": "#57606a"}
"""The dotted line of a run that is not a point, by its status."""
NOT_RUN = "not run"
NOT_RUN_COLOR = "#8c959f"


def is_point(row: dict) -> bool:
    """Whether a run's figures are a point of its lines (passed or degraded): a failed,
    inconclusive or incomplete run is a gap of its status, never a figure or a 0."""
    return row.get("status") in OK_STATUSES


def series_anchor(device: str, model: str) -> str:
    """The trend page's anchor of one board × model (stable: other pages link to it)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{device}--{model}").strip("-")
    return f"series-{slug}"


NOT_MEASURED = {
    "p50_ms": "not measured in these runs",
    "p99_ms": "not measured: a p99 needs 368 calls in a run (a longer plan)",
}
"""What an empty latency panel says."""


def _empty(ax, text: str) -> None:
    """A panel without a point says why, in its middle."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9,
            color="#656d76")  # fmt: skip


def _change_points(rows: Sequence[dict], changes: Sequence) -> list[tuple[dict, object]]:
    """(row, change) for each change point (``lab/changes.py``) whose first run after it
    is one of ``rows``."""
    by_run = {r.get("run_id"): r for r in rows}
    return [
        (by_run[c.first_after["run_id"]], c)
        for c in changes
        if c.first_after.get("run_id") in by_run
        and c.device == by_run[c.first_after["run_id"]].get("device")
    ]


def trend_plot(
    device: str, model: str, rows: Sequence[dict], changes: Sequence = (), not_run: Sequence = ()
):
    """The figure of one board × model (a matplotlib Figure), or None without timed runs.

    p50 and p99 on axes of their own (the p99 never flattens the p50), each in its unit
    (``present/units.py``), and sustained throughput below; every run whose firmware,
    kernel, OS, runtime or model changed is a dashed line numbered at the top, the
    numbers explained under the figure (:func:`change_list`), so no label is cut off.
    A run that is not a point (:func:`is_point`) is a gap in every line with a dotted line
    of its status at its time (gid ``gap-STATUS``); each time of ``not_run`` (nights of the
    lab this board × model has no run in) is a gap with a grey dotted line (gid
    ``not-run``); a panel without a point says "not measured".
    """
    from matplotlib.figure import Figure

    timed = [r for r in rows if r.get("measured_at") is not None]
    if not timed:
        return None
    # A night with no run breaks every line: a row of no status and no figure, in time order.
    missing = [{"measured_at": t, "status": NOT_RUN} for t in not_run]
    timed = sorted(timed + missing, key=lambda r: _sortable(r["measured_at"]))
    fig = Figure(figsize=(11.0, 6.6), dpi=100, layout="constrained")
    p50_ax, p99_ax, thr = fig.subplots(3, 1, sharex=True, squeeze=True)
    times = [r["measured_at"] for r in timed]
    # A run that is not a point (failed, inconclusive, incomplete) and a night with no run:
    # a gap in each line (NaN breaks it) and a dotted line at its time, never a point.
    spoiled = [not is_point(r) for r in timed]
    for ax, key, label, color in (
        (p50_ax, "p50_ms", "p50 latency", "#1f77b4"),
        (p99_ax, "p99_ms", "p99 latency", "#d62728"),
    ):
        values = [None if bad else r.get(key) for r, bad in zip(timed, spoiled)]
        unit, scale = table_unit(v for v in values if v is not None)
        if any(v is not None for v in values):
            ax.plot(
                times,
                [float("nan") if v is None else v * scale for v in values],
                marker="o",
                color=color,
                label=f"{label} ({unit})",
            )
            ax.legend(loc="upper left", fontsize=8)
        else:
            _empty(ax, NOT_MEASURED[key])
        ax.set_ylabel(f"{label.split()[0]} ({unit})")
    values = [None if bad else r.get("sustained_per_s") for r, bad in zip(timed, spoiled)]
    if any(values):
        thr.plot(times, [v or float("nan") for v in values], marker="s", color="#2ca02c",
                 label="sustained throughput")  # fmt: skip
        thr.legend(loc="upper left", fontsize=8)
    else:
        _empty(thr, "no sustained phase in these runs")
    for t, r, bad in zip(times, timed, spoiled):
        if bad:
            status = str(r.get("status"))
            color = NOT_RUN_COLOR if status == NOT_RUN else GAP_COLORS.get(status, "#cf222e")
            gid = "not-run" if status == NOT_RUN else f"gap-{status}"
            for ax in (p50_ax, p99_ax, thr):
                ax.axvline(t, color=color, linestyle=":", linewidth=1.5, gid=gid)
    number = 0
    for t, r in zip(times, timed):
        if r.get("status") == NOT_RUN:
            continue
        if r.get("changes"):
            number += 1
            for ax in (p50_ax, p99_ax, thr):
                ax.axvline(t, color="#9a6700", linestyle="--", linewidth=1)
            p50_ax.annotate(
                str(number),
                (t, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
                color="#633c01",
                fontweight="bold",
            )
        if not is_point(r):  # each gap names its status
            thr.annotate(
                str(r.get("status")),
                (t, 0.04),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=7,
                color="#cf222e",
            )
    # Change points decided by history changes: a red dotted line, the ratio at the top.
    for r, c in _change_points(timed, changes):
        t = r["measured_at"]
        for ax in (p50_ax, p99_ax, thr):
            ax.axvline(t, color="#cf222e", linestyle=":", linewidth=1.5)
        label = f"{c.figure.split()[0]} ×{c.ratio:.2f}" if c.ratio is not None else c.figure
        ax = p99_ax if c.figure.startswith("p99") else p50_ax
        ax.annotate(
            label,
            (t, 0.92),
            xycoords=("data", "axes fraction"),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=8,
            color="#cf222e",
            fontweight="bold",
        )
    thr.set_ylabel("inferences/s")
    thr.set_xlabel("measured (UTC)")
    fig.suptitle(f"{model} on {device}", fontsize=10)
    for ax in (p50_ax, p99_ax, thr):
        ax.grid(alpha=0.3)
        ax.margins(x=0.05)
        ax.tick_params(labelsize=8)
    for label in thr.get_xticklabels():
        label.set_rotation(20)
        label.set_ha("right")
    return fig


def _sortable(when):
    """A time as a naive UTC datetime (SQLite gives naive, PostgreSQL aware ones)."""
    if getattr(when, "tzinfo", None) is not None:
        return when.replace(tzinfo=None) - when.utcoffset()
    return when


def trend_figure(
    device: str, model: str, rows: Sequence[dict], changes: Sequence = (), not_run: Sequence = ()
) -> str | None:
    """:func:`trend_plot` as an inline PNG, or None without timed runs."""
    fig = trend_plot(device, model, rows, changes, not_run)
    if fig is None:
        return None
    return png_img(fig, f"{model} on {device}: latency and throughput over time")


def change_list(rows: Sequence[dict]) -> str:
    """The numbered changes of the figure's dashed lines, as an HTML list ('' when none)."""
    items = [
        f"<li>{escape(str(r.get('measured_at'))[:19])}: {escape(_change_text(r))}</li>"
        for r in rows
        if r.get("measured_at") is not None and r.get("changes")
    ]
    return f'<ol class="changes">{"".join(items)}</ol>' if items else ""


def change_point_list(rows: Sequence[dict], changes: Sequence) -> str:
    """The change points of the figure's red lines, each with its ratio, interval, p-value,
    boards and culprit, as an HTML list ('' when none)."""
    items = []
    for _, c in _change_points(rows, changes):
        ci = f" [{c.ratio_ci[0]:.2f}, {c.ratio_ci[1]:.2f}]" if c.ratio_ci else ""
        ratio = f"×{c.ratio:.3f}{ci}, " if c.ratio is not None else ""
        items.append(
            f"<li><strong>{escape(c.headline())}</strong> "
            f'<span class="muted">({escape(ratio)}p {c.p_value:.3g}, {c.n_before} runs before, '
            f"{c.n_after} after; first run after: {escape(c.first_after['run_id'])})</span></li>"
        )
    return f'<ul class="change-points">{"".join(items)}</ul>' if items else ""


def _spread(text: str, row: dict, cv_key: str) -> str:
    """A figure of repeated runs (their median) with how many and their CV beside it."""
    if not row.get("repeats") or text in ("", "—"):
        return text
    return f"{text} {spread_text(row['repeats'], row.get(cv_key))}"


FIGURE_KEYS = ("p50_ms", "p99_ms", "sustained_per_s", "cold_total_ms", "peak_rss_mb")
"""The figures a history row holds (``lab/history.py``), shown only for a point."""


def _runs_table(rows: Sequence[dict]) -> str:
    body = []
    for r in rows:
        changed = _change_text(r)
        # A run that is not a point shows its status, never its figures (nor a 0).
        r = r if is_point(r) else {**r, **dict.fromkeys(FIGURE_KEYS)}
        body.append(
            [
                escape(str(r.get("measured_at"))[:19]),
                status_badge(r.get("status")),
                escape(_spread(duration_text(r.get("p50_ms")), r, "p50_repeat_cv")),
                escape(_spread(duration_text(r.get("p99_ms")), r, "p99_repeat_cv")),
                # fmt_num escapes: the spread's text is digits and words only.
                _spread(fmt_num(r.get("sustained_per_s"), "{:.1f}"), r, "sustained_repeat_cv"),
                escape(duration_text(r.get("cold_total_ms"))),
                fmt_num(r.get("peak_rss_mb"), "{:.1f}"),
                escape(r.get("firmware")),
                escape(
                    f"{r.get('runtime') or ''} {r.get('runtime_version') or ''}".strip() or None
                ),
                escape(r.get("kernel")),
                f'<span class="diff">{escape(changed)}</span>' if changed else "",
                escape(r.get("run_id")),
            ]
        )
    headers = [
        "measured",
        "status",
        "p50",
        "p99",
        "sustained /s",
        "cold load",
        "peak RSS MB",
        "firmware",
        "runtime",
        "kernel",
        "changed",
        "run",
    ]
    numeric = [False, False, True, True, True, True, True]
    return html_table(headers, body, numeric)


def render_trend_page(
    trends: Mapping[tuple[str, str], Sequence[dict]],
    *,
    source: str = "",
    title: str = "",
    changes: Sequence = (),
    not_run: Mapping[tuple[str, str], Sequence] | None = None,
) -> str:
    """The page of every (device, model) trend in ``trends`` (``History.trends``), with the
    change points of ``changes`` (``lab/changes.py``'s, from ``history changes``) marked and
    each pair's nights with no run (``not_run``: pair → times, ``History.nights_not_run``)
    drawn as gaps. Each section's anchor is :func:`series_anchor`."""
    not_run = not_run or {}
    title = title or "edgequal history"
    sections = []
    index = []
    for (device, model), rows in trends.items():
        anchor = series_anchor(device, model)
        missing = list(not_run.get((device, model), ()))
        changed = sum(1 for r in rows if r.get("changes"))
        index.append(
            f'<li><a href="#{anchor}">{escape(model)} on {escape(device)}</a> '
            f'<span class="muted">({len(rows)} runs, {changed} with changes)</span></li>'
        )
        figure = (
            trend_figure(device, model, rows, changes, missing) or '<p class="muted">no runs</p>'
        )
        gaps = _gaps_text(rows, len(missing))
        sections.append(
            f'<h2 id="{anchor}">{escape(model)} on {escape(device)}</h2>{figure}{gaps}'
            f"{change_point_list(rows, changes)}{change_list(rows)}{_runs_table(rows)}"
        )
    if not sections:
        sections.append('<p class="muted">No recorded runs match.</p>')
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="muted">{escape(source)} · generated {escape(generated)} · dashed lines: the run '
        "where the firmware, kernel, OS, runtime or model file changed; red dotted lines: "
        "change points beyond noise (history changes)</p>"
        f"<ul>{''.join(index)}</ul>{''.join(sections)}</body></html>"
    )


GAP_WHY = {"inconclusive": " (other processes took the CPU)"}


def _gaps_text(rows: Sequence[dict], not_run: int) -> str:
    """'1 failed run, 1 inconclusive run (other processes took the CPU), 2 nights not run:
    gaps in the lines, each a dotted line, never a point' ('' without a gap)."""
    counts: dict[str, int] = {}
    for r in rows:
        if not is_point(r):
            counts[str(r.get("status"))] = counts.get(str(r.get("status")), 0) + 1
    parts = [
        f"{n} {status} run{'s' if n != 1 else ''}{GAP_WHY.get(status, '')}"
        for status, n in counts.items()
    ]
    if not_run:
        parts.append(f"{not_run} night{'s' if not_run != 1 else ''} not run")
    if not parts:
        return ""
    return (
        f'<p class="muted gaps">{escape(", ".join(parts))}: gaps in the lines, each a dotted '
        "line, never a point</p>"
    )


def write_trend_page(
    path: Path, trends: Mapping[tuple[str, str], Sequence[dict]], **kwargs
) -> Path:
    """Write :func:`render_trend_page` to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_trend_page(trends, **kwargs), encoding="utf-8")
    return path
