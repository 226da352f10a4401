"""Everything the host shows a person. With :mod:`.sections` and
:mod:`.scenarios` (the summary's sections, imported only from here), the only
modules that import rich; the rest of the host imports its names from this one.

Only these modules' own markup is markup: every name, path, message and hint
that comes from elsewhere is escaped (:func:`esc`) or printed with markup off,
so ``models[v2]/m.onnx`` or ``pip install 'edgequal[litert]'`` reach the screen
as they are.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.live import Live
from rich.table import Table
from rich.text import Text

from ...errors import redact
from ..signature import signature_text
from ..units import figure_text
from .kernel_paths import print_kernel_paths
from .pipeline import print_pipeline
from .runtime_envs import print_runtime_envs
from .scenarios import print_scenarios
from .sections import (
    console,
    err_console,
    esc,
    print_cold_load,
    print_conditions,
    print_contention,
    print_drift,
    print_energy,
    print_latency,
    print_memory,
    print_repeats,
    print_sustained,
)

# Re-exported: the cli modules and the tests import these from here.
from .sections import describe_cause as describe_cause
from .sections import print_table as print_table
from .sections import sparkline as sparkline
from .sections import window_marks as window_marks

if TYPE_CHECKING:
    from edgequal.contract.plan import Plan

PHASES = ("upload", "fingerprint", "cold_load", "latency", "sustained", "signing")
# Optional phases: a row appears when the run starts one, in this place among PHASES.
SCENARIO_PHASES = ("pipeline", "operators", "batch_sweep", "thread_scaling", "server")
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
    "failed:drift": "outputs moved beyond tolerance: if that drift is acceptable, make the "
    "golden set again with a tolerance for the output, edgequal golden make ... --tolerance "
    "OUTPUT=ATOL,RTOL or OUTPUT=fp16|int8 ('min atol' above is the smallest that passes); "
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
    "incomplete:cancelled": "the run was cancelled (Ctrl-C or runs cancel), nothing failed: "
    "re-run it for its figures",
    "incomplete": "the run did not finish: fix the cause above and re-run; a report the "
    "device kept can be fetched by its run id",
}


def where_it_stopped(finding: dict) -> str:
    """``cold_load (load)``: the phase a finding ended, and the worker's step in it."""
    step = finding.get("worker_phase")
    return f"{finding.get('phase')}" + (f" ({step})" if step else "")


def finding_text(finding: dict) -> str:
    """One finding in a line: kind, message, operator; for a worker that died, the runtime
    and version it ran and where it stopped."""
    text = f"[{finding.get('kind')}] {finding.get('message')}"
    if finding.get("operator"):
        text += f" · operator {finding['operator']}"
    if finding.get("kind") in ("worker_failure", "model_rejected") and finding.get("runtime"):
        version = finding.get("runtime_version")
        text += f" · {finding['runtime']}" + (f" {version}" if version else "")
        text += f" · in {where_it_stopped(finding)}"
    return text


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
    if predicate.get("reason") == "cancelled":
        causes.insert(0, "cancelled")
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


