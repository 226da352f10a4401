"""The summary's runtime environments: one row per environment measured side by side,
with its ratios to the baseline (``judge/runtime_envs.py`` reads them)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ...judge.runtime_envs import (
    drift_between_text,
    env_rows,
    env_section,
    interference_text,
    ratio_text,
)
from .sections import console, esc, fmt_mb, fmt_ms


def _with_ratio(value: str, ratio, baseline: bool) -> str:
    if baseline or ratio is None:
        return value
    return f"{value} ({ratio:.3g}×)"


def print_runtime_envs(results: dict) -> None:
    """Environments side by side: p50/p99 with ratios and intervals, cold load, first
    inference, peak memory, drift, decision flips and output drift against the baseline.
    A table too wide for the console is printed as one block per environment instead:
    no figure is ever cut."""
    section = env_section(results)
    if section is None:
        return
    console.print(
        f"  runtime environments ({section.get('rounds')} segments each, "
        f"{section.get('order', 'ABBA')}; ratios against {esc(section.get('baseline'))}):",
        soft_wrap=True,
    )
    headers = ["environment (* baseline)", "p50", "× p50 [95 % CI]", "p99 (×)", "cold load (×)"]
    headers += ["first inf.", "peak RSS", "drift", "flips", "drift between"]
    rows: list[list[str]] = []
    failed: list[str] = []
    notes: list[str] = []
    for r in env_rows(results):
        version = r["runtime"].split(" ", 1)[-1]
        name = r["name"] if version in r["name"] else f"{r['name']} {version}"
        name = esc(name) + (" *" if r["baseline"] else "")
        if r["status"] != "ok":
            rows.append([name, "[red]failed[/]"] + [""] * (len(headers) - 2))
            failed.append(f"  [red]{esc(r['name'])}[/]: {esc(r['reason'] or r['status'])}")
            continue
        drift = (
            "—" if r["drift_passed"] is None else "ok" if r["drift_passed"] else "[red]failed[/]"
        )
        flips = r["flips_between"]
        ratio = "baseline" if r["baseline"] else ratio_text(r["p50_ratio"], r["p50_ratio_ci"])
        if not r["baseline"] and not r["decisive"]:
            ratio += " [yellow](interfered)[/]"
            notes.append(f"  [yellow]{esc(r['name'])}[/]: {esc(interference_text(r))}")
        rows.append(
            [
                name,
                fmt_ms(r["p50_ms"]),
                ratio,
                _with_ratio(fmt_ms(r["p99_ms"]), r["p99_ratio"], r["baseline"]),
                _with_ratio(fmt_ms(r["cold_load_ms"]), r["cold_load_ratio"], r["baseline"]),
                fmt_ms(r["first_inference_ms"]),
                fmt_mb(r["peak_rss_mb"] * (1 << 20) if r["peak_rss_mb"] is not None else None),
                drift,
                "—" if r["baseline"] or flips is None else str(flips),
                "—" if r["baseline"] else esc(drift_between_text(r)),
            ]
        )
    t = Table(show_edge=False, pad_edge=False, box=None)
    t.add_column(headers[0], no_wrap=True)
    for column in headers[1:]:
        t.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    # Every column as wide as its widest cell, one space either side between columns.
    needed = sum(
        max(Text.from_markup(cell).cell_len for cell in column) for column in zip(headers, *rows)
    ) + 2 * (len(headers) - 1)
    if needed <= console.width:
        console.print(t)
    else:
        # Too wide for the screen (or the log's width): one block per environment, each
        # figure beside its name, so nothing is cut.
        for row in rows:
            console.print(f"  {row[0]}", soft_wrap=True)
            for header, cell in zip(headers[1:], row[1:]):
                if cell:
                    console.print(f"    {header}: {cell}", soft_wrap=True)
    for line in failed + notes:
        console.print(line, soft_wrap=True)
