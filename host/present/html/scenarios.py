"""The report page's service scenarios and energy: batch sweep, thread scaling, the server
scenario, per-operator time and delegate use, energy per inference."""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.report_file import ReportFile
from ..units import duration_text
from .parts import escape, fmt_duration, fmt_num, get_path, html_table, legend_label


def _batch_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        sweep = get_path(r.predicate, "results", "batch_sweep")
        if not sweep:
            continue
        if sweep.get("skipped"):
            rows.append([legend_label(i), escape(sweep["skipped"])] + ["—"] * 6)
            continue
        best = get_path(sweep, "best", "batch")
        for p in sweep.get("points") or []:
            if p.get("error"):
                rows.append(
                    [legend_label(i), fmt_num(p.get("batch"), "{}"), escape(p["error"])] + ["—"] * 5
                )
                continue
            rows.append(
                [
                    legend_label(i),
                    fmt_num(p.get("batch"), "{}") + (" (best)" if p.get("batch") == best else ""),
                    fmt_num(p.get("items_per_s"), "{:.4g}"),
                    fmt_num(p.get("items_per_s_per_core"), "{:.4g}"),
                    fmt_duration(p.get("p50_ms")),
                    fmt_duration(p.get("p90_ms")),
                    fmt_duration(p.get("ms_per_item")),
                    fmt_num(p.get("calls"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "batch", "items/s", "items/s per core", "p50", "p90", "per item", "calls"]
    return "<h3>Batch sweep</h3>" + html_table(headers, rows, [False, False] + [True] * 6)


def _threads_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        scaling = get_path(r.predicate, "results", "thread_scaling")
        if not scaling:
            continue
        rec = scaling.get("recommended") or {}
        for p in scaling.get("points") or []:
            mark = " (recommended)" if p.get("threads") == rec.get("threads") else ""
            rows.append(
                [
                    legend_label(i),
                    fmt_num(p.get("threads"), "{}") + mark,
                    fmt_num(p.get("calls_per_s"), "{:.4g}"),
                    fmt_duration(p.get("p50_ms")),
                    fmt_duration(p.get("p90_ms")),
                ]
            )
        if rec.get("reason"):
            rows.append([legend_label(i), escape("why"), escape(rec["reason"]), "", ""])
    if not rows:
        return ""
    headers = ["", "threads", "calls/s", "p50", "p90"]
    return "<h3>Thread scaling</h3>" + html_table(headers, rows, [False, False, True, True, True])


def _server_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        server = get_path(r.predicate, "results", "server")
        if not server:
            continue
        runs = [("at target", server.get("at_target") or {})]
        runs += [(f"step {k + 1}", s) for k, s in enumerate(server.get("steps") or [])]
        for name, run in runs:
            rows.append(
                [
                    legend_label(i),
                    escape(name),
                    fmt_num(run.get("target_rate_per_s"), "{:.4g}"),
                    fmt_num(run.get("achieved_rate_per_s"), "{:.4g}"),
                    fmt_duration(run.get("p50_ms")),
                    fmt_duration(run.get("p90_ms")),
                    fmt_duration(run.get("p99_ms")),
                    fmt_num(run.get("saturated")),
                    fmt_num(run.get("held")),
                ]
            )
        rows.append(
            [
                legend_label(i),
                escape("highest rate held"),
                fmt_num(server.get("max_rate_held_per_s"), "{:.4g}"),
                escape(f"capacity {fmt_num(server.get('capacity_per_s'), '{:.4g}')} /s"),
                escape(f"p99 bound {duration_text(server.get('p99_bound_ms'))}"),
                escape(f"{server.get('callers')} callers"),
                "",
                "",
                "",
            ]
        )
    if not rows:
        return ""
    headers = ["", "run", "target /s", "achieved /s", "p50", "p90", "p99"]
    headers += ["saturated", "held"]
    return "<h3>Server scenario (latency includes queueing)</h3>" + html_table(
        headers, rows, [False, False] + [True] * 5
    )


def _operators_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        ops = get_path(r.predicate, "results", "operators")
        if not ops:
            continue
        for o in get_path(ops, "profile", "operators") or []:
            rows.append(
                [
                    legend_label(i),
                    escape(o.get("op_type")),
                    fmt_num(o.get("us_per_run"), "{:.4g}"),
                    fmt_num(None if o.get("share") is None else o["share"] * 100, "{:.1f}", "%"),
                    fmt_num(o.get("nodes"), "{}"),
                ]
            )
        for node in get_path(ops, "cpu_fallback", "cpu_nodes") or []:
            text = f"{node.get('node')} fell back to the CPU"
            rows.append([legend_label(i), escape(node.get("op_type")), escape(text), "", ""])
        for o in get_path(ops, "delegate", "left_operators") or []:
            rows.append(
                [
                    legend_label(i),
                    escape(o.get("op_type")),
                    escape("left by the delegate"),
                    "",
                    fmt_num(o.get("nodes"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "operator", "µs per inference", "share", "nodes"]
    return "<h3>Operators</h3>" + html_table(headers, rows, [False, False, True, True, True])


def _energy_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        power = get_path(r.predicate, "results", "sustained", "power")
        if not power:
            continue
        if not power.get("present"):
            rows.append([legend_label(i), escape(f"absent: {power.get('reason')}")] + ["—"] * 4)
            continue
        summary = power.get("summary") or {}
        rows.append(
            [
                legend_label(i),
                escape(power.get("total_from")),
                fmt_num(get_path(power, "idle", "watts"), "{:.3g}"),
                fmt_num(summary.get("power_w_median"), "{:.3g}"),
                fmt_num(summary.get("mj_per_inference_median"), "{:.4g}"),
                fmt_num(summary.get("mj_per_inference_above_idle_median"), "{:.4g}"),
            ]
        )
    if not rows:
        return ""
    headers = ["", "rail (board total)", "idle W", "W (median window)", "mJ/inference"]
    headers += ["mJ/inference above idle"]
    return "<h3>Energy per inference</h3>" + html_table(
        headers, rows, [False, False, True, True, True, True]
    )


def scenarios_section(reports: Sequence[ReportFile]) -> str:
    parts = [
        _batch_table(reports),
        _threads_table(reports),
        _server_table(reports),
        _operators_table(reports),
        _energy_table(reports),
    ]
    return "".join(parts) or '<p class="muted">No service scenario or energy figures.</p>'
