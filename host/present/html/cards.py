"""The cards that open the report page: one per report, what a model card in this field
shows first: the verdict and its cause, p50/p90/p99, peak memory, time to first
inference, drift against the reference, sustained throughput, and the signature."""

from __future__ import annotations

from collections.abc import Sequence

from edgequal.contract.preemption import decisive_entry

from ...judge.report_file import ReportFile
from ..signature import signature_text
from ..units import duration_text
from .parts import escape, get_path, status_badge


def _latency(results: dict) -> str:
    shapes = [decisive_entry(e) for e in get_path(results, "latency", "per_shape") or []]
    if not shapes:
        return "not measured"
    s = shapes[0].get("summary") or {}
    text = " / ".join(duration_text(s.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms"))
    if len(shapes) > 1:
        text += f" ({shapes[0].get('shape')}; {len(shapes)} shapes)"
    return text


def _drift(results: dict) -> str:
    drift = results.get("drift")
    if not drift:
        return "no golden set: not measured"
    outputs = drift.get("outputs") or {}
    if all(o.get("exact") for o in outputs.values()):
        text = "exact on every output"
    else:
        name, worst = max(outputs.items(), key=lambda kv: kv[1].get("max_abs") or 0.0)
        psnr = worst.get("psnr_db")
        text = f"{name}: max abs {worst.get('max_abs', 0):.3g}" + (
            f", PSNR {psnr:.1f} dB" if psnr is not None else ""
        )
        failed = [n for n, o in outputs.items() if not o.get("passed")]
        text += f"; out of tolerance: {', '.join(failed)}" if failed else "; within tolerance"
    d = drift.get("decisions")
    if d:
        flips = d.get("flips") or []
        text += f"; {len(flips)} of {d.get('total_cases')} decisions flipped"
        if flips:
            text += f" ({', '.join(flips[:6])}{'…' if len(flips) > 6 else ''})"
    return text


def _sustained(results: dict) -> str | None:
    s = results.get("sustained")
    if not s or "peak_per_s" not in s:
        return None
    text = (
        f"{s.get('sustained_per_s', 0):.0f}/s of a {s.get('peak_per_s', 0):.0f}/s peak, "
        f"{s.get('verdict')}"
    )
    if s.get("cause") not in (None, "none"):
        text += f", cause {s['cause']}"
    if s.get("throttled") and s.get("time_to_first_throttle_s") is not None:
        text += f" (first throttle at {s['time_to_first_throttle_s']:.0f} s)"
    return text


def _finding(predicate: dict) -> str | None:
    findings = predicate.get("findings") or []
    if not findings:
        return None
    f = findings[0]
    what = f.get("operator") or f.get("input")
    return f"{f.get('kind')}" + (f": {what}" if what else "") + f" ({f.get('phase')})"


def model_cards(reports: Sequence[ReportFile]) -> str:
    """A card per report, in page order (A, B, …)."""
    cards = []
    for i, r in enumerate(reports):
        p = r.predicate
        results = p.get("results") or {}
        total = get_path(results, "cold_load", "total_ms", "median")
        first = get_path(results, "cold_load", "first_inference_ms", "median")
        peak = get_path(results, "memory", "peak_rss_bytes")
        # The terminal's words (benchmark_model's): the total is not the first inference.
        rows = [
            ("p50 / p90 / p99", _latency(results)),
            ("Total to first result", duration_text(total) if total is not None else "—"),
            ("First inference", duration_text(first) if first is not None else "—"),
            ("peak memory", f"{peak / (1 << 20):.1f} MB" if peak is not None else "—"),
            ("drift", _drift(results)),
        ]
        if (sustained := _sustained(results)) is not None:
            rows.append(("sustained", sustained))
        if (finding := _finding(p)) is not None:
            rows.append(("finding", finding))
        if (results.get("contention") or {}).get("measurable") is False:
            rows.append(("contention", "not measurable on this machine"))
        sig = "verified" if r.verified else "NOT VERIFIED"
        rows.append(("signature", f"{sig}, device {r.device_name or '—'}"))
        if (model_signature := signature_text(results)) is not None:
            rows.append(("model signature", model_signature.split(": ", 1)[1]))
        body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
        cards.append(
            f'<div class="card"><h3>{escape(chr(65 + i))} {escape(r.model_name or r.path.name)}</h3>'
            f"{status_badge(p.get('status'))}"
            f'<p class="why">{escape(p.get("reason") or "every check passed")}</p>'
            f'<dl>{body}</dl><p class="muted">{escape(r.path.name)}</p></div>'
        )
    return f'<div class="cards">{"".join(cards)}</div>'
