"""The checks of a gate policy on one verified report's own figures: one :class:`Check`
per limit (the kit: ``check_kit.py``).

Plan, status, findings, cold load, latency (percentiles judged on the upper end of their
95 % confidence interval), sustained and memory here, each section declared beside its
checks (:class:`~.check_kit.GateSection`, listed in ``sections.py``); drift in
``drift_checks.py``, the service scenarios' and energy limits in ``scenario_checks.py``.
Pure: a predicate and a policy in, checks out.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from edgequal.contract.plan import PRESETS, duration_text
from edgequal.contract.preemption import decisive_entry, decisive_summary
from edgequal.contract.signing import STATUSES

from ..errors import UsageError
from .check_kit import (
    BOOL,
    INTEGER,
    NUMBER,
    PERCENTILE_KEYS,
    RERUN_ADVICE,
    TEXT,
    TEXT_LIST,
    Check,
    GateSection,
    blamed_on_interference,
    flag_check,
    fmt_value,
    limit_check,
    not_measured,
    percentile_upper_ci,
    section_absent,
)

if TYPE_CHECKING:
    from .policy import Policy

_MB = 1 << 20
DEFAULT_ALLOWED_STATUSES = ("passed", "degraded")
COLD_LOAD_STATISTICS = ("median", "max")
_SHAPE = re.compile(r"\[(.*)\]$")


# ---------------------------------------------------------------------------
# Formatting


# ---------------------------------------------------------------------------
# Checks by section


def _sustain_s(plan: dict) -> float:
    value = plan.get("sustain_s")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def plan_shortfall(plan: dict, need: str) -> tuple[str, str] | None:
    """What ``plan`` (a plan's JSON) lacks of plan ``need``, or None when it has it all.

    Plan ``need`` requires its sustained phase, at least as long as the preset runs it
    (10 min for standard, 30 for soak; quick requires none). The cold-load and latency
    phases every plan runs, and the service scenarios have their own policy sections.
    Returns (what is needed, what the plan ran): ``("sustained phase", "quick")``.
    """
    need_s, ran_s = float(PRESETS[need]["sustain_s"]), _sustain_s(plan)
    if ran_s >= need_s:
        return None
    ran = str(plan.get("preset") or "a plan with no preset")
    if not ran_s:
        return "sustained phase", ran
    origin = " (--sustain)" if (plan.get("sources") or {}).get("sustain_s") == "flag" else ""
    return (
        f"sustained phase of {duration_text(need_s)}",
        f"{ran} with a {duration_text(ran_s)} sustained phase{origin}",
    )


def plan_checks(pred: dict, policy: Policy) -> list[Check]:
    """``requires_plan``: one check that the report ran the phases of the plan the policy needs."""
    need = policy.requires_plan
    if need is None:
        return []
    plan = pred.get("plan") or {}
    limit = f"plan {need}"
    ran_s = _sustain_s(plan)
    measured = f"{plan.get('preset') or '—'}" + (
        f", sustained {duration_text(ran_s)}" if ran_s else ", no sustained phase"
    )
    short = plan_shortfall(plan, need)
    if short is None:
        msg = (
            f"the report ran {plan.get('preset')} with a {duration_text(ran_s)} sustained phase, "
            f"as plan {need} needs"
            if PRESETS[need]["sustain_s"]
            else f"plan {need} needs no sustained phase; the report ran {plan.get('preset')}"
        )
        return [Check("plan.requires_plan", "plan", True, limit, measured, msg)]
    needed, ran = short
    msg = f"this policy needs plan {need} ({needed}); the report ran {ran}"
    return [Check("plan.requires_plan", "plan", False, limit, measured, msg)]


def status_checks(pred: dict, policy: Policy) -> list[Check]:
    status = pred.get("status")
    reason = pred.get("reason")
    allowed = policy.allowed_statuses
    limit = "one of " + ", ".join(allowed)
    if status in allowed:
        msg = f"status {status} is allowed" + (f" ({reason})" if reason else "")
        return [Check("status", "status", True, limit, str(status), msg)]
    if status == "inconclusive":
        # The agent's reason already ends with the advice; it is given once.
        why = (reason or "").removesuffix(RERUN_ADVICE).rstrip("; ")
        msg = (
            f"inconclusive: {why or 'a drop explained by interference from other processes'}; "
            f"{RERUN_ADVICE} (interference, not a regression)"
        )
        return [Check("status", "status", False, limit, status, msg, retry=True)]
    msg = f"status {status} is not allowed by the policy ({limit})" + (
        f": {reason}" if reason else ""
    )
    return [Check("status", "status", False, limit, str(status), msg)]


def findings_checks(pred: dict, policy: Policy) -> list[Check]:
    findings = pred.get("findings") or []
    checks = []
    if "allowed_kinds" in policy.findings:
        allowed = policy.findings["allowed_kinds"]
        bad = [f for f in findings if f.get("kind") not in allowed]
        limit = "kinds " + (", ".join(allowed) if allowed else "none")
        measured = ", ".join(sorted({str(f.get("kind")) for f in findings})) or "none"
        if bad:
            f = bad[0]
            op = f" (operator {f['operator']})" if f.get("operator") else ""
            msg = f"finding of kind {f.get('kind')} is not allowed: {f.get('message')}{op}"
        else:
            msg = "no finding of a kind the policy forbids"
        checks.append(Check("findings.allowed_kinds", "findings", not bad, limit, measured, msg))
    if "max_count" in policy.findings:
        checks.append(
            limit_check(
                "findings",
                "findings.max_count",
                "findings",
                len(findings),
                policy.findings["max_count"],
                "max",
            )
        )
    return checks


def cold_load_checks(results: dict, policy: Policy) -> list[Check]:
    limits = {k: v for k, v in policy.cold_load.items() if k.startswith("max_")}
    if not limits:
        return []
    stat = policy.cold_load.get("statistic", "median")
    cold = results.get("cold_load") or {}
    checks = []
    for key, limit in limits.items():
        figure = key.removeprefix("max_")
        value = (cold.get(figure) or {}).get(stat)
        label = figure.removesuffix("_ms").replace("_", " ")
        runs = len(cold.get("runs") or [])
        checks.append(
            limit_check(
                "cold_load",
                f"cold_load.{key}",
                f"cold {label} ({stat} of {runs} runs)",
                value,
                limit,
                "max",
                "ms",
                missing="no cold-load figures in the report",
            )
        )
    return checks


def latency_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.latency
    if not limits:
        return []
    per_shape = (results.get("latency") or {}).get("per_shape") or []
    if not per_shape:
        return [
            not_measured("latency", "latency", "measured", "latency: not measured in the report")
        ]
    checks = []
    for entry in map(decisive_entry, per_shape):
        shape = entry.get("shape", "?")
        retry = blamed_on_interference(entry)
        summary = entry.get("summary") or {}
        for key, limit in limits.items():
            name = f"latency.{key}[{shape}]"
            if key in PERCENTILE_KEYS:
                label = PERCENTILE_KEYS[key][0]
                upper, detail, missing = percentile_upper_ci(entry, key)
                checks.append(
                    limit_check(
                        "latency",
                        name,
                        f"{shape}: {label} (upper end of its 95 % CI)",
                        upper,
                        limit,
                        "max",
                        "ms",
                        detail=detail,
                        retry=retry,
                        missing=missing or "not measured",
                    )
                )
            elif key == "max_cv":
                checks.append(
                    limit_check(
                        "latency",
                        name,
                        f"{shape}: coefficient of variation",
                        summary.get("cv"),
                        limit,
                        "max",
                        retry=retry,
                    )
                )
            elif key == "require_steady" and limit:
                warm = entry.get("warmup") or {}
                steady = bool(warm.get("steady"))
                msg = (
                    f"{shape}: warm-up reached a steady state"
                    if steady
                    else f"{shape}: warm-up never reached a steady state ({warm.get('reason')})"
                )
                checks.append(
                    Check(
                        name,
                        "latency",
                        steady,
                        "steady",
                        fmt_value(steady),
                        msg,
                        retry and not steady,
                    )
                )
    return checks


def sustained_checks(results: dict, policy: Policy) -> list[Check]:
    limits = dict(policy.sustained)
    required = limits.pop("required", False)
    if not limits and not required:
        return []
    s = results.get("sustained") or {}
    if "peak_per_s" not in s:
        return [
            section_absent(
                "sustained", "sustained phase", "run with --sustain or the standard plan"
            )
        ]
    checks = []
    if required:
        checks.append(
            Check(
                "sustained.required",
                "sustained",
                True,
                "a sustained phase",
                f"{s.get('duration_s', 0):g} s",
                "sustained phase present",
            )
        )
    retry = s.get("cause") == "interference"
    absent = "no temperature sensor on the device (telemetry absent)"
    for key, limit in limits.items():
        name = f"sustained.{key}"
        if key == "min_peak_per_s":
            checks.append(
                limit_check(
                    "sustained", name, "peak throughput", s.get("peak_per_s"), limit, "min", "/s"
                )
            )
        elif key == "min_sustained_per_s":
            checks.append(
                limit_check(
                    "sustained",
                    name,
                    "sustained throughput",
                    s.get("sustained_per_s"),
                    limit,
                    "min",
                    "/s",
                    retry=retry,
                )
            )
        elif key == "min_stability":
            checks.append(
                limit_check(
                    "sustained",
                    name,
                    "stability (worst / best window)",
                    s.get("stability"),
                    limit,
                    "min",
                    retry=retry,
                    detail=f"cause {s['cause']}" if s.get("cause") not in (None, "none") else "",
                )
            )
        elif key == "allow_throttling" and not limit:
            t = s.get("time_to_first_throttle_s")
            checks.append(
                flag_check(
                    "sustained",
                    name,
                    "throttling",
                    bool(s.get("throttled")),
                    f"the board throttled {t:.0f} s into the run"
                    if t is not None
                    else "the board throttled",
                )
            )
        elif key == "allow_under_voltage" and not limit:
            checks.append(
                flag_check(
                    "sustained",
                    name,
                    "under-voltage",
                    bool(s.get("under_voltage")),
                    "under-voltage during the sustained run",
                )
            )
        elif key == "min_time_to_first_throttle_s":
            t = s.get("time_to_first_throttle_s")
            if t is None and s.get("throttled") is False:
                checks.append(
                    Check(
                        name,
                        "sustained",
                        True,
                        f"≥ {fmt_value(limit, 's')}",
                        "never",
                        "the board never throttled",
                    )
                )
            else:
                checks.append(
                    limit_check("sustained", name, "time to first throttle", t, limit, "min", "s")
                )
        elif key == "max_peak_temp_c":
            checks.append(
                limit_check(
                    "sustained",
                    name,
                    "peak temperature",
                    s.get("peak_temp_c"),
                    limit,
                    "max",
                    "°C",
                    missing=absent,
                )
            )
        elif key == "min_headroom_c":
            checks.append(
                limit_check(
                    "sustained",
                    name,
                    "headroom to the trip point",
                    s.get("headroom_c"),
                    limit,
                    "min",
                    "°C",
                    missing=absent if s.get("telemetry") == "absent" else "no trip point",
                )
            )
    return checks


def memory_checks(results: dict, policy: Policy) -> list[Check]:
    memory = results.get("memory") or {}
    checks = []
    for key, figure, what in (
        ("max_peak_rss_mb", "peak_rss_bytes", "worker peak RSS"),
        ("max_rss_added_by_load_mb", "rss_added_by_load_bytes", "RSS added by loading the model"),
    ):
        if key in policy.memory:
            raw = memory.get(figure)
            checks.append(
                limit_check(
                    "memory",
                    f"memory.{key}",
                    what,
                    None if raw is None else raw / _MB,
                    policy.memory[key],
                    "max",
                    "MB",
                )
            )
    return checks


# ---------------------------------------------------------------------------
# The sections these checks judge (sections.py lists them in report order)


def _allowed_statuses(where: str, table: dict) -> None:
    for s in table["allowed"]:
        if s not in STATUSES:
            close = difflib.get_close_matches(s, STATUSES, 1, 0.5)
            hint = f"did you mean '{close[0]}'?" if close else "one of " + ", ".join(STATUSES)
            raise UsageError(f"policy {where}: unknown status '{s}' in status.allowed ({hint})")


def _cold_load_statistic(where: str, table: dict) -> None:
    if table.get("statistic", "median") not in COLD_LOAD_STATISTICS:
        raise UsageError(
            f"policy {where}: 'cold_load.statistic' must be median or max, "
            f"got {table['statistic']!r}"
        )


def _latency_calls(results: dict, check: Check) -> int | None:
    """The timed calls behind a latency check's shape (the clean ones where they decide)."""
    shape = _SHAPE.search(check.name)
    for entry in (results.get("latency") or {}).get("per_shape") or []:
        if shape and entry.get("shape") == shape.group(1):
            return decisive_summary(entry).get("count")
    return None


def _cold_load_processes(results: dict, check: Check) -> int | None:
    runs = (results.get("cold_load") or {}).get("runs")
    return len(runs) if runs else None


def _scored_windows(results: dict, check: Check) -> int | None:
    return (results.get("sustained") or {}).get("scored_windows")


STATUS = GateSection(
    "status",
    keys={"allowed": TEXT_LIST},
    checks=status_checks,
    reads="predicate",
    defaults={"allowed": list(DEFAULT_ALLOWED_STATUSES)},
    validate=_allowed_statuses,
)
FINDINGS = GateSection(
    "findings",
    keys={"allowed_kinds": TEXT_LIST, "max_count": INTEGER},
    checks=findings_checks,
    reads="predicate",
)
COLD_LOAD = GateSection(
    "cold_load",
    keys={
        "statistic": TEXT,
        "max_import_ms": NUMBER,
        "max_load_ms": NUMBER,
        "max_first_inference_ms": NUMBER,
        "max_total_ms": NUMBER,
        "max_process_to_result_ms": NUMBER,
    },
    checks=cold_load_checks,
    sample_size=_cold_load_processes,
    validate=_cold_load_statistic,
)
LATENCY = GateSection(
    "latency",
    keys={
        "max_p50_ms": NUMBER,
        "max_p90_ms": NUMBER,
        "max_p95_ms": NUMBER,
        "max_p99_ms": NUMBER,
        "max_p99_9_ms": NUMBER,
        "max_cv": NUMBER,
        "require_steady": BOOL,
    },
    checks=latency_checks,
    sample_size=_latency_calls,
)
SUSTAINED = GateSection(
    "sustained",
    keys={
        "required": BOOL,
        "min_peak_per_s": NUMBER,
        "min_sustained_per_s": NUMBER,
        "min_stability": NUMBER,
        "allow_throttling": BOOL,
        "allow_under_voltage": BOOL,
        "min_time_to_first_throttle_s": NUMBER,
        "max_peak_temp_c": NUMBER,
        "min_headroom_c": NUMBER,
    },
    checks=sustained_checks,
    sample_size=_scored_windows,
    needs_sustained=True,
)
MEMORY = GateSection(
    "memory",
    keys={"max_peak_rss_mb": NUMBER, "max_rss_added_by_load_mb": NUMBER},
    checks=memory_checks,
)
