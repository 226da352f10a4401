"""The report page's section on the whole path from raw files (``results.pipeline``).

Per report (one model on one device): a stage breakdown bar (each stage's share of the
end-to-end time, drawn as plain HTML boxes: the page has no script), a table of each
stage's p50, p99 and mean, and the preprocessing against the reference tensors with the
likely cause of a difference. Every text from a report is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.pipeline_checks import PART_LABELS, PATH_PARTS, part_summary
from ...judge.report_file import ReportFile
from ..units import duration_text
from .parts import COLORS, escape, fmt_duration, fmt_num, get_path, html_table, legend_label

_STAGES = PATH_PARTS[:-1]


def _bar(pipeline: dict) -> str:
    """The stage breakdown bar: one box per stage, its width the stage's share."""
    share = pipeline.get("share") or {}
    boxes = []
    for i, stage in enumerate(_STAGES):
        cut = share.get(stage)
        if not cut:
            continue
        mean = get_path(part_summary(pipeline, stage), "mean_ms")
        title = f"{PART_LABELS[stage]}: {cut:.1%} of end to end (mean {duration_text(mean)})"
        boxes.append(
            f'<div class="stage" title="{escape(title)}" style="width:{cut * 100:.2f}%;'
            f'background:{COLORS[i]}">{escape(PART_LABELS[stage]) if cut >= 0.08 else ""}</div>'
        )
    legend = " · ".join(
        f'<span style="color:{COLORS[i]}">■</span> {escape(PART_LABELS[s])} '
        f"{fmt_num(share.get(s), '{:.0%}')}"
        for i, s in enumerate(_STAGES)
        if share.get(s) is not None
    )
    return (
        '<div class="stagebar" style="display:flex;width:100%;max-width:720px;height:22px;'
        'border:1px solid #d0d7de;font-size:12px;color:#fff;line-height:22px;overflow:hidden">'
        + "".join(boxes)
        + f'</div><p class="muted">{legend}</p>'
    )


def _stage_table(pipeline: dict) -> str:
    rows = []
    share = pipeline.get("share") or {}
    for part in PATH_PARTS:
        s = part_summary(pipeline, part)
        rows.append(
            [
                escape(PART_LABELS[part]),
                fmt_duration(get_path(s, "p50_ms")) if s else "not run",
                fmt_duration(get_path(s, "p99_ms")),
                fmt_duration(get_path(s, "mean_ms")),
                fmt_num(1.0 if part == "end_to_end" else share.get(part), "{:.1%}"),
            ]
        )
    return html_table(["stage", "p50", "p99", "mean", "share"], rows, [False] + [True] * 4)


def _reference_table(pipeline: dict) -> str:
    rows = []
    for name, f in (pipeline.get("reference_inputs") or {}).items():
        cause = f.get("cause")
        rows.append(
            [
                escape(name),
                fmt_num(f.get("max_abs"), "{:.3g}"),
                fmt_num(f.get("tolerance"), "{:.3g}"),
                escape(f"{f.get('cases_over')} of {f.get('cases')}"),
                escape(cause and f"{cause['label']} ({cause['key']}?)")
                if f.get("cases_over")
                else "matches",
            ]
        )
    if not rows:
        return '<p class="muted">No reference tensors (golden make --reference-inputs).</p>'
    headers = ["input", "max abs", "tolerance", "cases over", "likely cause"]
    return html_table(headers, rows, [False, True, True, True, False])


def pipeline_section(reports: Sequence[ReportFile]) -> str:
    """The section, or "" when no report measured the whole path."""
    parts = []
    for i, r in enumerate(reports):
        pipeline = get_path(r.predicate, "results", "pipeline")
        if not pipeline or not pipeline.get("end_to_end"):
            continue
        libraries = ", ".join(f"{k} {v}" for k, v in (pipeline.get("libraries") or {}).items())
        parts += [
            f"<h3>{legend_label(i)}: {escape(r.label)}</h3>",
            _bar(pipeline),
            _stage_table(pipeline),
            f'<p class="muted">{escape(pipeline.get("runs"))} runs over {escape(pipeline.get("cases"))} '
            f"cases after a warm-up; stages by {escape(libraries)}</p>",
            "<h4>Preprocessing against the reference tensors</h4>",
            _reference_table(pipeline),
        ]
    return "\n".join(parts)
