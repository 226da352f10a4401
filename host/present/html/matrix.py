"""The matrix page of a fleet run: models down, devices across, a cell per run linking to its
report page. Self-contained (no script, nothing fetched), like every page here."""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...lab.results import FleetResult


_CELL_STYLE = {
    "passed": "#c8efc8",
    "degraded": "#f6e7a6",
    "inconclusive": "#f6d7a6",
    "failed": "#f3b3b3",
    "incomplete": "#e3c3f0",
    "error": "#f3b3b3",
    "skipped": "#dddddd",
}


def matrix_html(result: FleetResult) -> str:
    """The matrix page: models down, devices across, each cell linking to its report page."""
    e = html.escape
    models = list(dict.fromkeys(r.model for r in result.runs))
    devices = list(dict.fromkeys(r.device for r in result.runs))
    cells = {(r.model, r.device): r for r in result.runs}
    rows = []
    for m in models:
        tds = [f"<th>{e(m)}</th>"]
        for d in devices:
            r = cells.get((m, d))
            if r is None:
                tds.append('<td class="na">–</td>')
                continue
            text = e(r.state) + (" ✓" if r.ok else "")
            if r.gate_passed is not None:
                text += f"<br><small>gate {'passed' if r.gate_passed else 'FAILED'}</small>"
            if r.attempts > 1:
                text += f"<br><small>{r.attempts} attempts</small>"
            if r.why and not r.ok:  # the terminal's why column: the reason, never just a state
                text += f'<br><small class="why">{e(r.why)}</small>'
            if r.page:
                text = f'<a href="{e(r.page)}">{text}</a>'
            title = e(r.error or r.run_id or "")
            color = _CELL_STYLE.get(r.state, "#ffffff")
            tds.append(f'<td style="background:{color}" title="{title}">{text}</td>')
        rows.append("<tr>" + "".join(tds) + "</tr>")
    gone = "".join(f"<li>{e(d)}: {e(why)}</li>" for d, why in sorted(result.unreachable.items()))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result.finished_unix or time.time()))
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'\">",
            f"<title>edgequal fleet {e(result.lab)}</title>",
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #999;padding:.4em .8em;text-align:center}"
            "a{color:inherit}</style></head><body>",
            f"<h1>edgequal fleet {e(result.lab)}</h1>",
            f"<p>{len(result.runs)} runs · finished {e(stamp)} · "
            f'<a href="index.json">index.json</a> · <a href="junit.xml">junit.xml</a></p>',
            "<table><tr><th>model \\ device</th>"
            + "".join(f"<th>{e(d)}</th>" for d in devices)
            + "</tr>",
            *rows,
            "</table>",
            f"<h2>Devices that went away</h2><ul>{gone}</ul>" if gone else "",
            "</body></html>",
        ]
    )
