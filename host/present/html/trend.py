"""The HTML trend page of the history: figures over time per board × model, with the
firmware, kernel, OS and runtime changes marked where they happened.

One section per (device, model): a plot of p50 and p99 latency (ms) and sustained
throughput (inferences/s) against the measurement time, a dashed vertical line at
each run whose firmware or runtime differs from the run before (labelled with what
changed), and the table of runs. Plots are matplotlib PNGs embedded as base64, as on
the report page (``report.py``): the page is one file, fetches nothing, runs no
script, and every text that comes from the database is escaped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .parts import _CSS, _e, _figure, _num, _png, _status, _table

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


def trend_figure(device: str, model: str, rows: Sequence[dict]) -> str | None:
    """The figure of one board × model: latency and throughput over time, changes marked."""
    timed = [r for r in rows if r.get("measured_at") is not None]
    if not timed:
        return None
    fig, axes = _figure(10.0, 5.0, rows=2, sharex=True)
    lat, thr = axes[0][0], axes[1][0]
    times = [r["measured_at"] for r in timed]
    for key, label, color in (("p50_ms", "p50", "#1f77b4"), ("p99_ms", "p99", "#d62728")):
        points = [(t, r[key]) for t, r in zip(times, timed) if r.get(key) is not None]
        if points:
            lat.plot(*zip(*points), marker="o", label=f"{label} latency", color=color)
    points = [(t, r["sustained_per_s"]) for t, r in zip(times, timed) if r.get("sustained_per_s")]
    if points:
        thr.plot(*zip(*points), marker="s", color="#2ca02c", label="sustained")
    for t, r in zip(times, timed):
        if r.get("changes"):
            for ax in (lat, thr):
                ax.axvline(t, color="#9a6700", linestyle="--", linewidth=1)
            lat.annotate(
                _change_text(r),
                (t, 0.97),
                xycoords=("data", "axes fraction"),
                xytext=(-2, 0),
                textcoords="offset points",
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                color="#633c01",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
            )
        if r.get("status") not in ("passed", "degraded"):
            lat.annotate(
                str(r.get("status")),
                (t, 0.02),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="#cf222e",
                rotation=90,
                va="bottom",
            )
    lat.set_ylabel("latency (ms)")
    thr.set_ylabel("inferences/s")
    thr.set_xlabel("measured (UTC)")
    lat.set_title(f"{model} on {device}", fontsize=10)
    if lat.lines:
        lat.legend(loc="lower right", fontsize=8)
        low, high = lat.get_ylim()
        lat.set_ylim(low, high + 0.6 * (high - low))  # room above the lines for the labels
    fig.autofmt_xdate()
    return _png(fig, f"{model} on {device}: latency and throughput over time")


def _runs_table(rows: Sequence[dict]) -> str:
    body = []
    for r in rows:
        changed = _change_text(r)
        body.append(
            [
                _e(str(r.get("measured_at"))[:19]),
                _status(r.get("status")),
                _num(r.get("p50_ms"), "{:.3f}"),
                _num(r.get("p99_ms"), "{:.3f}"),
                _num(r.get("sustained_per_s"), "{:.1f}"),
                _num(r.get("cold_total_ms"), "{:.1f}"),
                _num(r.get("peak_rss_mb"), "{:.1f}"),
                _e(r.get("firmware")),
                _e(f"{r.get('runtime') or ''} {r.get('runtime_version') or ''}".strip() or None),
                _e(r.get("kernel")),
                f'<span class="diff">{_e(changed)}</span>' if changed else "",
                _e(r.get("run_id")),
            ]
        )
    headers = [
        "measured",
        "status",
        "p50 ms",
        "p99 ms",
        "sustained /s",
        "cold ms",
        "peak RSS MB",
        "firmware",
        "runtime",
        "kernel",
        "changed",
        "run",
    ]
    numeric = [False, False, True, True, True, True, True]
    return _table(headers, body, numeric)


def render_trend_page(
    trends: Mapping[tuple[str, str], Sequence[dict]], *, source: str = "", title: str = ""
) -> str:
    """The page of every (device, model) trend in ``trends`` (``History.trends``)."""
    title = title or "edgequal history"
    sections = []
    index = []
    for i, ((device, model), rows) in enumerate(trends.items()):
        anchor = f"t{i}"
        changes = sum(1 for r in rows if r.get("changes"))
        index.append(
            f'<li><a href="#{anchor}">{_e(model)} on {_e(device)}</a> '
            f'<span class="muted">({len(rows)} runs, {changes} with changes)</span></li>'
        )
        figure = trend_figure(device, model, rows) or '<p class="muted">no runs</p>'
        sections.append(
            f'<h2 id="{anchor}">{_e(model)} on {_e(device)}</h2>{figure}{_runs_table(rows)}'
        )
    if not sections:
        sections.append('<p class="muted">No recorded runs match.</p>')
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<p class="muted">{_e(source)} · generated {_e(generated)} · dashed lines: the run '
        "where the firmware, kernel, OS, runtime or model file changed</p>"
        f"<ul>{''.join(index)}</ul>{''.join(sections)}</body></html>"
    )


def write_trend_page(
    path: Path, trends: Mapping[tuple[str, str], Sequence[dict]], **kwargs
) -> Path:
    """Write :func:`render_trend_page` to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_trend_page(trends, **kwargs), encoding="utf-8")
    return path
