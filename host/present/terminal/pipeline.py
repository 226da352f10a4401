"""The summary's section on the whole path from raw files (``results.pipeline``): each
stage's time and share of the end-to-end time, the preprocessing against the reference
tensors, and the libraries the stages ran with."""

from __future__ import annotations

from rich.table import Table

from ...judge.pipeline_checks import PART_LABELS, PATH_PARTS, part_summary
from .sections import console, esc, fmt_ms


def print_pipeline(results: dict) -> None:
    """Decode, preprocess, inference, decision and end to end: p50, p99 (or p95), mean, share."""
    pipeline = results.get("pipeline")
    if not pipeline or not pipeline.get("end_to_end"):
        return
    t = Table(
        title=f"Whole path from raw files ({pipeline['runs']} runs over {pipeline['cases']} cases)",
        title_justify="left",
    )
    for col in ("stage", "p50", "p99", "mean", "share"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    share = pipeline.get("share") or {}
    for part in PATH_PARTS:
        s = part_summary(pipeline, part)
        if s is None:
            t.add_row(PART_LABELS[part], "not run", "", "", "")
            continue
        tail = (
            fmt_ms(s["p99_ms"]) if s.get("p99_ms") is not None else f"p95 {fmt_ms(s.get('p95_ms'))}"
        )
        cut = share.get(part)
        t.add_row(
            PART_LABELS[part],
            fmt_ms(s["p50_ms"]),
            tail,
            fmt_ms(s["mean_ms"]),
            "100%" if part == "end_to_end" else (f"{cut:.0%}" if cut is not None else "—"),
        )
    libraries = ", ".join(f"{k} {v}" for k, v in (pipeline.get("libraries") or {}).items())
    warm = pipeline.get("warmup") or {}
    t.caption = esc(
        f"after {warm.get('runs', 0)} warm-up runs{'' if warm.get('steady') else ' (not steady)'}"
        f"; stages by {libraries}"
    )
    console.print(t)
    for name, figures in (pipeline.get("reference_inputs") or {}).items():
        if figures.get("cases_over"):
            continue  # a finding says it, with the likely cause
        console.print(
            f"  preprocessing of {esc(name)} matches the reference tensors "
            f"(max abs {figures.get('max_abs'):.3g} ≤ {figures.get('tolerance'):.3g}, "
            f"{figures.get('cases')} cases)"
        )
