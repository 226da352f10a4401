"""A plain-text summary of a measurement, for the agent's terminal (the host renders with rich)."""

from __future__ import annotations

from .preemption import decided_on_clean, decisive_summary, excluded_text


def _ms(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f} ms" if value < 100 else f"{value:.1f} ms"


def _mb(value) -> str:
    return "n/a" if value is None else f"{value / (1 << 20):.1f} MB"


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def decisions_text(decisions: dict, limit: int = 8) -> str:
    """The decision flips in one sentence, naming the cases that flipped and, apart, those
    near the threshold that did: ``1 of 12 cases flipped (threshold:score>0.5): case04;
    none of the 3 cases near the threshold flipped``."""

    def names(cases: list) -> str:
        shown = ", ".join(str(c) for c in cases[:limit])
        return shown + (f" and {len(cases) - limit} more" if len(cases) > limit else "")

    total = int(decisions.get("total_cases") or 0)
    flips = list(decisions.get("flips") or [])
    count = int(decisions.get("flip_count", len(flips)))
    rule = decisions.get("rule")
    text = (
        f"{count} of {_cases(total)} flipped ({rule})" + (f": {names(flips)}" if flips else "")
        if count
        else f"no decision flipped in {_cases(total)} ({rule})"
    )
    near = int(decisions.get("near_threshold_count") or 0)
    near_flips = list(decisions.get("flips_near_threshold") or [])
    near_count = int(decisions.get("flips_near_threshold_count", len(near_flips)))
    if not near:
        return text + "; no case was near the threshold"
    where = f"the {_cases(near)} near the threshold" if near > 1 else "the case near the threshold"
    if not near_count:
        return (
            text
            + f"; {'none of ' if near > 1 else ''}{where} {'flipped' if near > 1 else 'did not flip'}"
        )
    return text + f"; {near_count} of {where} flipped: {names(near_flips)}"


CLAIM_LABELS = (("p90", "P90"), ("p95", "P95"), ("p99", "P99"), ("p99_9", "P99.9"))


def claim_text(claim: dict, value_text=None) -> str:
    """One 99 % percentile claim: ``<= 0.945 ms (holds to p92.3; p91.1 from 4,033
    samples)``, or ``needs 8,403 samples`` where the claim would be the maximum.

    ``value_text`` turns a value in ms into text (default: ``_ms``).
    """
    if claim.get("rank") is None:
        return f"needs {claim['needs']:,} samples"
    text = f"<= {(value_text or _ms)(claim['value_ms'])} (holds to p{claim['claimed_percent']:.1f}"
    if claim.get("tighter_needs"):
        nearer = claim["percent"] + (claim["claimed_percent"] - claim["percent"]) / 2
        text += f"; p{nearer:.1f} from {claim['tighter_needs']:,} samples"
    return text + ")"


def claims_text(claims: dict | None, value_text=None) -> str | None:
    """The 99 % percentile claims in one sentence (``P90 <= 0.945 ms (…), …, P99.9 needs
    8,403 samples``); None without claims (a report from before they were made)."""
    if not claims:
        return None
    parts = [
        f"{label} {claim_text(claims[key], value_text)}"
        for key, label in CLAIM_LABELS
        if claims.get(key)
    ]
    return ", ".join(parts) or None


def claim_bases(entry: dict) -> list[tuple[str, dict]]:
    """``(basis, summary)`` of a latency entry whose claims are shown: the clean calls'
    where the run tagged them, then every call's (raw or :func:`decisive_entry` form)."""
    out = []
    if entry.get("clean"):
        out.append(("clean calls", entry["clean"]))
    out.append(("all calls", entry.get("as_measured") or entry.get("summary") or {}))
    return [(basis, s) for basis, s in out if s.get("claims")]


def claims_lines(entry: dict, value_text=None) -> list[tuple[str, str]]:
    """``(basis, claims_text)`` for each of :func:`claim_bases`."""
    return [(basis, claims_text(s["claims"], value_text)) for basis, s in claim_bases(entry)]


