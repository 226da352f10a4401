"""The report page's comparison, for a page of several reports: every figure ``compare``
prints, its change from the first report (the reference) and, for the run-level figures,
the verdict's line: ratio, interval, runs, spread and its source (``judge/compare.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.compare import compare_reports
from ...judge.report_file import ReportFile
from ..units import figure_text
from .parts import escape, html_table, series_name


def comparison_section(reports: Sequence[ReportFile]) -> str:
    """The comparison table with changes and significance, and which reports' fingerprints
    differ from the reference's; '' for fewer than two reports."""
    if len(reports) < 2:
        return ""
    comparison = compare_reports(list(reports))
    rows = []
    for row in comparison.rows:
        cells = [escape(row.figure)]
        for i, v in enumerate(row.values):
            text = escape(figure_text(v, row.unit))
            d = row.deltas[i]
            if d is not None:
                worse = (d > 0) if row.better == "lower" else (d < 0) if row.better else False
                cls = "fail" if worse and abs(d) >= 0.03 else "pass" if abs(d) >= 0.03 else "muted"
                text += f' <span class="{cls}">({d:+.1%})</span>'
            verdict = row.verdicts[i] if i < len(row.verdicts) else None
            if verdict and verdict["verdict"] != "UNKNOWN" and not row.significance[i]:
                text += f' <span class="muted">{escape(verdict["verdict"])}</span>'
            sig = row.significance[i]
            if sig:
                text += f'<br><span class="muted">{escape(sig)}</span>'
            cells.append(text)
        rows.append(cells)
    headers = ["figure"] + [series_name(reports, i) for i in range(len(reports))]
    out = [
        '<p class="muted">The first report is the reference: each other column shows its '
        "change from it and, run against run, SAME, DIFFERENT or UNKNOWN with the ratio, its "
        "99 % interval, the runs a side, the spread assumed and where it came from "
        "(repeats, history, none), as <code>edgequal compare</code> prints them.</p>",
        html_table(headers, rows, [False] + [True] * len(reports)),
    ]
    changed = [chr(65 + i) for i, c in enumerate(comparison.fingerprint_changes) if i and c]
    if changed:
        out.append(
            f'<p class="muted">The fingerprints of {", ".join(changed)} differ from A\'s: the '
            "Fingerprint section below marks each field that differs.</p>"
        )
    return "".join(out)
