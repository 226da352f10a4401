"""Everything the host shows a person. The only module that imports rich.

Only this module's own markup is markup: every name, path, message and hint
that comes from elsewhere is escaped (:func:`esc`) or printed with markup off,
so ``models[v2]/m.onnx`` or ``pip install 'edgequal[litert]'`` reach the screen
as they are.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .conditions import achieved_text, coload_shapes, edge_failure, edge_shapes, shapes_text

# A terminal gets its own width; logs (CI) get 120 columns rather than rich's 80.
console = Console(stderr=False, highlight=False, width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, highlight=False)

PHASES = ("upload", "fingerprint", "cold_load", "latency", "sustained", "signing")
# Optional phases: a row appears when the run starts one, in this place among PHASES.
SCENARIO_PHASES = ("operators", "batch_sweep", "thread_scaling", "server")
_ROW_ORDER = PHASES[:4] + SCENARIO_PHASES + PHASES[4:]
_STATUS_STYLE = {
    "passed": "bold green",
    "degraded": "bold yellow",
    "failed": "bold red",
    "inconclusive": "bold yellow",
    "incomplete": "bold magenta",
}

# What would change a status that is not "passed": one line under the summary.
# Keys are a status, or "status:cause" for a cause the summary can name.
STATUS_HINTS = {
    "degraded:unsteady": "latency never settled: re-run on a quiet machine (nothing else "
    "running), or with --plan standard for a longer warm-up",
    "degraded:sustained": "throughput dropped or the device throttled under sustained load: "
    "improve cooling or power, then re-run (--plan soak shows the whole curve)",
    "degraded:unexplained": "throughput dropped with no throttling or interference measured: "
    "check the board's power supply and background services, then re-run",
    "degraded": "re-run on a quiet, cooled-down machine; if it stays degraded, improve "
    "the board's cooling or power",
    "failed:drift": "outputs moved beyond tolerance: if that drift is acceptable, raise the "
    "output's tolerance in the golden set ('min atol' above is the smallest that passes); "
    "else fix the export or quantization",
    "failed:sustained": "the device throttled or lost throughput: improve cooling or power "
    "(or qualify at a lower clock), then re-run",
    "failed:model_rejected": "the runtime refused the model: export it with operators this "
    "runtime supports (the finding names the one it refused), or try another --runtime",
    "failed:runtime_unavailable": "install the runtime on the device (e.g. pip install "
    "'edgequal[litert]' or 'edgequal[onnx]'), or pick another with --runtime",
    "failed:edge_shape_failed": "an input at the edge of its range crashed, hung or ran out "
    "of memory: fix the model or the runtime for that shape, or drop the shape from the "
    "production range (and from the plan or golden set)",
    "failed": "fix what the finding above names, then re-run",
    "inconclusive": "other processes interfered with the measurement: re-run on a quiet "
    "board (nothing else running)",
    "incomplete": "the run did not finish: fix the cause above and re-run; a report the "
    "device kept can be fetched by its run id",
}


def esc(value) -> str:
    """``str(value)`` with rich markup escaped, for text that is not this module's."""
    return escape(str(value))


def status_hint(predicate: dict) -> str | None:
    """The one line saying what would change a non-passing status (None when passed).

    A finding's own hint wins; else the most specific entry of :data:`STATUS_HINTS`.
    """
    status = predicate.get("status")
    if status == "passed":
        return None
    results = predicate.get("results") or {}
    findings = predicate.get("findings") or []
    if findings and findings[0].get("hint"):
        return str(findings[0]["hint"])
    causes = [f.get("kind") for f in findings]
    if not (results.get("drift") or {}).get("passed", True):
        causes.append("drift")
    sustained = results.get("sustained") or {}
    if sustained.get("verdict") == "unexplained":
        causes.append("unexplained")
    if sustained.get("verdict") in ("degraded", "failed"):
        causes.append("sustained")
    per_shape = (results.get("latency") or {}).get("per_shape", [])
    if any(not e.get("warmup", {}).get("steady", True) for e in per_shape):
        causes.append("unsteady")
    for cause in causes:
        if f"{status}:{cause}" in STATUS_HINTS:
            return STATUS_HINTS[f"{status}:{cause}"]
    return STATUS_HINTS.get(status)


def _ms(value) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.1f} µs"
    return f"{value:.2f} ms" if value < 100 else f"{value:.0f} ms"