def format_summary(measurement: dict) -> str:
    """The lines a person reads first: status, load, latency, drift, memory, findings."""
    results = measurement.get("results", {})
    lines = [
        f"status: {measurement['status']}"
        + (f" ({measurement['reason']})" if measurement.get("reason") else "")
    ]
    runtime = results.get("runtime") or (results.get("cold_load") or {}).get("runtime")
    if runtime:
        extra = runtime.get("providers") or runtime.get("delegates") or []
        lines.append(
            f"runtime: {runtime['runtime']} {runtime['version']} {' '.join(extra)} threads={runtime.get('threads') or 'default'}"
        )
    cold = results.get("cold_load")
    if cold:
        lines.append(
            f"cold load (median of {len(cold['runs'])}): import {_ms(cold['import_ms']['median'])}, "
            f"load {_ms(cold['load_ms']['median'])}, first inference {_ms(cold['first_inference_ms']['median'])}, "
            f"total {_ms(cold['total_ms']['median'])}; page cache evicted: {'yes' if cold['page_cache_evicted'] else 'no'}"
        )
    for entry in (results.get("latency") or {}).get("per_shape", []):
        s = decisive_summary(entry)
        ci = s.get("p50_ci_ms")
        ci_text = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        steady = "" if entry["warmup"]["steady"] else " (not steady)"
        lines.append(
            f"latency {entry['shape']}: n={s['count']} p50 {_ms(s['p50_ms'])}{ci_text} p90 {_ms(s['p90_ms'])} "
            f"p99 {_ms(s['p99_ms'])} max {_ms(s['max_ms'])} cv {s['cv']:.3f}{steady}"
        )
        excluded = excluded_text(entry)
        if excluded:
            basis = "the calls that kept the CPU" if decided_on_clean(entry) else "every call"
            lines.append(
                f"  figures over {basis}: {excluded}; "
                f"p99 as measured {_ms(entry['summary']['p99_ms'])}"
            )
        for basis, text in claims_lines(entry):
            lines.append(f"  99 % claims over {basis}: {text}")
    drift = results.get("drift")
    if drift:
        for name, out in drift.get("outputs", {}).items():
            lines.append(
                f"drift {name}: max abs {out.get('max_abs')} cosine {out.get('min_cosine', out.get('cosine'))} "
                f"{'pass' if out.get('passed') else 'FAIL'}"
            )
        decisions = drift.get("decisions")
        if decisions:
            lines.append(f"decisions: {decisions_text(decisions)}")
    if results.get("optimization_check"):
        lines.append(optimization_check_text(results["optimization_check"]))
    timed = timed_outputs_text(results.get("timed_outputs"))
    if timed:
        lines.append(timed)
    memory = results.get("memory")
    if memory:
        lines.append(
            f"memory: peak RSS {_mb(memory['peak_rss_bytes'])}, added by load {_mb(memory['rss_added_by_load_bytes'])}"
        )
    sustained = results.get("sustained")
    if sustained and "peak_per_s" in sustained:
        lines.append(
            f"sustained {sustained['duration_s']:g} s: peak {sustained['peak_per_s']:.1f}/s, sustained "
            f"{sustained['sustained_per_s']:.1f}/s, stability {sustained['stability']:.3f}, verdict {sustained['verdict']}"
        )
    for f in measurement.get("findings", []):
        op = f" (operator {f['operator']})" if f.get("operator") else ""
        lines.append(f"finding [{f.get('kind')}] {f.get('message')}{op}")
    return "\n".join(lines)


def timed_outputs_text(timed: dict | None) -> str | None:
    """One line for the outputs checked during the timed phases (``results.timed_outputs``):
    ``outputs checked during timing: 412 of 41,200 calls, all matched``, or the first
    change, naming the phase, the call, the window and the temperature; None when unchecked."""
    if not timed:
        return None
    checked = sum(p["checked"] for p in timed.values())
    calls = sum(p["calls"] for p in timed.values())
    head = f"outputs checked during timing: {checked:,} of {calls:,} calls"
    changed = [(name, p) for name, p in timed.items() if p["mismatches"]]
    if not changed:
        return f"{head}, all matched"
    parts = []
    for name, p in changed:
        first = p["mismatched"][0]
        where = f"first at call {first['call']:,} ({first['t_s']:g} s"
        if first.get("window") is not None:
            where += f", window {first['window']}"
        if first.get("temp_c") is not None:
            where += f", {first['temp_c']:.1f} °C"
        elif not first.get("temp_sensor", True):
            where += ", no temperature sensor"
        output = (first["outputs"] or [{}])[0].get("output")
        parts.append(
            f"{name} {p['mismatches']} of {p['checked']:,} out of tolerance, {where}), "
            f"output {output}"
        )
    return f"{head}, CHANGED while timed: " + "; ".join(parts)


_CHECK_CAUSES = {
    "optimized_kernels": "the optimised kernels cause the drift",
    "not_optimization": "the drift is not the optimised kernels'",
    "none": "no drift to explain",
}


def optimization_check_text(check: dict) -> str:
    """One line for the optimisation check: both drifts and what they show, or why it did not run."""
    if check.get("skipped"):
        return f"optimisation check not run: {check['skipped']}"

    def flips(key: str) -> str:
        value = check.get(key)
        return "" if value is None else f", {len(value)} flip{'s' if len(value) != 1 else ''}"

    return (
        f"optimisation check: max abs {_g(check.get('max_abs'))} at "
        f"{check['compared_with']}{flips('flips')}, "
        f"{_g(check.get('max_abs_unoptimized'))} with graph optimisation off"
        f"{flips('flips_unoptimized')}: {_CHECK_CAUSES.get(check['cause'], check['cause'])}"
    )


def _g(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"
