"""Reading a report's runtime environments (``results.runtime_envs``), pure: one row per
environment with its figures beside the baseline's, for the gate, compare, the terminal
and the page alike (docs/report-schema.md "runtime_envs")."""

from __future__ import annotations

_MB = 1 << 20


def env_section(results: dict) -> dict | None:
    """``results.runtime_envs``, or None when the report measured no environments."""
    section = (results or {}).get("runtime_envs")
    return section if isinstance(section, dict) and section.get("environments") else None


def env_names(results: dict) -> list[str]:
    """The environments a report measured, baseline first."""
    section = env_section(results)
    return [e.get("name", "?") for e in section["environments"]] if section else []


def env_entry(results: dict, name: str) -> dict | None:
    """One environment's entry by name."""
    section = env_section(results) or {"environments": []}
    return next((e for e in section["environments"] if e.get("name") == name), None)


def env_shape(entry: dict | None) -> dict | None:
    """The environment's latency entry (its one shape), or None."""
    per_shape = ((entry or {}).get("latency") or {}).get("per_shape") or []
    return per_shape[0] if per_shape else None


def env_pair(results: dict, name: str) -> dict | None:
    """The pair comparing environment ``name`` with the baseline (None for the baseline)."""
    section = env_section(results) or {}
    return next((p for p in section.get("pairs") or [] if p.get("candidate") == name), None)


def env_rows(results: dict) -> list[dict]:
    """Per environment: name, runtime and version, status, p50/p99 (ms), cold load and
    first inference (median ms), peak RSS (MB), drift passed, and against the baseline
    its p50 and p99 ratios with intervals, cold-load ratio and flips between."""
    section = env_section(results)
    if section is None:
        return []
    rows = []
    for entry in section["environments"]:
        shape = env_shape(entry) or {}
        summary = shape.get("summary") or {}
        cold = entry.get("cold_load") or {}
        memory = entry.get("memory") or {}
        drift = entry.get("drift")
        pair = env_pair(results, entry.get("name")) or {}
        peak = memory.get("peak_rss_bytes")
        rows.append(
            {
                "name": entry.get("name", "?"),
                "runtime": f"{entry.get('runtime', '?')} {entry.get('version', '')}".strip(),
                "python": entry.get("python"),
                "status": entry.get("status", "ok"),
                "reason": entry.get("reason"),
                "baseline": entry.get("name") == section.get("baseline"),
                "p50_ms": summary.get("p50_ms"),
                "p99_ms": summary.get("p99_ms"),
                "count": summary.get("count"),
                "cold_load_ms": (cold.get("total_ms") or {}).get("median"),
                "first_inference_ms": (cold.get("first_inference_ms") or {}).get("median"),
                "peak_rss_mb": peak / _MB if peak is not None else None,
                "drift_passed": None if drift is None else bool(drift.get("passed")),
                "p50_ratio": pair.get("p50_ratio"),
                "p50_ratio_ci": pair.get("p50_ratio_ci"),
                "p99_ratio": pair.get("p99_ratio"),
                "p99_ratio_ci": pair.get("p99_ratio_ci"),
                "cold_load_ratio": pair.get("cold_load_ratio"),
                "flips_between": pair.get("flips_between"),
                "flipped_cases": pair.get("flipped_cases") or [],
                "interference": pair.get("interference"),
                "decisive": (pair.get("interference") or {}).get("decisive", True),
                **drift_between(pair),
            }
        )
    return rows


def drift_between(pair: dict) -> dict:
    """The between-version drift of a pair over every output: ``drift_between_max_abs``
    (the largest max abs difference) and ``drift_between_psnr_db`` (the lowest PSNR, None
    where every output is identical); both None when not measured."""
    outputs = ((pair or {}).get("drift_between") or {}).get("outputs") or {}
    if not outputs:
        return {"drift_between_max_abs": None, "drift_between_psnr_db": None}
    max_abs = [o["max_abs"] for o in outputs.values() if isinstance(o.get("max_abs"), (int, float))]
    psnr = [
        o["psnr_db"]
        for o in outputs.values()
        if not o.get("exact") and isinstance(o.get("psnr_db"), (int, float))
    ]
    return {
        "drift_between_max_abs": max(max_abs) if max_abs else None,
        "drift_between_psnr_db": min(psnr) if psnr else None,
    }


def drift_between_text(row: dict) -> str:
    """``max abs 3.1e-06, PSNR 96.2 dB``, ``identical`` or ``—`` (not measured)."""
    max_abs, psnr = row.get("drift_between_max_abs"), row.get("drift_between_psnr_db")
    if max_abs is None:
        return "—"
    if max_abs == 0:
        return "identical"
    text = f"max abs {max_abs:.2g}"
    return text + (f", PSNR {psnr:.1f} dB" if psnr is not None else "")


def interference_text(row: dict) -> str | None:
    """Why a comparison is not decisive: ``2 of 8 segments waited for a CPU (up to 31 %):
    not decisive, re-run on a quiet board``; None when it is decisive."""
    ev = row.get("interference") or {}
    if row.get("decisive", True) or not ev:
        return None
    share = ev.get("max_runq_wait_share")
    most = f" (up to {share:.0%} of their runnable time)" if share is not None else ""
    return (
        f"{ev.get('interfered')} of {ev.get('segments')} segments waited for a CPU{most}: "
        "not decisive, re-run on a quiet board"
    )


def ratio_text(ratio, ci) -> str:
    """``1.23× [1.20–1.26]``, ``—`` when not measured."""
    if ratio is None:
        return "—"
    text = f"{ratio:.3g}×"
    if ci:
        text += f" [{ci[0]:.3g}–{ci[1]:.3g}]"
    return text
