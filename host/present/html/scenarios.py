"""The report page's service scenarios and energy: batch sweep, thread scaling, the server
scenario, per-operator time and delegate use, energy per inference."""

from __future__ import annotations

from collections.abc import Sequence

from ...judge.report_file import ReportFile
from ..units import duration_text
from .parts import _dur, _e, _get, _label, _num, _table


def _batch_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        sweep = _get(r.predicate, "results", "batch_sweep")
        if not sweep:
            continue
        if sweep.get("skipped"):
            rows.append([_label(i), _e(sweep["skipped"])] + ["—"] * 6)
            continue
        best = _get(sweep, "best", "batch")
        for p in sweep.get("points") or []:
            if p.get("error"):
                rows.append([_label(i), _num(p.get("batch"), "{}"), _e(p["error"])] + ["—"] * 5)
                continue
            rows.append(
                [
                    _label(i),
                    _num(p.get("batch"), "{}") + (" (best)" if p.get("batch") == best else ""),
                    _num(p.get("items_per_s"), "{:.4g}"),
                    _num(p.get("items_per_s_per_core"), "{:.4g}"),
                    _dur(p.get("p50_ms")),
                    _dur(p.get("p90_ms")),
                    _dur(p.get("ms_per_item")),
                    _num(p.get("calls"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "batch", "items/s", "items/s per core", "p50", "p90", "per item", "calls"]
    return "<h3>Batch sweep</h3>" + _table(headers, rows, [False, False] + [True] * 6)


def _threads_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        scaling = _get(r.predicate, "results", "thread_scaling")
        if not scaling:
            continue
        rec = scaling.get("recommended") or {}
        for p in scaling.get("points") or []:
            mark = " (recommended)" if p.get("threads") == rec.get("threads") else ""
            rows.append(
                [
                    _label(i),
                    _num(p.get("threads"), "{}") + mark,
                    _num(p.get("calls_per_s"), "{:.4g}"),
                    _dur(p.get("p50_ms")),
                    _dur(p.get("p90_ms")),
                ]
            )
        if rec.get("reason"):
            rows.append([_label(i), _e("why"), _e(rec["reason"]), "", ""])
    if not rows:
        return ""
    headers = ["", "threads", "calls/s", "p50", "p90"]
    return "<h3>Thread scaling</h3>" + _table(headers, rows, [False, False, True, True, True])


def _server_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        server = _get(r.predicate, "results", "server")
        if not server:
            continue
        runs = [("at target", server.get("at_target") or {})]
        runs += [(f"step {k + 1}", s) for k, s in enumerate(server.get("steps") or [])]
        for name, run in runs:
            rows.append(
                [
                    _label(i),
                    _e(name),
                    _num(run.get("target_rate_per_s"), "{:.4g}"),
                    _num(run.get("achieved_rate_per_s"), "{:.4g}"),
                    _dur(run.get("p50_ms")),
                    _dur(run.get("p90_ms")),
                    _dur(run.get("p99_ms")),
                    _num(run.get("saturated")),
                    _num(run.get("held")),
                ]
            )
        rows.append(
            [
                _label(i),
                _e("highest rate held"),
                _num(server.get("max_rate_held_per_s"), "{:.4g}"),
                _e(f"capacity {_num(server.get('capacity_per_s'), '{:.4g}')} /s"),
                _e(f"p99 bound {duration_text(server.get('p99_bound_ms'))}"),
                _e(f"{server.get('callers')} callers"),
                "",
                "",
                "",
            ]
        )
    if not rows:
        return ""
    headers = ["", "run", "target /s", "achieved /s", "p50", "p90", "p99"]
    headers += ["saturated", "held"]
    return "<h3>Server scenario (latency includes queueing)</h3>" + _table(
        headers, rows, [False, False] + [True] * 5
    )


def _operators_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        ops = _get(r.predicate, "results", "operators")
        if not ops:
            continue
        for o in _get(ops, "profile", "operators") or []:
            rows.append(
                [
                    _label(i),
                    _e(o.get("op_type")),
                    _num(o.get("us_per_run"), "{:.4g}"),
                    _num(None if o.get("share") is None else o["share"] * 100, "{:.1f}", "%"),
                    _num(o.get("nodes"), "{}"),
                ]
            )
        for node in _get(ops, "cpu_fallback", "cpu_nodes") or []:
            text = f"{node.get('node')} fell back to the CPU"
            rows.append([_label(i), _e(node.get("op_type")), _e(text), "", ""])
        for o in _get(ops, "delegate", "left_operators") or []:
            rows.append(
                [
                    _label(i),
                    _e(o.get("op_type")),
                    _e("left by the delegate"),
                    "",
                    _num(o.get("nodes"), "{}"),
                ]
            )
    if not rows:
        return ""
    headers = ["", "operator", "µs per inference", "share", "nodes"]
    return "<h3>Operators</h3>" + _table(headers, rows, [False, False, True, True, True])


def _energy_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        power = _get(r.predicate, "results", "sustained", "power")
        if not power:
            continue
        if not power.get("present"):
            rows.append([_label(i), _e(f"absent: {power.get('reason')}")] + ["—"] * 4)
            continue
        summary = power.get("summary") or {}
        rows.append(
            [
                _label(i),
                _e(power.get("total_from")),
                _num(_get(power, "idle", "watts"), "{:.3g}"),
                _num(summary.get("power_w_median"), "{:.3g}"),
                _num(summary.get("mj_per_inference_median"), "{:.4g}"),
                _num(summary.get("mj_per_inference_above_idle_median"), "{:.4g}"),
            ]
        )
    if not rows:
        return ""
    headers = ["", "rail (board total)", "idle W", "W (median window)", "mJ/inference"]
    headers += ["mJ/inference above idle"]
    return "<h3>Energy per inference</h3>" + _table(
        headers, rows, [False, False, True, True, True, True]
    )


def _scenarios_section(reports: Sequence[ReportFile]) -> str:
    parts = [
        _batch_table(reports),
        _threads_table(reports),
        _server_table(reports),
        _operators_table(reports),
        _energy_table(reports),
    ]
    return "".join(parts) or '<p class="muted">No service scenario or energy figures.</p>'