def plan_line(plan: Plan, *, boards: bool = False) -> str:
    """The effective plan in one line: preset, phases with their lengths, threads, profile.

    ``plan: quick (cold load ×3, latency 3 s, no sustained phase) · threads 2 [profile] ·
    profile generic/linux-x86_64``. A value the preset did not set is marked with where
    it came from (``[flag]``, ``[profile]``); unmarked phase lengths are the preset's.
    ``boards``: the plan before each board's profile is applied (a fleet's), which says so.
    """

    from edgequal.contract.plan import duration_text

    def origin(key: str) -> str:
        source = plan.sources.get(key)
        return f" [{source}]" if source in ("flag", "profile") else ""

    phases = [f"cold load ×{plan.cold_runs}{origin('cold_runs')}"]
    if origin("warmup_min_s"):  # the preset's warm-up goes unsaid, as it always did
        phases.append(f"warm-up {duration_text(plan.warmup_min_s)}{origin('warmup_min_s')}")
    latency = f"latency {duration_text(plan.latency_min_s)}{origin('latency_min_s')}"
    if plan.preemption_tags:
        # The bound a run short of clean calls may extend its timed loop to.
        from edgequal.contract.plan import loop_limit_s

        bound = loop_limit_s(plan.latency_min_s, plan.latency_max_s, plan.latency_max_extension)
        which = "latency_max_s" if plan.latency_max_s else "latency_max_extension"
        latency += f" (to {duration_text(bound)} for clean calls{origin(which)})"
    phases.append(latency)
    if plan.sustain_s:
        text = f"sustained {duration_text(plan.sustain_s)}{origin('sustain_s')}"
        if plan.sustain_extend_to_s and plan.sustain_extend_to_s > plan.sustain_s:
            text += f" (to {duration_text(plan.sustain_extend_to_s)} while heating)"
        text += f" in {duration_text(plan.sustain_window_s)} windows{origin('window_s')}"
        phases.append(text)
    else:
        phases.append(f"no sustained phase{origin('sustain_s')}")
    if plan.batch_sizes:
        phases.append(f"batch sweep {plan.batch_sizes[0]}–{plan.batch_sizes[-1]}")
    phases += [
        name
        for name, on in (
            ("thread scaling", plan.thread_scaling),
            ("server scenario", plan.server),
            ("operator profile", plan.operator_profile),
        )
        if on
    ]
    if plan.coload:
        phases.append(f"co-load ×{len(plan.coload)}")
    if plan.edge_shapes:
        phases.append(f"edge shapes ×{len(plan.edge_shapes)}")
    head = f"plan: {plan.preset} ({', '.join(phases)})"
    if boards:
        return f"{head} · threads and trip from each board's profile"
    threads = f"threads {plan.threads}{origin('threads')}" if plan.threads else "threads default"
    profile = f"profile {plan.profile}" if plan.profile else "no device profile"
    return f"{head} · {threads} · {profile}"


def print_plan(plan: Plan, *, stderr: bool = False, boards: bool = False) -> None:
    """The effective plan's line (:func:`plan_line`), before a run starts; on stderr
    beside machine-readable output."""
    (print_note if stderr else print_line)(plan_line(plan, boards=boards))


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


def print_summary(
    predicate: dict,
    device: str,
    report_path: str | None = None,
    reproduce: tuple[str, ...] = (),
) -> None:
    """The one screen: status, load, latency with intervals, drift and flips, memory, findings;
    ``reproduce``: lines under the report's path (the command that made it, the one that
    repeats it: host/devices/reproduce.py)."""
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
    findings = predicate.get("findings", [])
    if runtime:
        accel = ", ".join(runtime.get("providers") or runtime.get("delegates") or []) or "default"
        console.print(
            f"  runtime {runtime['runtime']} {runtime['version']} · {accel} · threads {runtime.get('threads') or 'default'}",
            markup=False,
        )
    elif any(f.get("runtime") for f in findings):
        # The worker died before it could describe its runtime; the finding names it.
        f = next(f for f in findings if f.get("runtime"))
        console.print(
            f"  runtime {f['runtime']} {f.get('runtime_version') or '(version not known)'} "
            f"· stopped in {where_it_stopped(f)}",
            markup=False,
        )
    signature = signature_text(results)
    if signature:
        console.print(f"  {signature}", markup=False, soft_wrap=True)
    print_cold_load(results)
    print_latency(results)
    print_repeats(results)
    print_pipeline(results)
    print_drift(results)
    print_kernel_paths(results)
    print_sustained(results)
    print_memory(results)
    print_contention(results)
    print_conditions(results)
    print_runtime_envs(results)
    print_scenarios(results)
    print_energy(results.get("sustained") or {})
    for f in findings:
        console.print(f"  [red]finding[/] {esc(finding_text(f))}", soft_wrap=True)
    if report_path:
        console.print(f"  signed report: {report_path}", markup=False, soft_wrap=True)
    for line in reproduce:
        console.print(f"  {redact(line)}", markup=False, soft_wrap=True)
    hint = status_hint(predicate)
    if hint:
        console.print(f"  [bold]to change this:[/] {esc(hint)}", soft_wrap=True)