def _mb(n) -> str:
    return "—" if n is None else f"{n / (1 << 20):.1f} MB"


def _num(v, fmt="{:.4g}") -> str:
    return "—" if v is None else fmt.format(v)


class ProgressDisplay:
    """A live per-phase view of a qualification: state, and the latest figures of each phase."""

    def __init__(self, title: str, enabled: bool = True):
        self.title = title
        self.enabled = enabled and console.is_terminal
        # In a log (CI), a line per phase and per sustained window instead of a live view.
        self.log_lines = enabled and not console.is_terminal
        self.state = {p: ("pending", "") for p in PHASES}
        self._live: Live | None = None

    def _table(self) -> Table:
        table = Table(title=esc(self.title), show_header=False, box=None, padding=(0, 1))
        icons = {
            "pending": "[dim]·[/]",
            "running": "[cyan]…[/]",
            "done": "[green]✓[/]",
            "skipped": "[dim]–[/]",
        }
        for phase in (p for p in _ROW_ORDER if p in self.state):
            state, detail = self.state[phase]
            table.add_row(
                Text.from_markup(icons.get(state, esc(state))),
                phase.replace("_", " "),
                Text(detail),
            )
        return table

    def __enter__(self) -> ProgressDisplay:
        if self.enabled:
            self._live = Live(self._table(), console=console, refresh_per_second=8, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.__exit__(*exc)

    def update(self, phase: str, state: str | None = None, detail: str | None = None) -> None:
        """Set a phase's state and detail line, and redraw."""
        if phase in SCENARIO_PHASES and phase not in self.state:
            self.state[phase] = ("pending", "")
        if phase not in self.state:
            return
        old_state, old_detail = self.state[phase]
        self.state[phase] = (state or old_state, old_detail if detail is None else detail)
        if self._live:
            self._live.update(self._table())
        elif self.log_lines and (state != old_state or (phase == "sustained" and detail)):
            err_console.print(
                f"{phase.replace('_', ' ')}: {state or old_state} {detail or ''}".rstrip(),
                markup=False,
            )

    def show_run(self, run_id: str | None) -> None:
        """Say which run the agent accepted, at once (it names the report if the host goes away)."""
        if not run_id or not (self.enabled or self.log_lines):
            return
        line = f"run {run_id} accepted by the device"
        if self._live:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            err_console.print(line, markup=False)

    def on_event(self, event: dict) -> None:
        """Feed one agent event."""
        kind, phase = event.get("type"), event.get("phase")
        if kind == "run":
            self.show_run(event.get("run_id"))
        elif kind == "phase":
            self.update(phase, "running" if event.get("state") == "started" else "done")
        elif kind == "progress" and phase:
            parts = []
            if event.get("total"):
                parts.append(
                    f"{event.get('done', 0)}/{event['total']:g}"
                    if isinstance(event["total"], float)
                    else f"{event.get('done', 0)}/{event['total']}"
                )
            if event.get("rate_per_s") is not None:
                parts.append(f"{event['rate_per_s']:.1f}/s")
            if event.get("temp_c") is not None:
                parts.append(f"{event['temp_c']:.1f} °C")
            if event.get("message") and not parts:
                parts.append(event["message"])
            self.update(phase, "running", "  ".join(parts))


def print_summary(predicate: dict, device: str, report_path: str | None = None) -> None:
    """The one screen: status, load, latency with intervals, drift and flips, memory, findings."""
    status = predicate["status"]
    results = predicate.get("results", {})
    head = Text.assemble(
        ("edgequal ", "bold"),
        (f"{status.upper()}", _STATUS_STYLE.get(status, "bold")),
        f"  device {device}  run {predicate['run_id']}",
    )
    console.print(head)
    if predicate.get("reason"):
        console.print(f"  reason: {esc(predicate['reason'])}")
    runtime = results.get("runtime") or (results.get("cold_load") or {}).get("runtime")
    if runtime:
        accel = ", ".join(runtime.get("providers") or runtime.get("delegates") or []) or "default"
        console.print(
            f"  runtime {runtime['runtime']} {runtime['version']} · {accel} · threads {runtime.get('threads') or 'default'}",
            markup=False,
        )

    cold = results.get("cold_load")
    if cold:
        t = Table(title=f"Cold load ({len(cold['runs'])} fresh processes)", title_justify="left")
        for col in ("", "median", "min", "max"):
            t.add_column(col, justify="right" if col else "left")
        for key, label in (
            ("import_ms", "runtime import"),
            ("load_ms", "session create"),
            ("first_inference_ms", "first inference"),
            ("total_ms", "total to first result"),
        ):
            s = cold[key]
            t.add_row(label, _ms(s["median"]), _ms(s["min"]), _ms(s["max"]))
        t.caption = f"page cache {'evicted' if cold['page_cache_evicted'] else 'not evicted'} before each load"
        console.print(t)

    per_shape = (results.get("latency") or {}).get("per_shape", [])
    if per_shape:
        # One unit per table keeps the columns narrow enough for an 80-column CI log.
        micro = max(e["summary"]["p50_ms"] or 0 for e in per_shape) < 1.0
        unit, scale = ("µs", 1000.0) if micro else ("ms", 1.0)

        def v(x):
            if x is None:
                return "—"
            x *= scale
            return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"

        def ci(pair):
            return "—" if not pair else f"{v(pair[0])}–{v(pair[1])}"

        t = Table(
            title=f"Warm latency ({unit}; 95 % CIs are order-statistic)", title_justify="left"
        )
        for col in ("shape", "n", "p50", "p50 CI", "p90", "p99", "p99 CI", "max", "CV"):
            t.add_column(col, justify="left" if col == "shape" else "right")
        for entry in per_shape:
            s = entry["summary"]
            shape = entry["shape"] if ";" in entry["shape"] else entry["shape"].split("=")[-1]
            steady = "" if entry["warmup"]["steady"] else " [yellow](unsteady)[/]"
            t.add_row(
                esc(shape) + steady,
                str(s["count"]),
                v(s["p50_ms"]),
                ci(s.get("p50_ci_ms")),
                v(s["p90_ms"]),
                v(s["p99_ms"]),
                ci(s.get("p99_ci_ms")),
                v(s["max_ms"]),
                _num(s["cv"], "{:.2f}"),
            )
        console.print(t)
        for entry in per_shape:
            if entry.get("cause") in (None, "none"):
                continue
            what = "unsteady" if not entry["warmup"]["steady"] else "heavy tail"
            console.print(
                f"  latency {esc(entry['shape'])} {what}: "
                f"{esc(describe_cause(entry['cause'], entry.get('interference')))}",
                soft_wrap=True,
            )

    drift = results.get("drift")
    if drift:
        t = Table(title="Output drift (worst case over the golden set)", title_justify="left")
        for col in (
            "output",
            "tol",
            "max abs",
            "cosine",
            "PSNR dB",
            "top-1",
            "NaN/Inf",
            "min atol",
            "result",
        ):
            t.add_column(col, justify="left" if col in ("output", "tol") else "right")
        failures = []
        for name, o in drift["outputs"].items():
            tol = o.get("tolerance", {})
            t.add_row(
                esc(name),
                esc(tol.get("class") or tol.get("cls") or ""),
                _num(o.get("max_abs"), "{:.3g}"),
                _num(o.get("cosine"), "{:.5f}"),
                "exact" if o.get("exact") else _num(o.get("psnr_db"), "{:.1f}"),
                _num(o.get("top1_agreement"), "{:.0%}"),
                f"{o.get('nan_count', 0)}/{o.get('inf_count', 0)}",
                _num(o.get("smallest_passing_atol"), "{:.2g}"),
                "[green]pass[/]" if o.get("passed") else "[red]FAIL[/]",
            )
            if not o.get("passed"):
                failures.append(esc(f"{name}: {o.get('reason')}"))
        console.print(t)
        for line in failures:
            console.print(f"  [red]drift[/] {line}")
        d = drift.get("decisions")
        if d:
            style = "green" if d["passed"] else "red"
            console.print(
                f"  decisions [{style}]{d['flip_count']} flips[/] in {d['total_cases']} cases ({esc(d['rule'])}); "
                f"{d['flips_near_threshold_count']} of {d['near_threshold_count']} cases near the threshold flipped"
                + (f": {esc(', '.join(d['flips'][:8]))}" if d["flips"] else "")
            )

    sustained = results.get("sustained")
    if sustained and "peak_per_s" in sustained:
        t = Table(
            title=f"Sustained ({sustained['duration_s']:g} s, {sustained['window_s']:g} s windows)",
            title_justify="left",
        )
        for col in (
            "peak /s",
            "sustained /s",
            "stability",
            "first throttle",
            "3% drop",
            "peak temp",
            "headroom",
            "verdict",
            "cause",
        ):
            t.add_column(col, justify="right")

        def secs(v):
            return "never" if v is None else f"{v:.0f} s"

        temp = (
            "absent"
            if sustained.get("peak_temp_c") is None
            else f"{sustained['peak_temp_c']:.1f} °C"
        )
        verdict_style = {
            "stable": "green",
            "degraded": "yellow",
            "failed": "red",
            "inconclusive": "yellow",
            "unexplained": "yellow",
        }.get(sustained["verdict"], "")
        t.add_row(
            f"{sustained['peak_per_s']:.1f}",
            f"{sustained['sustained_per_s']:.1f}",
            f"{sustained['stability']:.3f}",
            secs(sustained.get("time_to_first_throttle_s")),
            secs(sustained.get("time_to_3pct_drop_s")),
            temp,
            "—" if sustained.get("headroom_c") is None else f"{sustained['headroom_c']:.1f} °C",
            Text(str(sustained["verdict"]), style=verdict_style),
            Text(str(sustained.get("cause") or "—")),
        )
        console.print(t)
        full = [w for w in sustained.get("windows_detail", []) if not w.get("partial")]
        rates = [w["rate_per_s"] for w in full]
        if rates:
            console.print(
                f"  throughput per window: {sparkline(rates)}  ({min(rates):.1f}–{max(rates):.1f}/s)"
            )
            marks = window_marks(full)
            if marks.strip():
                console.print(
                    f"  cause per window:      {marks}  (t throttling, i interference, ? unexplained)",
                    markup=False,
                )
        if sustained.get("reason"):
            console.print(f"  sustained: {esc(sustained['reason'])}", soft_wrap=True)
        temps = [w.get("max_temp_c") for w in sustained.get("windows_detail", [])]
        if any(t is not None for t in temps):
            known = [t for t in temps if t is not None]
            console.print(
                f"  temperature per window: {sparkline(known)}  ({min(known):.1f}–{max(known):.1f} °C)"
            )
        if sustained.get("telemetry") == "absent":
            console.print(
                "  [dim]no thermal sensors on this device: temperatures are absent, not estimated[/]"
            )

    memory = results.get("memory")
    if memory:
        console.print(
            f"  memory: worker peak RSS {_mb(memory['peak_rss_bytes'])}, added by loading the model {_mb(memory['rss_added_by_load_bytes'])}"
        )
    print_conditions(results)
    print_scenarios(results)
    print_energy(results.get("sustained") or {})
    for f in predicate.get("findings", []):
        op = f" · operator {f['operator']}" if f.get("operator") else ""
        text = f"[{f.get('kind')}] {f.get('message')}{op}"
        console.print(f"  [red]finding[/] {esc(text)}")
    if report_path:
        console.print(f"  signed report: {report_path}", markup=False, soft_wrap=True)
    hint = status_hint(predicate)
    if hint:
        console.print(f"  [bold]to change this:[/] {esc(hint)}", soft_wrap=True)


def print_conditions(results: dict) -> None:
    """The run under real conditions: beside the declared co-load, and at the edge shapes."""
    coload = results.get("coload")
    if coload:
        loads = ", ".join(achieved_text(e) for e in coload.get("latency") or [])
        console.print(
            f"  co-load ({coload.get('rounds')} rounds, plain and co-load interleaved): "
            f"{esc(loads or ', '.join(d.get('label', '?') for d in coload.get('declared') or []))}",
            soft_wrap=True,
        )
        for entry in coload_shapes(results):
            co = entry["coload"]
            plain, loaded = entry.get("summary") or {}, co.get("summary") or {}

            def pair(key: str, ratio: str, plain=plain, loaded=loaded, co=co) -> str:
                r = co.get(ratio)
                times = f"×{r:.2f} of plain {_ms(plain.get(key))}" if r is not None else "no ratio"
                return f"{_ms(loaded.get(key))} ({times})"

            segments = sum(1 for s in co.get("segments") or [] if s.get("coload"))
            line = (
                f"  co-load {entry.get('shape')}: p50 {pair('p50_ms', 'p50_ratio')}, "
                f"p99 {pair('p99_ms', 'p99_ratio')}; slower in {co.get('rounds_slower')} "
                f"of {segments or coload.get('rounds')} rounds"
            )
            if co.get("cause") not in (None, "none"):
                line += "; " + describe_cause(co["cause"], co.get("interference"))
            console.print(esc(line), soft_wrap=True)
        if (results.get("sustained") or {}).get("coload"):
            loads = ", ".join(achieved_text(e) for e in coload.get("sustained") or [])
            console.print(
                f"  sustained ran beside the co-load{': ' + esc(loads) if loads else ''}",
                soft_wrap=True,
            )
    edges = edge_shapes(results)
    if edges:
        t = Table(title="Edge shapes (each input at the edges of its range)", title_justify="left")
        for col in ("label", "shape", "from", "runs", "p50", "p99", "peak RSS", "RSS added", ""):
            t.add_column(col, justify="left" if col in ("label", "shape", "from", "") else "right")
        for e in edges:
            head = [
                Text(str(e.get("label"))),
                Text(shapes_text(e.get("shapes"))),
                Text(str(e.get("source") or "—")),
            ]
            if e.get("ok"):
                s = e.get("summary") or {}
                t.add_row(
                    *head,
                    str(e.get("runs")),
                    _ms(s.get("p50_ms")),
                    _ms(s.get("p99_ms")),
                    _mb(e.get("peak_rss_bytes")),
                    _mb(e.get("rss_added_by_inference_bytes")),
                    Text("ran", style="green"),
                )
            else:
                t.add_row(*head, "—", "—", "—", "—", "—", Text("FAILED", style="bold red"))
        console.print(t)
        for e in edges:
            if not e.get("ok"):
                console.print(
                    f"  [red]edge shape[/] {esc(e.get('label'))} "
                    f"({esc(shapes_text(e.get('shapes')))}) did not run: {esc(edge_failure(e))}",
                    soft_wrap=True,
                )


def print_scenarios(results: dict) -> None:
    """Batch sweep, thread scaling, server scenario and operator diagnostics, where run."""
    sweep = results.get("batch_sweep")
    if sweep and sweep.get("skipped"):
        console.print(f"  batch sweep: {esc(sweep['skipped'])}", soft_wrap=True)
    elif sweep:
        rows = [
            [
                str(p["batch"]),
                _ms(p.get("p50_ms")),
                _ms(p.get("p90_ms")),
                _num(p.get("items_per_s")),
                _num(p.get("items_per_s_per_core")),
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
            console.print(f"  best batch {b['batch']}: {_num(b['items_per_s'])} items/s")
    scaling = results.get("thread_scaling")
    if scaling:
        rows = [
            [str(p["threads"]), _ms(p["p50_ms"]), _ms(p["p90_ms"]), _num(p["calls_per_s"])]
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
                _num(r["target_rate_per_s"]),
                _num(r["achieved_rate_per_s"]),
                _ms(r["p50_ms"]),
                _ms(r["p90_ms"]),
                _ms(r["p99_ms"]),
                "held" if r["held"] else ("saturated" if r["saturated"] else "p99 over bound"),
            ]
            for r in [server["at_target"], *server["steps"]]
        ]
        print_table(
            f"Server scenario ({server['callers']} callers, p99 bound {_ms(server['p99_bound_ms'])})",
            ["rate /s", "achieved /s", "p50", "p90", "p99", ""],
            rows,
        )
        held = server.get("max_rate_held_per_s")
        console.print(
            f"  highest rate with p99 under the bound: {_num(held) + '/s' if held else 'none found'}"
            f" (capacity {_num(server['capacity_per_s'])}/s)"
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


def print_energy(sustained: dict) -> None:
    """Watts and millijoules per inference of the sustained phase, or why there are none."""
    power = sustained.get("power")
    if not power:
        return
    if not power.get("present"):
        console.print(f"  [dim]power: absent, not estimated ({esc(power.get('reason'))})[/]")
        return
    summary = power.get("summary") or {}
    idle = (power.get("idle") or {}).get("watts")
    parts = [f"{_num(summary.get('power_w_median'))} W ({esc(power.get('total_from'))})"]
    if idle is not None:
        parts.append(f"idle {_num(idle)} W")
    parts.append(f"{_num(summary.get('mj_per_inference_median'))} mJ/inference")
    if summary.get("mj_per_inference_above_idle_median") is not None:
        parts.append(f"{_num(summary['mj_per_inference_above_idle_median'])} mJ above idle")
    console.print("  energy: " + ", ".join(parts))


_CAUSE_MARKS = {"throttling": "t", "interference": "i", "unexplained": "?"}


def window_marks(windows: list[dict]) -> str:
    """One character per window, under its sparkline bar: what slowed it (blank: nothing)."""
    return "".join(_CAUSE_MARKS.get(w.get("cause"), " ") for w in windows)


def describe_cause(cause: str, interference: dict | None) -> str:
    """A cause in words, with the interference evidence measured in the same span."""
    if cause != "interference" or not interference:
        return {
            "unexplained": "unexplained (no throttling or interference measured)",
            "throttling": "throttling",
        }.get(cause, cause)
    parts = []
    if interference.get("runq_wait_share") is not None:
        parts.append(f"run-queue wait {interference['runq_wait_share']:.0%}")
    if interference.get("other_cpus") is not None:
        parts.append(f"other processes {interference['other_cpus']:.2f} CPUs")
    if interference.get("steal_share"):
        parts.append(f"steal {interference['steal_share']:.0%}")
    top = ", ".join(
        f"{p['name']} {p['cpu_share']:.2f}" for p in interference.get("top_processes", [])[:3]
    )
    return "interference: " + "; ".join(parts) + (f" (busiest: {top})" if top else "")


def sparkline(values: list[float]) -> str:
    """Values as a row of block characters, lowest to highest (a curve in one line)."""
    blocks = "▁▂▃▄▅▆▇█"
    lo, hi = min(values), max(values)
    if hi == lo:
        return blocks[-1] * len(values)
    return "".join(blocks[round((v - lo) / (hi - lo) * (len(blocks) - 1))] for v in values)


def print_error(message: str, hint: str | None = None) -> None:
    """One line, with the hint after it."""
    err_console.print(
        f"[red]edgequal: error:[/] {esc(message)}"
        + (f" [dim](hint: {esc(hint)})[/]" if hint else ""),
        soft_wrap=True,
    )


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A plain table (devices list, profiles)."""
    t = Table(title=esc(title), title_justify="left")
    for c in columns:
        t.add_column(esc(c))
    for r in rows:
        t.add_row(*[Text(str(x)) for x in r])
    console.print(t)


def print_note(text: str) -> None:
    """A line for the person on stderr, beside machine-readable output on stdout."""
    err_console.print(text, soft_wrap=True, markup=False)


def print_line(text: str) -> None:
    """A line of normal output, printed as it is (no markup)."""
    console.print(text, soft_wrap=True, markup=False)


@contextmanager
def status(message: str):
    """A spinner while something slow happens (only on a terminal)."""
    if console.is_terminal:
        with console.status(esc(message)):
            yield
    else:
        yield


def write_json(text: str) -> None:
    """Raw JSON to stdout, without rich markup processing."""
    sys.stdout.write(text + "\n")


# ---------------------------------------------------------------------------
# Gate results and comparisons (host/gate.py, host/compare.py). Text that comes from
# reports or files is escaped: a model name like "[red]x" must print as itself.


def print_gate_result(result: dict) -> None:
    """A gate verdict: one row per check (limit, measured, message), fingerprint changes, the line."""
    from rich.markup import escape

    t = Table(
        title=escape(f"Gate {result['policy']} · {result['report']}"),
        title_justify="left",
    )
    for col in ("check", "limit", "measured", "result"):
        t.add_column(col, justify="left" if col in ("check", "result") else "right")
    for c in result["checks"]:
        mark = (
            "[green]pass[/]"
            if c["passed"]
            else ("[yellow]RETRY[/]" if c["retry"] else "[red]FAIL[/]")
        )
        t.add_row(escape(c["name"]), escape(c["limit"]), escape(c["measured"]), mark)
    console.print(t)
    for c in result["checks"]:
        if not c["passed"]:
            console.print(f"  [red]✗[/] {escape(c['message'])}", soft_wrap=True)
    baseline = result.get("baseline")
    if baseline:
        console.print(
            f"  baseline {escape(baseline['report'])} (run {escape(str(baseline['run_id']))})",
            soft_wrap=True,
        )
        changes = baseline.get("fingerprint_changes") or []
        if changes:
            console.print("  changed since the baseline:")
            for ch in changes:
                console.print(
                    f"    {escape(ch['category'])}: {escape(ch['field'])} "
                    f"{escape(str(ch['baseline']))} → {escape(str(ch['candidate']))}",
                    soft_wrap=True,
                )
        else:
            console.print("  fingerprint unchanged since the baseline")
    style = "bold green" if result["passed"] else ("bold yellow" if result["retry"] else "bold red")
    console.print(Text(result["summary"], style=style), soft_wrap=True)


def _figure(v, unit: str) -> str:
    if v is None:
        return "—"
    text = f"{v:.4g}" if isinstance(v, float) else str(v)
    return f"{text} {unit}".rstrip()


def print_comparison(comparison: dict) -> None:
    """Reports side by side: value, change from the first, significance; then fingerprint changes."""
    from rich.markup import escape

    reports = comparison["reports"]
    t = Table(title="Comparison (first report is the reference)", title_justify="left")
    t.add_column("figure")
    for i, r in enumerate(reports):
        mark = "" if r["verified"] else " [red](NOT VERIFIED)[/]"
        t.add_column(f"{chr(65 + i)}: {escape(r['label'])}{mark}", justify="right")
    for row in comparison["rows"]:
        cells = []
        for i, v in enumerate(row["values"]):
            text = escape(_figure(v, row["unit"]))
            d = row["deltas"][i]
            if d is not None:
                worse = (d > 0) if row["better"] == "lower" else (d < 0) if row["better"] else False
                style = "red" if worse and abs(d) >= 0.03 else "green" if abs(d) >= 0.03 else "dim"
                text += f" [{style}]({d:+.1%})[/]"
            sig = row["significance"][i]
            if sig:
                text += f"\n[dim]{escape(sig)}[/]"
            cells.append(text)
        t.add_row(escape(row["figure"]), *cells)
    console.print(t)
    for i, changes in enumerate(comparison["fingerprint_changes"]):
        if i == 0:
            continue
        label = f"{chr(65 + i)} vs A"
        if not changes:
            console.print(f"  {label}: fingerprint unchanged")
            continue
        console.print(f"  {label}: changed")
        for ch in changes:
            console.print(
                f"    {escape(ch['category'])}: {escape(ch['field'])} "
                f"{escape(str(ch['baseline']))} → {escape(str(ch['candidate']))}",
                soft_wrap=True,
            )


_FLEET_STYLE = {
    "pending": "dim",
    "waiting": "cyan",
    "running": "cyan",
    "retrying": "yellow",
    "error": "bold red",
    "skipped": "dim",
    **_STATUS_STYLE,
}


class FleetMatrix:
    """A fleet run's model × device matrix: live on a terminal, one plain line per change in a log.

    ``on_change(record)`` takes a ``fleet.RunRecord`` (model, device, state, attempts,
    error); it may be called from several threads.
    """

    def __init__(self, title: str, models: list[str], devices: list[str], enabled: bool = True):
        import threading

        self.title = title
        self.models = models
        self.devices = devices
        self.cells: dict[tuple[str, str], str] = {}
        self.enabled = enabled and console.is_terminal
        self.log_lines = enabled and not console.is_terminal
        self._lock = threading.Lock()
        self._live: Live | None = None

    def _table(self) -> Table:
        table = Table(title=esc(self.title), padding=(0, 1))
        table.add_column("model \\ device")
        for d in self.devices:
            table.add_column(esc(d))
        for m in self.models:
            table.add_row(
                esc(m), *(Text.from_markup(self.cells.get((m, d), "")) for d in self.devices)
            )
        return table

    def __enter__(self) -> FleetMatrix:
        if self.enabled:
            self._live = Live(self._table(), console=console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.__exit__(*exc)

    def on_change(self, record) -> None:
        """Show one run's new state."""
        state = record.state
        style = _FLEET_STYLE.get(state, "")
        text = f"[{style}]{esc(state)}[/]" if style else esc(state)
        if record.attempts > 1:
            text += f" [dim]#{record.attempts}[/]"
        if getattr(record, "gate_passed", None) is False:
            text += " [bold red]gate[/]"
        with self._lock:
            if self.cells.get((record.model, record.device)) == text:
                return
            self.cells[(record.model, record.device)] = text
            if self._live:
                self._live.update(self._table())
            elif self.log_lines:
                line = f"fleet: {record.model} on {record.device}: {state}"
                if record.attempts > 1:
                    line += f" (attempt {record.attempts})"
                if record.error and state in ("error", "retrying", "skipped"):
                    line += f": {record.error}"
                err_console.print(line, markup=False, highlight=False)
