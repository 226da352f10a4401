"""The summary's kernel paths side by side and where outputs diverge
(``judge/kernel_paths.py`` reads them; docs/divergence.md)."""

from __future__ import annotations

from rich.table import Table

from ...judge.kernel_paths import divergence_text, path_rows
from .sections import console, esc, fmt_ms, fmt_num


def print_kernel_paths(results: dict) -> None:
    """One row per path (drift against the golden outputs, flips, p50, placement), then
    each localisation's line; the run's own localisation when its drift failed."""
    own = results.get("divergence")
    if own:
        console.print(f"  [red]divergence[/] {esc(divergence_text(own))}", soft_wrap=True)
    section = results.get("kernel_paths")
    if not section:
        return
    if section.get("skipped"):
        console.print(f"  kernel paths skipped: {esc(section['skipped'])}", soft_wrap=True)
        return
    t = Table(
        title=f"Kernel paths (reference: {section.get('reference') or 'none'})",
        title_justify="left",
    )
    for col in ("path", "status", "max abs", "PSNR dB", "flips", "p50", "placement"):
        t.add_column(col, justify="left" if col in ("path", "status", "placement") else "right")
    notes = []
    for row in path_rows(results):
        if row["status"] == "ok":
            status = "[green]pass[/]" if row["drift_passed"] else "[red]FAIL[/]"
        else:
            status = "[yellow]absent[/]" if row["status"] == "absent" else "[red]failed[/]"
        t.add_row(
            esc(row["name"] + (" *" if row["reference"] else "")),
            status,
            fmt_num(row["max_abs"], "{:.3g}"),
            fmt_num(row["psnr_db"], "{:.1f}"),
            fmt_num(row["flips"], "{:d}"),
            fmt_ms(row["p50_ms"]) if row["p50_ms"] is not None else "—",
            esc(row["placement"]),
        )
        if row["divergence"]:
            notes.append(f"{row['name']}: {row['divergence']}")
    console.print(t)
    for line in notes:
        console.print(f"  {esc(line)}", soft_wrap=True)
