"""The checks of a gate policy on one verified report's own figures: one :class:`Check`
per limit (the kit: ``check_kit.py``).

Plan, status, findings, cold load, latency (percentiles judged on the upper end of their
95 % confidence interval), sustained, drift and memory here; the service scenarios'
and energy limits in ``scenario_checks.py``. Pure: a predicate and a policy in, checks out.
"""

from __future__ import annotations

from edgequal.contract.plan import PRESETS, duration_text
from edgequal.contract.preemption import decisive_entry

from .check_kit import (
    PERCENTILE_KEYS,
    RERUN_ADVICE,
    Check,
    blamed_on_interference,
    flag_check,
    fmt_value,
    limit_check,
    not_measured,
    percentile_upper_ci,
    section_absent,
)
from .policy import DRIFT_METRICS, Policy

_MB = 1 << 20


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


def _drift_metric(o: dict, metric: str) -> float | None:
    value = o.get(metric)
    if value is None and o.get("exact") and metric in ("snr_db", "psnr_db"):
        return float("inf")  # bit-exact outputs: infinite signal-to-noise
    return value


def timed_outputs_checks(results: dict, policy: Policy) -> list[Check]:
    """``[drift] timed_outputs_must_match`` (default true wherever the report checked outputs
    during its timed phases): every checked call's outputs matched. None where unchecked."""
    timed = results.get("timed_outputs") or {}
    if not timed or not policy.drift.get("timed_outputs_must_match", True):
        return []
    from edgequal.contract.summary import timed_outputs_text

    mismatches = sum(p["mismatches"] for p in timed.values())
    checked = sum(p["checked"] for p in timed.values())
    return [
        Check(
            "drift.timed_outputs_must_match",
            "drift",
            mismatches == 0,
            "all matched",
            f"{mismatches} of {checked} changed",
            timed_outputs_text(timed),
        )
    ]


def drift_checks(results: dict, policy: Policy) -> list[Check]:
    limits = {k: v for k, v in policy.drift.items() if k != "timed_outputs_must_match"}
    per_output = policy.drift_outputs
    checks = timed_outputs_checks(results, policy)
    if not limits and not per_output:
        return checks
    drift = results.get("drift")
    if not drift:
        return checks + [
            not_measured(
                "drift",
                "drift",
                "measured",
                "drift: not measured (qualify with --golden to measure output drift)",
            )
        ]
    outputs = drift.get("outputs") or {}
    if limits.get("require_passed"):
        failing = [f"{n}: {o.get('reason')}" for n, o in outputs.items() if not o.get("passed")]
        msg = (
            "every output within its tolerance"
            if drift.get("passed")
            else ("drift out of tolerance: " + ("; ".join(failing) or "decision flips"))
        )
        checks.append(
            Check(
                "drift.require_passed",
                "drift",
                bool(drift.get("passed")),
                "passed",
                fmt_value(bool(drift.get("passed"))),
                msg,
            )
        )
    for name in per_output:
        if name not in outputs:
            checks.append(
                Check(
                    f"drift.outputs.{name}",
                    "drift",
                    False,
                    "present",
                    "absent",
                    f"drift: output {name} is not in the report (outputs: {', '.join(outputs)})",
                )
            )
    for name, o in outputs.items():
        own = per_output.get(name, {})
        for key in DRIFT_METRICS:
            if key in own:
                limit, explicit = own[key], True
            elif key in limits:
                limit, explicit = limits[key], False
            else:
                continue
            metric, direction = DRIFT_METRICS[key]
            value = _drift_metric(o, metric)
            if value is None and not explicit:
                continue  # e.g. top-1 agreement of a scalar output: not applicable
            unit = "dB" if metric.endswith("_db") else ""
            checks.append(
                limit_check(
                    "drift",
                    f"drift.{key}[{name}]",
                    f"output {name}: {metric.replace('_', ' ')} (worst case)",
                    value,
                    limit,
                    direction,
                    unit,
                )
            )
    decisions = drift.get("decisions")
    decision_limits = [
        k
        for k in (
            "max_flip_count",
            "max_flip_rate",
            "max_near_threshold_flips",
            "max_near_threshold_flip_rate",
        )
        if k in limits
    ]
    if decision_limits and not decisions:
        checks.append(
            not_measured(
                "drift",
                "drift.decisions",
                "a decision rule",
                "decision flips: the golden set has no decision rule (golden make --decision)",
            )
        )
    elif decision_limits:
        flips = decisions.get("flips") or []
        near = decisions.get("flips_near_threshold") or []
        rule = decisions.get("rule")
        spec = {
            "max_flip_count": ("decision flips", decisions.get("flip_count"), flips),
            "max_flip_rate": ("decision flip rate", decisions.get("flip_rate"), flips),
            "max_near_threshold_flips": (
                "flips among cases near the threshold",
                decisions.get("flips_near_threshold_count"),
                near,
            ),
            "max_near_threshold_flip_rate": (
                "flip rate near the threshold",
                decisions.get("near_threshold_flip_rate"),
                near,
            ),
        }
        for key in decision_limits:
            what, value, cases = spec[key]
            detail = f"rule {rule}" + (
                f"; flipped: {', '.join(map(str, cases[:8]))}" if cases else ""
            )
            checks.append(
                limit_check("drift", f"drift.{key}", what, value, limits[key], "max", detail=detail)
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
