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
from .parts import _COLORS, _e, _get, _label, _num, _table

_STAGES = PATH_PARTS[:-1]


def _bar(pipeline: dict) -> str:
    """The stage breakdown bar: one box per stage, its width the stage's share."""
    share = pipeline.get("share") or {}
    boxes = []
    for i, stage in enumerate(_STAGES):
        cut = share.get(stage)
        if not cut:
            continue
        mean = _get(part_summary(pipeline, stage), "mean_ms")
        title = f"{PART_LABELS[stage]}: {cut:.1%} of end to end (mean {mean:.4g} ms)"
        boxes.append(
            f'<div class="stage" title="{_e(title)}" style="width:{cut * 100:.2f}%;'
            f'background:{_COLORS[i]}">{_e(PART_LABELS[stage]) if cut >= 0.08 else ""}</div>'
        )
    legend = " · ".join(
        f'<span style="color:{_COLORS[i]}">■</span> {_e(PART_LABELS[s])} '
        f"{_num(share.get(s), '{:.0%}')}"
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
                _e(PART_LABELS[part]),
                _num(_get(s, "p50_ms"), "{:.4g}") if s else "not run",
                _num(_get(s, "p99_ms"), "{:.4g}"),
                _num(_get(s, "mean_ms"), "{:.4g}"),
                _num(1.0 if part == "end_to_end" else share.get(part), "{:.1%}"),
            ]
        )
    return _table(["stage", "p50 ms", "p99 ms", "mean ms", "share"], rows, [False] + [True] * 4)


def _reference_table(pipeline: dict) -> str:
    rows = []
    for name, f in (pipeline.get("reference_inputs") or {}).items():
        cause = f.get("cause")
        rows.append(
            [
                _e(name),
                _num(f.get("max_abs"), "{:.3g}"),
                _num(f.get("tolerance"), "{:.3g}"),
                _e(f"{f.get('cases_over')} of {f.get('cases')}"),
                _e(cause and f"{cause['label']} ({cause['key']}?)")
                if f.get("cases_over")
                else "matches",
            ]
        )
    if not rows:
        return '<p class="muted">No reference tensors (golden make --reference-inputs).</p>'
    headers = ["input", "max abs", "tolerance", "cases over", "likely cause"]
    return _table(headers, rows, [False, True, True, True, False])


def pipeline_section(reports: Sequence[ReportFile]) -> str:
    """The section, or "" when no report measured the whole path."""
    parts = []
    for i, r in enumerate(reports):
        pipeline = _get(r.predicate, "results", "pipeline")
        if not pipeline or not pipeline.get("end_to_end"):
            continue
        libraries = ", ".join(f"{k} {v}" for k, v in (pipeline.get("libraries") or {}).items())
        parts += [
            f"<h3>{_label(i)}: {_e(r.label)}</h3>",
            _bar(pipeline),
            _stage_table(pipeline),
            f'<p class="muted">{_e(pipeline.get("runs"))} runs over {_e(pipeline.get("cases"))} '
            f"cases after a warm-up; stages by {_e(libraries)}</p>",
            "<h4>Preprocessing against the reference tensors</h4>",
            _reference_table(pipeline),
        ]
    return "\n".join(parts)
