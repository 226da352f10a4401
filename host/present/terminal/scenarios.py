"""The scenario sections of the qualification summary: batch sweep, thread scaling,
server scenario and operator diagnostics (imported only by :mod:`edgequal.host.present.terminal.summary`)."""

from __future__ import annotations

from .sections import console, esc, fmt_ms, fmt_num, print_table


def print_scenarios(results: dict) -> None:
    """Batch sweep, thread scaling, server scenario and operator diagnostics, where run."""
    sweep = results.get("batch_sweep")
    if sweep and sweep.get("skipped"):
        console.print(f"  batch sweep: {esc(sweep['skipped'])}", soft_wrap=True)
    elif sweep:
        rows = [
            [
                str(p["batch"]),
                fmt_ms(p.get("p50_ms")),
                fmt_ms(p.get("p90_ms")),
                fmt_num(p.get("items_per_s")),
                fmt_num(p.get("items_per_s_per_core")),
            ]
            if "error" not in p
            else [str(p["batch"]), "—", "—", esc(p["error"]), "—"]
            for p in sweep["points"]
        ]
        print_table(
            f"Batch sweep ({sweep['cores']} cores)",
            ["batch", "p50", "p90", "items/s", "items/s/core"],
            rows,
        )
        if sweep.get("best"):
            b = sweep["best"]
            console.print(f"  best batch {b['batch']}: {fmt_num(b['items_per_s'])} items/s")
    scaling = results.get("thread_scaling")
    if scaling:
        rows = [
            [str(p["threads"]), fmt_ms(p["p50_ms"]), fmt_ms(p["p90_ms"]), fmt_num(p["calls_per_s"])]
            for p in scaling["points"]
        ]
        print_table(
            f"Thread scaling ({scaling['online_cores']} cores online)",
            ["threads", "p50", "p90", "inferences/s"],
            rows,
        )
        if scaling.get("recommended"):
            console.print(f"  use {esc(scaling['recommended']['reason'])}", soft_wrap=True)
    server = results.get("server")
    if server:
        rows = [
            [
                fmt_num(r["target_rate_per_s"]),
                fmt_num(r["achieved_rate_per_s"]),
                fmt_ms(r["p50_ms"]),
                fmt_ms(r["p90_ms"]),
                fmt_ms(r["p99_ms"]),
                "held" if r["held"] else ("saturated" if r["saturated"] else "p99 over bound"),
            ]
            for r in [server["at_target"], *server["steps"]]
        ]
        print_table(
            f"Server scenario ({server['callers']} callers, p99 bound {fmt_ms(server['p99_bound_ms'])})",
            ["rate /s", "achieved /s", "p50", "p90", "p99", ""],
            rows,
        )
        held = server.get("max_rate_held_per_s")
        console.print(
            f"  highest rate with p99 under the bound: {fmt_num(held) + '/s' if held else 'none found'}"
            f" (capacity {fmt_num(server['capacity_per_s'])}/s)"
        )
    for key in ("batch_sweep", "thread_scaling", "server"):
        present = (results.get(key) or {}).get("interference_present")
        if present:
            name = key.replace("_", " ")
            console.print(f"  [yellow]{name} ran beside other load:[/] {esc('; '.join(present))}")
    ops = results.get("operators") or {}
    profile = ops.get("profile")
    if profile:
        top = ", ".join(f"{o['op_type']} {o['share']:.0%}" for o in profile["operators"][:5])
        console.print(f"  operators by time: {esc(top)}", soft_wrap=True)
    delegate = ops.get("delegate")
    if delegate:
        if not delegate["delegate_applied"]:
            text = "no delegate applied" + ("" if delegate.get("asked") else " (XNNPACK off)")
        elif delegate["whole_graph"]:
            text = f"{delegate['asked'] or 'delegate'} took the whole graph"
        else:
            left = ", ".join(f"{o['op_type']} ×{o['nodes']}" for o in delegate["left_operators"])
            text = f"{delegate['asked'] or 'delegate'} took {delegate['delegated_nodes']}/{delegate['nodes']} nodes; left: {left}"
        console.print(f"  delegate: {esc(text)}", soft_wrap=True)
    if ops.get("fallback_finding"):
        console.print(f"  [yellow]CPU fallback[/] {esc(ops['fallback_finding'])}", soft_wrap=True)
