"""The summary's runtime environments: one row per environment measured side by side,
with its ratios to the baseline (``judge/runtime_envs.py`` reads them)."""

from __future__ import annotations

from rich.table import Table

from ...judge.runtime_envs import env_rows, env_section, ratio_text
from .sections import console, esc, fmt_mb, fmt_ms


def _with_ratio(value: str, ratio, baseline: bool) -> str:
    if baseline or ratio is None:
        return value
    return f"{value} ({ratio:.3g}×)"


def print_runtime_envs(results: dict) -> None:
    """Environments side by side: p50/p99 with ratios and intervals, cold load, first
    inference, peak memory, drift, decision flips against the baseline."""
    section = env_section(results)
    if section is None:
        return
    console.print(
        f"  runtime environments ({section.get('rounds')} segments each, "
        f"{section.get('order', 'ABBA')}; ratios against {esc(section.get('baseline'))}):",
        soft_wrap=True,
    )
    t = Table(show_edge=False, pad_edge=False, box=None)
    t.add_column("environment (* baseline)", no_wrap=True)
    for column in ("p50", "× p50 [95 % CI]", "p99 (×)", "cold load (×)", "first inf.", "peak RSS"):
        t.add_column(column, justify="right", no_wrap=True)
    t.add_column("drift", no_wrap=True, min_width=5)
    t.add_column("flips", justify="right", no_wrap=True, min_width=5)
    failed: list[str] = []
    for r in env_rows(results):
        version = r["runtime"].split(" ", 1)[-1]
        name = r["name"] if version in r["name"] else f"{r['name']} {version}"
        name = esc(name) + (" *" if r["baseline"] else "")
        if r["status"] != "ok":
            t.add_row(name, "[red]failed[/]")
            failed.append(f"  [red]{esc(r['name'])}[/]: {esc(r['reason'] or r['status'])}")
            continue
        drift = (
            "—" if r["drift_passed"] is None else "ok" if r["drift_passed"] else "[red]failed[/]"
        )
        flips = r["flips_between"]
        t.add_row(
            name,
            fmt_ms(r["p50_ms"]),
            "baseline" if r["baseline"] else ratio_text(r["p50_ratio"], r["p50_ratio_ci"]),
            _with_ratio(fmt_ms(r["p99_ms"]), r["p99_ratio"], r["baseline"]),
            _with_ratio(fmt_ms(r["cold_load_ms"]), r["cold_load_ratio"], r["baseline"]),
            fmt_ms(r["first_inference_ms"]),
            fmt_mb(r["peak_rss_mb"] * (1 << 20) if r["peak_rss_mb"] is not None else None),
            drift,
            "—" if r["baseline"] or flips is None else str(flips),
        )
    console.print(t)
    for line in failed:
        console.print(line, soft_wrap=True)
