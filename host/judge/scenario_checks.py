"""Gate checks on the service scenarios and energy: batch sweep, thread scaling, server
scenario, operators and energy per inference (docs/gating.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import (
    BOOL,
    INTEGER,
    NUMBER,
    Check,
    GateSection,
    flag_check,
    fmt_value,
    limit_check,
    not_measured,
    section_absent,
)

if TYPE_CHECKING:
    from .policy import Policy


def _scenario_retry(entry: dict) -> bool:
    """A scenario's shortfall that other processes' CPU explains: re-run, not fix."""
    return bool(entry.get("interference_present"))


def batch_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.batch
    if not limits:
        return []
    sweep = results.get("batch_sweep")
    if not sweep:
        return [section_absent("batch", "batch sweep", "--batch-sizes or the standard plan")]
    best = sweep.get("best") or {}
    missing = sweep.get("skipped") or "no batch size ran"
    retry = _scenario_retry(sweep)
    checks = []
    for key, figure, what, unit in (
        ("min_best_items_per_s", "items_per_s", "best batch throughput", "items/s"),
        (
            "min_best_items_per_s_per_core",
            "items_per_s_per_core",
            "best batch throughput per core",
            "items/s",
        ),
    ):
        if key in limits:
            detail = f"batch {best['batch']}" if best.get("batch") is not None else ""
            checks.append(
                limit_check(
                    "batch",
                    f"batch.{key}",
                    what,
                    best.get(figure),
                    limits[key],
                    "min",
                    unit,
                    detail=detail,
                    retry=retry,
                    missing=missing,
                )
            )
    return checks


def thread_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.threads
    if not limits:
        return []
    scaling = results.get("thread_scaling")
    if not scaling:
        return [
            section_absent(
                "threads",
                "thread scaling",
                "--thread-scaling or the standard plan",
            )
        ]
    rec = scaling.get("recommended") or {}
    detail = f"{rec['threads']} threads recommended" if rec.get("threads") is not None else ""
    retry = _scenario_retry(scaling)
    checks = []
    for key, figure, what, unit, direction in (
        (
            "min_recommended_calls_per_s",
            "calls_per_s",
            "throughput at the recommended threads",
            "calls/s",
            "min",
        ),
        ("max_recommended_p50_ms", "p50_ms", "p50 at the recommended threads", "ms", "max"),
    ):
        if key in limits:
            checks.append(
                limit_check(
                    "threads",
                    f"threads.{key}",
                    what,
                    rec.get(figure),
                    limits[key],
                    direction,
                    unit,
                    detail=detail,
                    retry=retry,
                )
            )
    return checks


def server_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.server
    if not limits:
        return []
    server = results.get("server")
    if not server:
        return [section_absent("server", "server scenario", "--server or the standard plan")]
    at = server.get("at_target") or {}
    retry = _scenario_retry(server)
    bound = server.get("p99_bound_ms")
    checks = []
    if "min_rate_at_p99_per_s" in limits:
        checks.append(
            limit_check(
                "server",
                "server.min_rate_at_p99_per_s",
                f"highest rate with p99 within {fmt_value(bound, 'ms')}",
                server.get("max_rate_held_per_s"),
                limits["min_rate_at_p99_per_s"],
                "min",
                "/s",
                retry=retry,
                missing="no rate held its p99 bound",
            )
        )
    if "max_p99_ms_at_target" in limits:
        checks.append(
            limit_check(
                "server",
                "server.max_p99_ms_at_target",
                f"p99 at {fmt_value(at.get('target_rate_per_s'), '/s')} (queueing included)",
                at.get("p99_ms"),
                limits["max_p99_ms_at_target"],
                "max",
                "ms",
                retry=retry,
            )
        )
    if limits.get("require_held_at_target"):
        held = bool(at.get("held"))
        why = "saturated" if at.get("saturated") else f"p99 above {fmt_value(bound, 'ms')}"
        checks.append(
            Check(
                "server.require_held_at_target",
                "server",
                held,
                "held",
                fmt_value(held),
                "server scenario held its target rate"
                if held
                else f"server scenario did not hold {fmt_value(at.get('target_rate_per_s'), '/s')}: {why}",
                retry and not held,
            )
        )
    return checks


def operator_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.operators
    if not limits:
        return []
    ops = results.get("operators")
    if not ops:
        return [
            section_absent(
                "operators",
                "operator diagnostics",
                "--operators, --providers or the standard plan",
            )
        ]
    nodes = ((ops.get("cpu_fallback") or {}).get("cpu_nodes")) or []
    checks = []
    if limits.get("allow_cpu_fallback") is False:
        checks.append(
            flag_check(
                "operators",
                "operators.allow_cpu_fallback",
                "CPU fallback",
                bool(nodes),
                ops.get("fallback_finding") or f"{len(nodes)} nodes fell back to the CPU",
            )
        )
    if "max_cpu_fallback_nodes" in limits:
        checks.append(
            limit_check(
                "operators",
                "operators.max_cpu_fallback_nodes",
                "nodes that fell back to the CPU",
                len(nodes),
                limits["max_cpu_fallback_nodes"],
                "max",
            )
        )
    return checks


def energy_checks(results: dict, policy: Policy) -> list[Check]:
    limits = dict(policy.energy)
    require = limits.pop("require_rails", False)
    if not limits and not require:
        return []
    power = (results.get("sustained") or {}).get("power")
    if not power:
        return [section_absent("energy", "energy figures", "a sustained phase measures them")]
    if not power.get("present"):
        reason = power.get("reason") or "no readable power rail"
        return [not_measured("energy", "energy.rails", "readable rails", f"energy: {reason}")]
    checks = []
    if require:
        checks.append(
            Check(
                "energy.require_rails",
                "energy",
                True,
                "readable rails",
                power.get("total_from") or "yes",
                f"rails read: {', '.join(power.get('rails') or [])}",
            )
        )
    summary = power.get("summary") or {}
    for key, figure, what, unit in (
        (
            "max_mj_per_inference",
            "mj_per_inference_median",
            "energy per inference (median window)",
            "mJ",
        ),
        (
            "max_mj_per_inference_above_idle",
            "mj_per_inference_above_idle_median",
            "energy per inference above idle",
            "mJ",
        ),
        ("max_power_w", "power_w_median", "board power (median window)", "W"),
    ):
        if key in limits:
            checks.append(
                limit_check(
                    "energy",
                    f"energy.{key}",
                    what,
                    summary.get(figure),
                    limits[key],
                    "max",
                    unit,
                    missing="no window was bracketed by power samples",
                )
            )
    return checks


BATCH = GateSection(
    "batch",
    keys={"min_best_items_per_s": NUMBER, "min_best_items_per_s_per_core": NUMBER},
    checks=batch_checks,
)
THREADS = GateSection(
    "threads",
    keys={"min_recommended_calls_per_s": NUMBER, "max_recommended_p50_ms": NUMBER},
    checks=thread_checks,
)
SERVER = GateSection(
    "server",
    keys={
        "min_rate_at_p99_per_s": NUMBER,
        "max_p99_ms_at_target": NUMBER,
        "require_held_at_target": BOOL,
    },
    checks=server_checks,
)
OPERATORS = GateSection(
    "operators",
    keys={"allow_cpu_fallback": BOOL, "max_cpu_fallback_nodes": INTEGER},
    checks=operator_checks,
)
ENERGY = GateSection(
    "energy",
    keys={
        "require_rails": BOOL,
        "max_mj_per_inference": NUMBER,
        "max_mj_per_inference_above_idle": NUMBER,
        "max_power_w": NUMBER,
    },
    checks=energy_checks,
    needs_sustained=True,
)
