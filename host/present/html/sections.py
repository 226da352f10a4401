"""The report page's sections that are tables: overview and signatures, gate results,
latency and sustained summaries (and the windows with a cause), output drift and
decision flips, cold load and memory, findings, the fingerprint."""

from __future__ import annotations

from collections.abc import Sequence

from edgequal.contract.preemption import decided_on_clean, decisive_entry, excluded_text
from edgequal.contract.summary import CLAIM_LABELS, claim_bases, claim_text

from ...judge.baseline import fingerprint_fields
from ...judge.gate import GateResult
from ...judge.report_file import ReportFile
from ..units import duration_text, scaled_text, table_unit
from .parts import escape, fmt_num, get_path, html_table, status_badge
from .plots import latency_series, sustained_series


def overview(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        p = r.predicate
        runtime = (
            get_path(p, "results", "runtime")
            or get_path(p, "results", "cold_load", "runtime")
            or {}
        )
        sig_class = "pass" if r.verified else "fail"
        rows.append(
            [
                escape(chr(65 + i)),
                escape(r.model_name or r.path.name),
                f'<span class="hash">{escape(p.get("run_id"))}</span>',
                status_badge(p.get("status")),
                escape(p.get("reason")),
                f'<span class="{sig_class} hash">{escape(r.signature)}</span>',
                escape(
                    " ".join(str(x) for x in (runtime.get("runtime"), runtime.get("version")) if x)
                ),
                escape(p.get("finished_at")),
            ]
        )
    out = html_table(
        ["", "model", "run", "status", "reason", "signature", "runtime", "signed at"], rows
    )
    for r in reports:
        if not r.verified:
            out += (
                f'<div class="banner bad">{escape(r.path)}: the signature did not verify. The figures '
                f"below come from an unverified payload: {escape(r.signature)}</div>"
            )
    return out


def gate_section(results: Sequence[GateResult]) -> str:
    out = []
    for g in results:
        cls = "good" if g.passed else ("warn" if g.retry else "bad")
        out.append(f'<div class="banner {cls}">{escape(g.summary)}</div>')
        rows = []
        for c in g.checks:
            mark = (
                '<span class="pass">pass</span>'
                if c.passed
                else '<span class="retry">not judged</span>'
                if not c.judged
                else '<span class="retry">re-run</span>'
                if c.retry
                else '<span class="fail">FAIL</span>'
            )
            rows.append(
                [escape(c.name), escape(c.limit), escape(c.measured), mark, escape(c.message)]
            )
        out.append(f"<h3>Policy {escape(g.policy)} · {escape(g.report)}</h3>")
        out.append(
            html_table(
                ["check", "limit", "measured", "result", "message"], rows, [False, True, True]
            )
        )
        if g.baseline:
            changes = g.baseline.get("fingerprint_changes") or []
            out.append(
                f"<p>Baseline {escape(g.baseline.get('report'))} (run {escape(g.baseline.get('run_id'))}).</p>"
            )
            if changes:
                out.append(
                    html_table(
                        ["changed", "field", "baseline", "this report"],
                        [
                            [
                                escape(c["category"]),
                                escape(c["field"]),
                                escape(c["baseline"]),
                                escape(c["candidate"]),
                            ]
                            for c in changes
                        ],
                    )
                )
            else:
                out.append('<p class="muted">Fingerprint unchanged since the baseline.</p>')
    return "".join(out)


def latency_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    series = latency_series(reports)
    unit, scale = table_unit(
        (decisive_entry(e).get("summary") or {}).get("p50_ms") for _, e, _ in series
    )

    def t(value) -> str:
        return escape(scaled_text(value, scale))

    for label, entry, _ in series:
        excluded = excluded_text(entry)
        entry = decisive_entry(entry)
        s = entry.get("summary") or {}
        warm = entry.get("warmup") or {}

        def ci(key, s=s):
            pair = s.get(key)
            return "—" if not pair else t(pair[0]) + "–" + t(pair[1])

        cause = entry.get("cause")
        interference = entry.get("interference") or {}
        note = ""
        if cause and cause != "none":
            note = escape(cause)
            if excluded:
                basis = "clean calls" if decided_on_clean(entry) else "every call"
                note += escape(f" (figures over {basis}: {excluded})")
            elif interference.get("top_processes"):
                note += ": " + escape(
                    ", ".join(
                        f"{p.get('name')} {p.get('cpu_share') or 0:.2f} CPU"
                        for p in interference["top_processes"][:3]
                    )
                )
        rows.append(
            [
                escape(label),
                fmt_num(s.get("count"), "{}"),
                t(s.get("p50_ms")),
                ci("p50_ci_ms"),
                t(s.get("p90_ms")),
                t(s.get("p95_ms")),
                t(s.get("p99_ms")),
                ci("p99_ci_ms"),
                t(s.get("p99_9_ms")),
                t(s.get("max_ms")),
                fmt_num(s.get("cv"), "{:.3f}"),
                "yes" if warm.get("steady") else escape(f"no: {warm.get('reason')}"),
                note or "—",
            ]
        )
    if not rows:
        return '<p class="muted">No latency measured.</p>'
    return _figures_table(rows, unit) + _claims_table(
        series, lambda ms: f"{scaled_text(ms, scale)} {unit}"
    )


def _claims_table(series, value_text) -> str:
    """The 99 % percentile claims (MLPerf early stopping) per shape, over the clean calls
    where the run tagged them and over every call."""
    rows = []
    for label, entry, _ in series:
        for basis, summary in claim_bases(entry):
            cells = [
                escape(claim_text(summary["claims"][key], value_text))
                if summary["claims"].get(key)
                else "—"
                for key, _ in CLAIM_LABELS
            ]
            rows.append([escape(label), escape(basis), *cells])
    if not rows:
        return ""
    return (
        "<h3>Percentile claims at 99 % confidence</h3>"
        '<p class="muted">MLPerf LoadGen early stopping: with 99 % confidence the true '
        "percentile lies at or below the claim, which stands for the percentile it holds to; "
        "more samples bring it nearer.</p>"
        + html_table(
            ["report shape", "calls", *(label for _, label in CLAIM_LABELS)],
            rows,
            [False, False] + [True] * len(CLAIM_LABELS),
        )
    )


def _figures_table(rows, unit) -> str:
    return html_table(
        [
            "report shape",
            "n",
            f"p50 {unit}",
            "p50 95 % CI",
            "p90",
            "p95",
            "p99",
            "p99 95 % CI",
            "p99.9",
            "max",
            "CV",
            "steady",
            "cause",
        ],
        rows,
        [False] + [True] * 10,
    )


def sustained_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    windows = []
    for i, r in enumerate(reports):
        data = sustained_series(r)
        if data is None:
            continue
        s, series = data
        rows.append(
            [
                escape(chr(65 + i)),
                fmt_num(s.get("duration_s"), "{:g}", "s"),
                fmt_num(s.get("peak_per_s"), "{:.1f}"),
                fmt_num(s.get("sustained_per_s"), "{:.1f}"),
                fmt_num(s.get("stability"), "{:.3f}"),
                fmt_num(s.get("time_to_first_throttle_s"), "{:.0f}", "s")
                if s.get("throttled")
                else "never",
                fmt_num(s.get("peak_temp_c"), "{:.1f}", "°C"),
                fmt_num(s.get("headroom_c"), "{:.1f}", "°C"),
                escape(s.get("verdict")),
                escape(s.get("cause") or "—"),
            ]
        )
        for t0, t1, w, cause in series:
            if cause in ("none", None):
                continue
            inter = w.get("interference") or {}
            top = ", ".join(
                f"{p.get('name')} {p.get('cpu_share') or 0:.2f} CPU"
                for p in inter.get("top_processes") or []
            )
            windows.append(
                [
                    escape(chr(65 + i)),
                    escape(w.get("index")),
                    escape(f"{t0:.1f}–{t1:.1f} s"),
                    escape(cause),
                    escape("; ".join(map(str, w.get("cause_detail") or [])) or "—"),
                    fmt_num(w.get("rate_per_s"), "{:.1f}"),
                    fmt_num(inter.get("cpu_share"), "{:.0%}"),
                    fmt_num(inter.get("runq_wait_share"), "{:.0%}"),
                    fmt_num(inter.get("other_cpu_share"), "{:.0%}"),
                    fmt_num(inter.get("steal_share"), "{:.0%}"),
                    escape(top or "—"),
                ]
            )
    if not rows:
        return '<p class="muted">No sustained phase in these reports.</p>'
    out = html_table(
        [
            "",
            "duration",
            "peak /s",
            "sustained /s",
            "stability",
            "first throttle",
            "peak temp",
            "headroom",
            "verdict",
            "cause",
        ],
        rows,
        [False] + [True] * 7,
    )
    if windows:
        out += "<h3>Windows with a cause</h3>" + html_table(
            [
                "",
                "window",
                "time",
                "cause",
                "evidence",
                "rate /s",
                "worker CPU",
                "run-queue wait",
                "other CPU",
                "steal",
                "top processes",
            ],
            windows,
            [False, True, False, False, False, True, True, True, True, True],
        )
    return out


def drift_section(reports: Sequence[ReportFile]) -> str:
    out = []
    for i, r in enumerate(reports):
        drift = get_path(r.predicate, "results", "drift")
        if not drift:
            continue
        rows = []
        for name, o in (drift.get("outputs") or {}).items():
            tol = o.get("tolerance") or {}
            ok = o.get("passed")
            rows.append(
                [
                    escape(name),
                    escape(tol.get("class")),
                    fmt_num(o.get("max_abs"), "{:.3g}"),
                    fmt_num(o.get("mean_abs"), "{:.3g}"),
                    fmt_num(o.get("max_rel"), "{:.3g}"),
                    fmt_num(o.get("cosine"), "{:.6f}"),
                    "exact" if o.get("exact") else fmt_num(o.get("psnr_db"), "{:.1f}"),
                    fmt_num(o.get("top1_agreement"), "{:.0%}"),
                    escape(f"{o.get('nan_count', 0)}/{o.get('inf_count', 0)}"),
                    fmt_num(o.get("smallest_passing_atol"), "{:.2g}"),
                    '<span class="pass">pass</span>'
                    if ok
                    else f'<span class="fail">FAIL</span> {escape(o.get("reason"))}',
                ]
            )
        out.append(f"<h3>{escape(chr(65 + i))}: {escape(r.label)}</h3>")
        out.append(
            html_table(
                [
                    "output",
                    "tolerance",
                    "max abs",
                    "mean abs",
                    "max rel",
                    "cosine",
                    "PSNR dB",
                    "top-1",
                    "NaN/Inf",
                    "min atol",
                    "result",
                ],
                rows,
                [False, False] + [True] * 8,
            )
        )
        d = drift.get("decisions")
        if d:
            flips = ", ".join(map(str, d.get("flips") or [])) or "none"
            near = ", ".join(map(str, d.get("flips_near_threshold") or [])) or "none"
            cls = "pass" if d.get("passed") else "fail"
            out.append(
                html_table(
                    [
                        "decision rule",
                        "cases",
                        "flips",
                        "flip rate",
                        "near threshold",
                        "flips near threshold",
                        "flipped cases",
                        "flipped near threshold",
                        "result",
                    ],
                    [
                        [
                            escape(d.get("rule")),
                            fmt_num(d.get("total_cases"), "{}"),
                            fmt_num(d.get("flip_count"), "{}"),
                            fmt_num(d.get("flip_rate"), "{:.2%}"),
                            fmt_num(d.get("near_threshold_count"), "{}"),
                            fmt_num(d.get("flips_near_threshold_count"), "{}"),
                            escape(flips),
                            escape(near),
                            f'<span class="{cls}">{"pass" if d.get("passed") else "FAIL"}</span>',
                        ]
                    ],
                    [False, True, True, True, True, True],
                )
            )
        if drift.get("labelled"):  # docs/accuracy.md
            from ...judge.accuracy import accuracy_of, accuracy_text

            score = accuracy_of(r.predicate["results"])
            out.append(f'<p class="accuracy">{escape(accuracy_text(score))}</p>')
        check = get_path(r.predicate, "results", "optimization_check")
        if check:
            from edgequal.contract.summary import optimization_check_text

            out.append(f"<p>{escape(optimization_check_text(check))}</p>")
        from edgequal.contract.summary import timed_outputs_text

        timed_results = get_path(r.predicate, "results", "timed_outputs")
        timed = timed_outputs_text(timed_results)
        if timed:
            changed = any(p["mismatches"] for p in timed_results.values())
            cls = "fail" if changed else "pass"
            out.append(f'<p class="timed-outputs"><span class="{cls}">{escape(timed)}</span></p>')
    return "".join(out) or '<p class="muted">No golden set: drift not measured.</p>'


def cold_memory_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        cold = get_path(r.predicate, "results", "cold_load") or {}
        mem = get_path(r.predicate, "results", "memory") or {}

        def med(key, cold=cold):
            return escape(duration_text(get_path(cold, key, "median")))

        def mb(key, mem=mem):
            v = mem.get(key)
            return fmt_num(None if v is None else v / (1 << 20), "{:.1f}")

        rows.append(
            [
                escape(chr(65 + i)),
                fmt_num(len(cold.get("runs") or []), "{}"),
                med("import_ms"),
                med("load_ms"),
                med("first_inference_ms"),
                med("total_ms"),
                med("process_to_result_ms"),
                fmt_num(cold.get("page_cache_evicted")),
                mb("peak_rss_bytes"),
                mb("rss_added_by_load_bytes"),
            ]
        )
    return html_table(
        [
            "",
            "cold runs",
            "runtime import",
            "session create",
            "first inference",
            "total to first result",
            "process start to result",
            "page cache evicted",
            "peak RSS MB",
            "RSS added by load MB",
        ],
        rows,
        [False] + [True] * 9,
    )


def findings_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        for f in r.predicate.get("findings") or []:
            rows.append(
                [
                    escape(chr(65 + i)),
                    escape(f.get("kind")),
                    escape(f.get("phase")),
                    escape(f.get("cause")),
                    escape(f.get("message")),
                    escape(f.get("operator") or f.get("input")),
                    escape(f.get("hint")),
                ]
            )
    if not rows:
        return '<p class="muted">No findings.</p>'
    return html_table(["", "kind", "phase", "cause", "message", "operator / input", "hint"], rows)


def fingerprint_section(reports: Sequence[ReportFile]) -> str:
    fields = [fingerprint_fields(r.predicate, r.subjects) for r in reports]
    keys = sorted(set().union(*fields)) if fields else []
    rows = []
    for key in keys:
        values = [f.get(key) for f in fields]
        differs = len(reports) > 1 and any(v != values[0] for v in values)
        cells = [f'<span class="diff">{escape(v)}</span>' if differs else escape(v) for v in values]
        rows.append([escape(key)] + cells)
    return html_table(["field"] + [f"{chr(65 + i)}" for i in range(len(reports))], rows)
