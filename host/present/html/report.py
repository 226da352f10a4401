"""``edgequal report html``: one self-contained HTML page of one or more reports.

Plots are drawn by matplotlib (Agg, no display) and embedded as base64 PNG, the
style sheet is inline, and there is no script: the page opens with no network (no
CDN, font or script is fetched). Several reports on one page overlay their curves.
Every text that comes from a report, a file name or a policy is escaped with
``html.escape``.

Sections: a card per report (verdict and cause, p50/p90/p99, peak memory, time to
first inference, drift; ``cards.py``), overview with signature status, for several
reports the comparison ``compare`` prints (``comparison.py``), gate results, latency (histogram and CDF
with the percentiles marked, summary table), sustained throughput, temperature and
clock per window over time with throttle and interference windows shaded, the service
scenarios and energy, the declared co-load and the edge shapes, runtime environments
measured side by side (``runtime_envs.py``), the drift table with
decision flips, cold load and memory, findings, the fingerprint.

This module assembles the page; the parts live beside it: ``parts.py``
(escaping, tables, style sheet, figure to PNG), ``plots.py`` (the
matplotlib figures), ``sections.py`` (the tables),
``scenarios.py`` (service scenarios and energy) and
``conditions.py`` (co-load and edge shapes).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ...judge.gate import GateResult
from ...judge.report_file import ReportFile
from ...judge.runtime_envs import env_section
from .cards import model_cards
from .comparison import comparison_section
from .conditions import conditions_section
from .kernel_paths import has_kernel_paths, kernel_paths_section
from .parts import CSS, escape
from .pipeline import pipeline_section
from .plots import latency_figure, sustained_figure
from .runtime_envs import runtime_envs_section
from .scenarios import scenarios_section
from .sections import (
    cold_memory_section,
    drift_section,
    findings_section,
    fingerprint_section,
    gate_section,
    latency_table,
    overview,
    sustained_table,
)


def render_report_html(
    reports: Sequence[ReportFile], gate: Sequence[GateResult] = (), title: str | None = None
) -> str:
    """The whole page as a string."""
    title = title or ("edgequal report: " + ", ".join(r.model_name or r.path.name for r in reports))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network: nothing on this page may be fetched, whatever a report contains.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">generated {escape(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))} '
        f"by edgequal · {len(reports)} report(s)</p>",
        model_cards(reports),
        "<h2>Overview and signatures</h2>",
        overview(reports),
    ]
    if len(reports) > 1:
        parts += ["<h2>Comparison</h2>", comparison_section(reports)]
    if gate:
        parts += ["<h2>Gate</h2>", gate_section(gate)]
    parts += ["<h2>Warm latency</h2>"]
    fig = latency_figure(reports)
    parts += [
        fig or '<p class="muted">No raw latency samples to plot.</p>',
        latency_table(reports),
    ]
    path = pipeline_section(reports)
    if path:
        parts += ["<h2>Whole path from raw files</h2>", path]
    parts += ["<h2>Sustained</h2>"]
    fig = sustained_figure(reports)
    parts += [fig or "", sustained_table(reports)]
    parts += ["<h2>Service scenarios and energy</h2>", scenarios_section(reports)]
    parts += ["<h2>Co-load and edge shapes</h2>", conditions_section(reports)]
    if any(env_section(r.predicate.get("results") or {}) for r in reports):
        parts += ["<h2>Runtime environments</h2>", runtime_envs_section(reports)]
    parts += ["<h2>Output drift and decision flips</h2>", drift_section(reports)]
    if has_kernel_paths(reports):
        parts += ["<h2>Kernel paths and where outputs diverge</h2>", kernel_paths_section(reports)]
    parts += ["<h2>Cold load and memory</h2>", cold_memory_section(reports)]
    parts += ["<h2>Findings</h2>", findings_section(reports)]
    parts += ["<h2>Fingerprint</h2>", fingerprint_section(reports)]
    parts += ["</body></html>"]
    return "\n".join(parts)


def write_report_html(
    path: str | Path, reports: Sequence[ReportFile], gate: Sequence[GateResult] = ()
) -> Path:
    """Write the page (parents created); returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report_html(reports, gate), encoding="utf-8")
    return path
