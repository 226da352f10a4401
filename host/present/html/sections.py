"""The report page's sections that are tables: overview and signatures, gate results,
latency and sustained summaries (and the windows with a cause), output drift and
decision flips, cold load and memory, findings, the fingerprint."""

from __future__ import annotations

from collections.abc import Sequence

from edgequal.contract.preemption import decided_on_clean, decisive_entry, excluded_text

from ...judge.baseline import fingerprint_fields
from ...judge.gate import GateResult
from ...judge.report_file import ReportFile
from ..units import duration_text, scaled_text, table_unit
from .parts import _e, _get, _num, _status, _table
from .plots import _latency_series, _sustained_series


def _overview(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        p = r.predicate
        runtime = _get(p, "results", "runtime") or _get(p, "results", "cold_load", "runtime") or {}
        sig_class = "pass" if r.verified else "fail"
        rows.append(
            [
                _e(chr(65 + i)),
                _e(r.model_name or r.path.name),
                f'<span class="hash">{_e(p.get("run_id"))}</span>',
                _status(p.get("status")),
                _e(p.get("reason")),
                f'<span class="{sig_class} hash">{_e(r.signature)}</span>',
                _e(" ".join(str(x) for x in (runtime.get("runtime"), runtime.get("version")) if x)),
                _e(p.get("finished_at")),
            ]
        )
    out = _table(
        ["", "model", "run", "status", "reason", "signature", "runtime", "signed at"], rows
    )
    for r in reports:
        if not r.verified:
            out += (
                f'<div class="banner bad">{_e(r.path)}: the signature did not verify. The figures '
                f"below come from an unverified payload: {_e(r.signature)}</div>"
            )
    return out


def _gate_section(results: Sequence[GateResult]) -> str:
    out = []
    for g in results:
        cls = "good" if g.passed else ("warn" if g.retry else "bad")
        out.append(f'<div class="banner {cls}">{_e(g.summary)}</div>')
        rows = []
        for c in g.checks:
            mark = (
                '<span class="pass">pass</span>'
                if c.passed
                else '<span class="retry">re-run</span>'
                if c.retry
                else '<span class="fail">FAIL</span>'
            )
            rows.append([_e(c.name), _e(c.limit), _e(c.measured), mark, _e(c.message)])
        out.append(f"<h3>Policy {_e(g.policy)} · {_e(g.report)}</h3>")
        out.append(
            _table(["check", "limit", "measured", "result", "message"], rows, [False, True, True])
        )
        if g.baseline:
            changes = g.baseline.get("fingerprint_changes") or []
            out.append(
                f"<p>Baseline {_e(g.baseline.get('report'))} (run {_e(g.baseline.get('run_id'))}).</p>"
            )
            if changes:
                out.append(
                    _table(
                        ["changed", "field", "baseline", "this report"],
                        [
                            [
                                _e(c["category"]),
                                _e(c["field"]),
                                _e(c["baseline"]),
                                _e(c["candidate"]),
                            ]
                            for c in changes
                        ],
                    )
                )
            else:
                out.append('<p class="muted">Fingerprint unchanged since the baseline.</p>')
    return "".join(out)


def _latency_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    series = _latency_series(reports)
    unit, scale = table_unit(
        (decisive_entry(e).get("summary") or {}).get("p50_ms") for _, e, _ in series
    )

    def t(value) -> str:
        return _e(scaled_text(value, scale))

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
            note = _e(cause)
            if excluded:
                basis = "clean calls" if decided_on_clean(entry) else "every call"
                note += _e(f" (figures over {basis}: {excluded})")
            elif interference.get("top_processes"):
                note += ": " + _e(
                    ", ".join(
                        f"{p.get('name')} {p.get('cpu_share') or 0:.2f} CPU"
                        for p in interference["top_processes"][:3]
                    )
                )
        rows.append(
            [
                _e(label),
                _num(s.get("count"), "{}"),
                t(s.get("p50_ms")),
                ci("p50_ci_ms"),
                t(s.get("p90_ms")),
                t(s.get("p95_ms")),
                t(s.get("p99_ms")),
                ci("p99_ci_ms"),
                t(s.get("p99_9_ms")),
                t(s.get("max_ms")),
                _num(s.get("cv"), "{:.3f}"),
                "yes" if warm.get("steady") else _e(f"no: {warm.get('reason')}"),
                note or "—",
            ]
        )
    if not rows:
        return '<p class="muted">No latency measured.</p>'
    return _table(
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


def _sustained_table(reports: Sequence[ReportFile]) -> str:
    rows = []
    windows = []
    for i, r in enumerate(reports):
        data = _sustained_series(r)
        if data is None:
            continue
        s, series = data
        rows.append(
            [
                _e(chr(65 + i)),
                _num(s.get("duration_s"), "{:g}", "s"),
                _num(s.get("peak_per_s"), "{:.1f}"),
                _num(s.get("sustained_per_s"), "{:.1f}"),
                _num(s.get("stability"), "{:.3f}"),
                _num(s.get("time_to_first_throttle_s"), "{:.0f}", "s")
                if s.get("throttled")
                else "never",
                _num(s.get("peak_temp_c"), "{:.1f}", "°C"),
                _num(s.get("headroom_c"), "{:.1f}", "°C"),
                _e(s.get("verdict")),
                _e(s.get("cause") or "—"),
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
                    _e(chr(65 + i)),
                    _e(w.get("index")),
                    _e(f"{t0:.1f}–{t1:.1f} s"),
                    _e(cause),
                    _e("; ".join(map(str, w.get("cause_detail") or [])) or "—"),
                    _num(w.get("rate_per_s"), "{:.1f}"),
                    _num(inter.get("cpu_share"), "{:.0%}"),
                    _num(inter.get("runq_wait_share"), "{:.0%}"),
                    _num(inter.get("other_cpu_share"), "{:.0%}"),
                    _num(inter.get("steal_share"), "{:.0%}"),
                    _e(top or "—"),
                ]
            )
    if not rows:
        return '<p class="muted">No sustained phase in these reports.</p>'
    out = _table(
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
        out += "<h3>Windows with a cause</h3>" + _table(
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


def _drift_section(reports: Sequence[ReportFile]) -> str:
    out = []
    for i, r in enumerate(reports):
        drift = _get(r.predicate, "results", "drift")
        if not drift:
            continue
        rows = []
        for name, o in (drift.get("outputs") or {}).items():
            tol = o.get("tolerance") or {}
            ok = o.get("passed")
            rows.append(
                [
                    _e(name),
                    _e(tol.get("class")),
                    _num(o.get("max_abs"), "{:.3g}"),
                    _num(o.get("mean_abs"), "{:.3g}"),
                    _num(o.get("max_rel"), "{:.3g}"),
                    _num(o.get("cosine"), "{:.6f}"),
                    "exact" if o.get("exact") else _num(o.get("psnr_db"), "{:.1f}"),
                    _num(o.get("top1_agreement"), "{:.0%}"),
                    _e(f"{o.get('nan_count', 0)}/{o.get('inf_count', 0)}"),
                    _num(o.get("smallest_passing_atol"), "{:.2g}"),
                    '<span class="pass">pass</span>'
                    if ok
                    else f'<span class="fail">FAIL</span> {_e(o.get("reason"))}',
                ]
            )
        out.append(f"<h3>{_e(chr(65 + i))}: {_e(r.label)}</h3>")
        out.append(
            _table(
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
                _table(
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
                            _e(d.get("rule")),
                            _num(d.get("total_cases"), "{}"),
                            _num(d.get("flip_count"), "{}"),
                            _num(d.get("flip_rate"), "{:.2%}"),
                            _num(d.get("near_threshold_count"), "{}"),
                            _num(d.get("flips_near_threshold_count"), "{}"),
                            _e(flips),
                            _e(near),
                            f'<span class="{cls}">{"pass" if d.get("passed") else "FAIL"}</span>',
                        ]
                    ],
                    [False, True, True, True, True, True],
                )
            )
    return "".join(out) or '<p class="muted">No golden set: drift not measured.</p>'


def _cold_memory_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        cold = _get(r.predicate, "results", "cold_load") or {}
        mem = _get(r.predicate, "results", "memory") or {}

        def med(key, cold=cold):
            return _e(duration_text(_get(cold, key, "median")))

        def mb(key, mem=mem):
            v = mem.get(key)
            return _num(None if v is None else v / (1 << 20), "{:.1f}")

        rows.append(
            [
                _e(chr(65 + i)),
                _num(len(cold.get("runs") or []), "{}"),
                med("import_ms"),
                med("load_ms"),
                med("first_inference_ms"),
                med("total_ms"),
                med("process_to_result_ms"),
                _num(cold.get("page_cache_evicted")),
                mb("peak_rss_bytes"),
                mb("rss_added_by_load_bytes"),
            ]
        )
    return _table(
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


def _findings_section(reports: Sequence[ReportFile]) -> str:
    rows = []
    for i, r in enumerate(reports):
        for f in r.predicate.get("findings") or []:
            rows.append(
                [
                    _e(chr(65 + i)),
                    _e(f.get("kind")),
                    _e(f.get("phase")),
                    _e(f.get("cause")),
                    _e(f.get("message")),
                    _e(f.get("operator") or f.get("input")),
                    _e(f.get("hint")),
                ]
            )
    if not rows:
        return '<p class="muted">No findings.</p>'
    return _table(["", "kind", "phase", "cause", "message", "operator / input", "hint"], rows)


def _fingerprint_section(reports: Sequence[ReportFile]) -> str:
    fields = [fingerprint_fields(r.predicate, r.subjects) for r in reports]
    keys = sorted(set().union(*fields)) if fields else []
    rows = []
    for key in keys:
        values = [f.get(key) for f in fields]
        differs = len(reports) > 1 and any(v != values[0] for v in values)
        cells = [f'<span class="diff">{_e(v)}</span>' if differs else _e(v) for v in values]
        rows.append([_e(key)] + cells)
    return _table(["field"] + [f"{chr(65 + i)}" for i in range(len(reports))], rows)
