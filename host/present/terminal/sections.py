"""The sections of the qualification summary (cold load, latency, drift, sustained, memory,
co-load and edge shapes, energy), and the consoles and formatting every module here shares.

Only imported by :mod:`edgequal.host.present.terminal.summary` and :mod:`edgequal.host.present.terminal.scenarios`, so
rich is still imported only when something is shown. Text that is not this package's own
markup is escaped (:func:`esc`) or printed with markup off.
"""

from __future__ import annotations

import os
import sys

from edgequal.contract.preemption import decided_on_clean, decisive_entry, excluded_text
from edgequal.contract.summary import claims_lines
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ...judge.conditions import achieved_text, coload_shapes, edge_failure, edge_shapes, shapes_text
from ..units import duration_text, scaled_text, table_unit

# A terminal gets its own width; logs (CI) get $COLUMNS where set, else 120 columns
# rather than rich's 80. Wide tables fold or stack at that width, never cut a figure.
console = Console(
    stderr=False,
    highlight=False,
    width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 120,
)
err_console = Console(stderr=True, highlight=False)


def esc(value) -> str:
    """``str(value)`` with rich markup escaped, for text that is not this module's."""
    return escape(str(value))


def fmt_ms(value) -> str:
    return duration_text(value)


def fmt_mb(n) -> str:
    return "—" if n is None else f"{n / (1 << 20):.1f} MB"


def fmt_num(v, fmt="{:.4g}") -> str:
    return "—" if v is None else fmt.format(v)


def print_table(
    title: str,
    columns: list[str],
    rows: list[list[str]],
    whole: tuple[str, ...] = (),
    stack: bool = False,
) -> None:
    """A plain table (devices list, profiles). A column named in ``whole`` (file and device
    names) is as wide as its widest cell and never folds, where the screen holds that
    (else its cells wrap between words: ``face-det`` above ``(face_det_v2.onnx)``). Every
    other column is at least as wide as its longest word, so text wraps between words and
    a word, run id or figure is never broken, where the screen holds those widths; where it
    cannot, a table that may ``stack`` prints each row as a block of ``column  value``
    lines instead (every value whole, wrapped between words), and any other folds its
    cells as a last resort."""
    room = console.width - (3 * len(columns) + 1)  # a cell's padding and border take 3
    longest = [
        max([_longest_word(c), *(_longest_word(r[i]) for r in rows)]) for i, c in enumerate(columns)
    ]
    words = [
        max([len(c), *(len(str(r[i])) for r in rows)]) if c in whole else longest[i]
        for i, c in enumerate(columns)
    ]
    if sum(words) > room:  # names whole on one line do not fit: whole words still do
        words, whole = longest, ()
    fits = sum(words) <= room
    if stack and not fits:
        _print_stacked(title, columns, rows)
        return
    widths = _fitted_widths(columns, rows, words, room) if fits else [None] * len(columns)
    t = Table(title=esc(title), title_justify="left")
    for c, width in zip(columns, widths, strict=True):
        if c in whole:
            t.add_column(esc(c), no_wrap=True, min_width=width)
        else:
            t.add_column(esc(c), overflow="fold", width=width)
    for r in rows:
        t.add_row(*[Text(str(x)) for x in r])
    console.print(t)


def _fitted_widths(
    columns: list[str], rows: list[list[str]], words: list[int], room: int
) -> list[int]:
    """Column widths within ``room``: each column's widest cell where all fit; else each at
    its longest word, the rest given a character at a time to the column whose cells wrap
    onto the most lines (the cheapest to finish first among equals), so rows stay short."""
    cells = [[columns[i], *(str(r[i]) for r in rows)] for i in range(len(columns))]
    natural = [max(len(line) for c in col for line in c.splitlines() or [""]) for col in cells]
    if sum(natural) <= room:
        return natural
    widths = list(words)
    for _ in range(room - sum(words)):
        open_ = [i for i in range(len(widths)) if widths[i] < natural[i]]
        if not open_:
            break
        tallest = max(open_, key=lambda i: (_lines(cells[i], widths[i]), -natural[i]))
        widths[tallest] += 1
    return widths