def one_line(text: str) -> str:
    """``text`` with every character that could end a line or hide text (controls, line and
    paragraph separators, format characters, surrogates, unassigned code points) written
    as an escape: a hostile file's key or name never breaks the one error line."""
    import unicodedata

    out = []
    for c in text:
        if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            code = ord(c)
            out.append(
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
        else:
            out.append(c)
    return "".join(out)


def print_error(message: str, hint: str | None = None) -> None:
    """One line, with the hint after it (credentials in it redacted, and anything that would
    break the line escaped)."""
    message, hint = one_line(redact(message)), one_line(redact(hint)) if hint else hint
    err_console.print(
        f"[red]edgequal: error:[/] {esc(message)}"
        + (f" [dim](hint: {esc(hint)})[/]" if hint else ""),
        soft_wrap=True,
    )


def print_note(text: str) -> None:
    """A line for the person on stderr, beside machine-readable output on stdout."""
    err_console.print(redact(text), soft_wrap=True, markup=False)


def print_line(text: str) -> None:
    """A line of normal output, printed as it is (no markup; credentials redacted)."""
    console.print(redact(text), soft_wrap=True, markup=False)


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
# Gate results and comparisons (host/judge/gate.py, host/judge/compare.py). Text that comes from
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
        judged = c.get("judged", True)
        mark = (
            "[green]pass[/]"
            if c["passed"]
            else "[yellow]not judged[/]"
            if not judged
            else ("[yellow]RETRY[/]" if c["retry"] else "[red]FAIL[/]")
        )
        t.add_row(escape(c["name"]), escape(c["limit"]), escape(c["measured"]), mark)
    console.print(t)
    for c in result["checks"]:
        if not c["passed"]:
            sign = "[red]✗[/]" if c.get("judged", True) else "[yellow]–[/]"
            console.print(f"  {sign} {escape(c['message'])}", soft_wrap=True)
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
    if result.get("policy_commitment"):
        console.print(f"  policy {escape(result['policy_commitment'])}", soft_wrap=True)
    style = "bold green" if result["passed"] else ("bold yellow" if result["retry"] else "bold red")
    console.print(Text(result["summary"], style=style), soft_wrap=True)


def _figure(v, unit: str) -> str:
    return figure_text(v, unit)


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
            verdict = (row.get("verdicts") or [None] * (i + 1))[i]
            if verdict and verdict["verdict"] != "UNKNOWN" or (verdict and row["significance"][i]):
                style = {"DIFFERENT": "bold", "SAME": "dim"}.get(verdict["verdict"], "yellow")
                text += f" [{style}]{verdict['verdict']}[/]"
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
        self._lines: dict[tuple[str, str], str] = {}
        self.enabled = enabled and console.is_terminal
        self.log_lines = enabled and not console.is_terminal
        self._lock = threading.Lock()
        self._live: Live | None = None

    def _table(self) -> Table:
        table = Table(title=esc(self.title), padding=(0, 1))
        table.add_column("model \\ device", overflow="fold")
        for d in self.devices:
            table.add_column(esc(d), overflow="fold")
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
        line = fleet_log_line(record)
        with self._lock:
            key = (record.model, record.device)
            if self.cells.get(key) == text and self._lines.get(key) == line:
                return
            self.cells[key] = text
            if self._live:
                self._live.update(self._table())
            elif self.log_lines and self._lines.get(key) != line:
                self._lines[key] = line
                err_console.print(line, markup=False, highlight=False)


def fleet_log_line(record) -> str:
    """A run's state as a log line: what it waits for, why it failed or is inconclusive."""
    state = record.state
    line = f"fleet: {record.model} on {record.device}: {state}"
    if record.attempts > 1:
        line += f" (attempt {record.attempts})"
    if record.error and state in ("error", "retrying", "skipped"):
        line += f": {record.error}"
    elif state == "waiting" and getattr(record, "waiting_for", None):
        line += f" for {record.waiting_for}"
    elif getattr(record, "reason", None) and state not in ("passed", "running", "pending"):
        line += f": {record.reason}"
    return line
