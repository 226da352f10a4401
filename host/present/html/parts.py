"""The report page's building blocks, shared by its sections and the history's trend page:
escaping, numbers, tables, status colours, the style sheet, and a matplotlib figure
turned into an inline PNG."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from ..units import duration_text

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


_STATUS_COLORS = {
    "passed": "#1a7f37",
    "degraded": "#9a6700",
    "failed": "#cf222e",
    "inconclusive": "#bc4c00",
    "incomplete": "#8250df",
}


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;padding:0 16px;
color:#1f2328;background:#fff;max-width:1232px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;
padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
table{max-width:100%}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}
.hash{overflow-wrap:anywhere}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.retry{color:#bc4c00;font-weight:600}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0;font-weight:600}
.bad{background:#ffebe9;border:1px solid #cf222e;color:#82071e}
.good{background:#dafbe1;border:1px solid #1a7f37;color:#116329}
.warn{background:#fff8c5;border:1px solid #9a6700;color:#633c01}
.diff{background:#fff8c5}.muted{color:#656d76}img.plot{max-width:100%;border:1px solid #d0d7de}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:12px;margin:8px 0 4px}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;font-size:13px;overflow-wrap:anywhere}
.card h3{margin:0 0 4px;font-size:15px}.card dl{display:grid;grid-template-columns:auto 1fr;gap:2px 10px;margin:6px 0 0}
.card dt{color:#656d76}.card dd{margin:0;font-variant-numeric:tabular-nums}
.card .why{margin:2px 0 0;color:#1f2328}
"""


def escape(value: Any) -> str:
    """Escaped text of any value; None as an em dash."""
    if value is None:
        return "—"
    return html.escape(str(value), quote=True)


def fmt_num(value: Any, fmt: str = "{:.4g}", unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        text = fmt.format(value)
    except (TypeError, ValueError):
        text = str(value)
    return escape(f"{text} {unit}".rstrip())


def fmt_duration(value_ms: Any) -> str:
    """A duration in ms by the one unit rule (``present/units.py``), escaped; a value that is
    not a number (an unverified payload may hold anything) as its text."""
    if isinstance(value_ms, bool) or not isinstance(value_ms, (int, float)):
        return escape(value_ms)
    return escape(duration_text(value_ms))


def get_path(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()
) -> str:
    """A table; ``rows`` cells are already-escaped HTML."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if i < len(numeric) and numeric[i] else ""
            cells.append(f"<td{cls}>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def status_badge(status: Any) -> str:
    color = _STATUS_COLORS.get(str(status), "#1f2328")
    return f'<span style="color:{color};font-weight:600">{escape(status)}</span>'


def legend_label(i: int) -> str:
    return escape(chr(65 + i))


def series_name(reports: Sequence[Any], i: int) -> str:
    """What a legend calls report ``i``: its letter and model file, with the device when
    the reports come from several, and the run when one model repeats on one device."""
    r = reports[i]
    name = f"{chr(65 + i)} {r.model_name or r.path.name}"
    devices = {x.device_name for x in reports}
    if len(devices) > 1 and r.device_name:
        name += f" on {r.device_name}"
    same = [x for x in reports if x.model_name == r.model_name and x.device_name == r.device_name]
    if len(same) > 1:
        name += f" · {r.predicate.get('run_id') or r.path.name}"
    return name


def new_figure(width_in: float, height_in: float, rows: int = 1, cols: int = 1, sharex=False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, sharex=sharex, squeeze=False)
    return fig, axes


def png_img(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{data}">'
