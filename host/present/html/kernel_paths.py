"""The page's kernel paths and where outputs diverge (docs/divergence.md): per report, each
path's drift against the golden outputs, flips, p50 and placement, absent paths with
their reason, each localisation's line, and the per-node error curves (error over its
tolerance, node by node in topological order; the first divergent node marked)."""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.kernel_paths import divergence_text, error_curves, path_rows
from ...judge.report_file import ReportFile
from .parts import COLORS, escape, fmt_duration, fmt_num, get_path, html_table, new_figure, png_img


def has_kernel_paths(reports: Sequence[ReportFile]) -> bool:
    """Whether any report ran kernel paths or localised its own drift."""
    for r in reports:
        results = get_path(r.predicate, "results") or {}
        if results.get("kernel_paths") or results.get("divergence"):
            return True
    return False


def curves_figure(reports: Sequence[ReportFile]) -> str | None:
    """Every localisation's error curve, one panel per report."""
    panels = []
    for i, r in enumerate(reports):
        curves = error_curves(get_path(r.predicate, "results") or {})
        if curves:
            panels.append((chr(65 + i), curves))
    if not panels:
        return None
    fig, axes = new_figure(12, 3.4, 1, len(panels))
    for ax, (label, curves) in zip(axes[0], panels):
        for k, (name, curve, first) in enumerate(curves):
            points = [(c["index"], c["ratio"]) for c in curve if c["ratio"] is not None]
            if not points:
                continue
            color = COLORS[k % len(COLORS)]
            ax.plot(
                [x for x, _ in points],
                [max(y, 1e-6) for _, y in points],
                marker=".",
                color=color,
                label=name,
            )
            if first is not None:
                ax.axvline(first, color=color, linestyle=":", linewidth=1)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(f"{label}: error over tolerance per node")
        ax.set_xlabel("node (topological order)")
        ax.set_ylabel("max abs / tolerance")
        ax.legend(fontsize=7)
    return png_img(fig, "per-node error over tolerance, first divergent node marked")


def kernel_paths_section(reports: Sequence[ReportFile]) -> str:
    """The paths table, the localisation lines and the curves."""
    rows, lines = [], []
    for i, r in enumerate(reports):
        results = get_path(r.predicate, "results") or {}
        own = results.get("divergence")
        if own:
            lines.append(f"{chr(65 + i)}, the model: {divergence_text(own)}")
        skipped = (results.get("kernel_paths") or {}).get("skipped")
        if skipped:
            lines.append(f"{chr(65 + i)}: kernel paths skipped: {skipped}")
        for row in path_rows(results):
            status = row["status"]
            if status == "ok":
                status = "pass" if row["drift_passed"] else "FAIL"
            rows.append(
                [
                    escape(chr(65 + i)),
                    escape(row["name"] + (" (reference)" if row["reference"] else "")),
                    escape(status),
                    fmt_num(row["max_abs"], "{:.3g}"),
                    fmt_num(row["psnr_db"], "{:.1f}"),
                    fmt_num(row["flips"], "{}"),
                    fmt_duration(row["p50_ms"]),
                    escape(row["placement"]),
                    escape(row["divergence"] or ""),
                ]
            )
    parts = []
    if rows:
        headers = ["", "path", "drift", "max abs", "PSNR dB", "flips", "p50", "placement",
                   "first divergent node, or why absent"]  # fmt: skip
        numeric = [False, False, False, True, True, True, True, False, False]
        parts.append(html_table(headers, rows, numeric))
    parts += [f"<p>{escape(line)}</p>" for line in lines]
    parts.append(curves_figure(reports) or "")
    return "\n".join(parts)