def _lines(cells: list[str], width: int) -> int:
    """The most lines any of ``cells`` takes wrapped between words at ``width``."""
    most = 1
    for cell in cells:
        n = 0
        for text in cell.splitlines() or [""]:
            n += 1
            used = 0
            for word in text.split():
                if used and used + 1 + len(word) > width:
                    n, used = n + 1, len(word)
                else:
                    used += len(word) + (1 if used else 0)
        most = max(most, n)
    return most


def _longest_word(text) -> int:
    return max((len(w) for w in str(text).split()), default=0)


def _print_stacked(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table too wide for the screen, a block per row: ``column  value`` lines."""
    console.print(Text(str(title)))
    for n, r in enumerate(rows, start=1):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for c, x in zip(columns, r, strict=True):
            if str(x):
                grid.add_row(Text(str(c)), Text(str(x)))
        console.print(Text(f"── {n} of {len(rows)}", style="bold"), soft_wrap=True)
        console.print(grid)


def print_cold_load(results: dict) -> None:
    """Cold load: import, session create and first inference over fresh processes."""
    cold = results.get("cold_load")
    if cold:
        t = Table(title=f"Cold load ({len(cold['runs'])} fresh processes)", title_justify="left")
        for col in ("", "median", "min", "max"):
            t.add_column(col, justify="right" if col else "left")
        # The words of benchmark_model / onnxruntime_perf_test / trtexec: Init, First inference.
        for key, label in (
            ("import_ms", "Init: runtime import"),
            ("load_ms", "Init: session create"),
            ("first_decode_ms", "First decode"),
            ("first_preprocess_ms", "First preprocess"),
            ("first_inference_ms", "First inference"),
            ("total_ms", "Total to first result"),
        ):
            s = cold.get(key)
            if s is None:  # a golden set of raw files has the first decode and preprocess
                continue
            t.add_row(label, fmt_ms(s["median"]), fmt_ms(s["min"]), fmt_ms(s["max"]))
        t.caption = f"page cache {'evicted' if cold['page_cache_evicted'] else 'not evicted'} before each load"
        console.print(t)


def print_latency(results: dict) -> None:
    """Warm latency per shape with order-statistic intervals, and what slowed a shape."""
    per_shape = [decisive_entry(e) for e in (results.get("latency") or {}).get("per_shape", [])]
    if per_shape:
        # One unit per table keeps the columns narrow enough for an 80-column CI log.
        unit, scale = table_unit(e["summary"]["p50_ms"] for e in per_shape)

        def v(x):
            return scaled_text(x, scale)

        def ci(pair):
            return "—" if not pair else f"{v(pair[0])}–{v(pair[1])}"

        # Warmup / Inference; count, min, max, avg, std; P50…P99.9: the words users of
        # benchmark_model, onnxruntime_perf_test and trtexec look for.
        t = Table(title=f"Inference (warm, {unit})", title_justify="left")
        for col in (
            "shape",
            "count",
            "min",
            "max",
            "avg",
            "std",
            "P50",
            "P90",
            "P95",
            "P99",
            "P99.9",
        ):
            t.add_column(col, justify="left" if col == "shape" else "right")
        for entry in per_shape:
            s = entry["summary"]
            shape = entry["shape"] if ";" in entry["shape"] else entry["shape"].split("=")[-1]
            steady = "" if entry["warmup"]["steady"] else " [yellow](unsteady)[/]"
            t.add_row(
                esc(shape) + steady,
                str(s["count"]),
                v(s["min_ms"]),
                v(s["max_ms"]),
                v(s["mean_ms"]),
                v(s["sd_ms"]),
                v(s["p50_ms"]),
                v(s["p90_ms"]),
                v(s["p95_ms"]),
                v(s["p99_ms"]),
                v(s["p99_9_ms"]),
            )
        console.print(t)
        for entry in per_shape:
            s, w = entry["summary"], entry["warmup"]
            console.print(
                f"  {esc(entry['shape'])}: Warmup {w.get('runs')} runs in "
                f"{fmt_num(w.get('seconds'), '{:.2f}')} s ({'steady' if w['steady'] else 'not steady'}); "
                f"95 % order-statistic CI P50 {ci(s.get('p50_ci_ms'))}, P99 {ci(s.get('p99_ci_ms'))} "
                f"{unit}; CV {fmt_num(s['cv'], '{:.2f}')}",
                soft_wrap=True,
            )
            for basis, text in claims_lines(entry, lambda ms: f"{v(ms)} {unit}"):
                console.print(
                    f"  {esc(entry['shape'])}: 99 % claims over {basis}: {esc(text)}",
                    soft_wrap=True,
                )
        for entry in per_shape:
            excluded = excluded_text(entry)
            if excluded:
                basis = "the calls that kept the CPU" if decided_on_clean(entry) else "every call"
                measured = (entry.get("as_measured") or entry["summary"]).get("p99_ms")
                line = f"  latency {esc(entry['shape'])} over {basis}: {esc(excluded)}"
                if measured is not None and decided_on_clean(entry):
                    line += f"; p99 as measured {v(measured)} {unit}"
                console.print(line, soft_wrap=True)
            if entry.get("cause") in (None, "none") or (
                decided_on_clean(entry) and entry["warmup"]["steady"]
            ):
                continue
            what = "unsteady" if not entry["warmup"]["steady"] else "heavy tail"
            console.print(
                f"  latency {esc(entry['shape'])} {what}: "
                f"{esc(describe_cause(entry['cause'], entry.get('interference')))}",
                soft_wrap=True,
            )


def print_drift(results: dict) -> None:
    """Output drift per output over the golden set, and decision flips."""
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
                fmt_num(o.get("max_abs"), "{:.3g}"),
                fmt_num(o.get("cosine"), "{:.5f}"),
                "exact" if o.get("exact") else fmt_num(o.get("psnr_db"), "{:.1f}"),
                fmt_num(o.get("top1_agreement"), "{:.0%}"),
                f"{o.get('nan_count', 0)}/{o.get('inf_count', 0)}",
                fmt_num(o.get("smallest_passing_atol"), "{:.2g}"),
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
            from edgequal.contract.summary import decisions_text

            console.print(f"  decisions [{style}]{esc(decisions_text(d))}[/]", soft_wrap=True)
        if drift.get("labelled"):  # docs/accuracy.md
            from ...judge.accuracy import accuracy_of, accuracy_text

            console.print(f"  {esc(accuracy_text(accuracy_of(results)))}", soft_wrap=True)
    check = results.get("optimization_check")
    if check:
        from edgequal.contract.summary import optimization_check_text

        console.print(f"  {esc(optimization_check_text(check))}", soft_wrap=True)
    from edgequal.contract.summary import timed_outputs_text

    timed = timed_outputs_text(results.get("timed_outputs"))
    if timed:
        changed = any(p["mismatches"] for p in results["timed_outputs"].values())
        style = "red" if changed else "green"
        console.print(f"  [{style}]{esc(timed)}[/]", soft_wrap=True)


def print_sustained(results: dict) -> None:
    """Sustained throughput, temperature and their causes, window by window."""
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


def print_memory(results: dict) -> None:
    """Worker peak RSS and what loading the model added."""
    memory = results.get("memory")
    if memory:
        console.print(
            f"  memory: worker peak RSS {fmt_mb(memory['peak_rss_bytes'])}, added by loading the model {fmt_mb(memory['rss_added_by_load_bytes'])}"
        )


def print_contention(results: dict) -> None:
    """Where contention could not be measured (no /proc, as on macOS), say so: never zero."""
    contention = results.get("contention") or {}
    if contention.get("measurable") is False:
        console.print(
            f"  [yellow]contention not measurable[/]: {esc(contention.get('reason') or '')}",
            soft_wrap=True,
        )


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
                times = (
                    f"×{r:.2f} of plain {fmt_ms(plain.get(key))}" if r is not None else "no ratio"
                )
                return f"{fmt_ms(loaded.get(key))} ({times})"

            segments = sum(1 for s in co.get("segments") or [] if s.get("coload"))
            line = (
                f"  co-load {entry.get('shape')}: p50 {pair('p50_ms', 'p50_ratio')}, "
                f"p99 {pair('p99_ms', 'p99_ratio')}; slower in {co.get('rounds_slower')} "
                f"of {segments or coload.get('rounds')} rounds"
            )
            if co.get("cause") not in (None, "none"):
                line += "; " + describe_cause(co["cause"], co.get("interference"), declared=True)
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
                    fmt_ms(s.get("p50_ms")),
                    fmt_ms(s.get("p99_ms")),
                    fmt_mb(e.get("peak_rss_bytes")),
                    fmt_mb(e.get("rss_added_by_inference_bytes")),
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
    parts = [f"{fmt_num(summary.get('power_w_median'))} W ({esc(power.get('total_from'))})"]
    if idle is not None:
        parts.append(f"idle {fmt_num(idle)} W")
    parts.append(f"{fmt_num(summary.get('mj_per_inference_median'))} mJ/inference")
    if summary.get("mj_per_inference_above_idle_median") is not None:
        parts.append(f"{fmt_num(summary['mj_per_inference_above_idle_median'])} mJ above idle")
    console.print("  energy: " + ", ".join(parts))


_CAUSE_MARKS = {"throttling": "t", "interference": "i", "unexplained": "?"}


def window_marks(windows: list[dict]) -> str:
    """One character per window, under its sparkline bar: what slowed it (blank: nothing)."""
    return "".join(_CAUSE_MARKS.get(w.get("cause"), " ") for w in windows)


def describe_cause(cause: str, interference: dict | None, declared: bool = False) -> str:
    """A cause in words, with the interference evidence measured in the same span.

    ``declared``: the span ran beside a declared co-load, whose CPU and the wait behind
    it were expected; only undeclared processes and steal are named (the evidence the
    agent judged that span on).
    """
    if cause != "interference" or not interference:
        return {
            "unexplained": "unexplained (no throttling or interference measured)",
            "throttling": "throttling",
        }.get(cause, cause)
    parts = []
    if interference.get("runq_wait_share") is not None and not declared:
        parts.append(f"run-queue wait {interference['runq_wait_share']:.0%}")
    if interference.get("other_cpus") is not None:
        others = "undeclared processes" if declared else "other processes"
        parts.append(f"{others} {interference['other_cpus']:.2f} CPUs")
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


_REPEAT_FIGURES = (
    ("p50_ms", "p50", "ms"),
    ("p99_ms", "p99", "ms"),
    ("sustained_per_s", "sustained", "/s"),
)


def print_repeats(results: dict) -> None:
    """Repeated runs on one board: each run's figures, then their median, CV and 0.2-trimmed
    mean (``results.repeats``), one line each so no figure is cut."""
    repeats = results.get("repeats")
    if not repeats or not repeats.get("runs"):
        return
    spread = repeats.get("spread") or {}
    console.print(f"  repeated runs ({repeats['n']}, cool-down between):", soft_wrap=True)
    for run in repeats["runs"]:
        f = run.get("figures") or {}
        parts = [
            f"{label} {fmt_num(f[key])}{'/s' if unit == '/s' else ' ms'}"
            for key, label, unit in _REPEAT_FIGURES
            if f.get(key) is not None
        ]
        cool = run.get("cooldown") or {}
        waited = f"; cooled {cool['waited_s']:g} s" if cool.get("waited_s") else ""
        console.print(f"    run {run['run']}: {', '.join(parts)}{waited}", soft_wrap=True)
    for key, label, unit in _REPEAT_FIGURES:
        s = spread.get(key)
        if not s:
            continue
        cv = "—" if s.get("cv") is None else f"{s['cv']:.1%}"
        console.print(
            f"    {label}: median {s['median']:.4g}, CV {cv}, 0.2-trimmed mean "
            f"{s['trimmed_mean']:.4g} ({unit})",
            soft_wrap=True,
        )
