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
            basis = "calls that kept the CPU" if decided_on_clean(entry) else "every call"
            lines.append(
                f"  figures over the {basis}: {excluded}; "
                f"p99 as measured {_ms(entry['summary']['p99_ms'])}"
            )
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
