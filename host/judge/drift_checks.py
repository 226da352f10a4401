"""``[drift]``: how far the board's outputs moved from the golden set's references, per
output and over the decisions they feed (the kit: ``check_kit.py``). Pure: results and a
policy in, checks out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import (
    BOOL,
    INTEGER,
    NUMBER,
    Check,
    GateSection,
    NamedTables,
    fmt_value,
    limit_check,
    not_measured,
)

if TYPE_CHECKING:
    from .policy import Policy

# Per-output drift limits: policy key -> (metric in results.drift.outputs[NAME], direction).
# The figures are the worst case over the golden set; "max" limits bound them from above.
DRIFT_METRICS: dict[str, tuple[str, str]] = {
    "max_abs": ("max_abs", "max"),
    "max_mean_abs": ("mean_abs", "max"),
    "max_rel": ("max_rel", "max"),
    "min_cosine": ("cosine", "min"),
    "min_snr_db": ("snr_db", "min"),
    "min_psnr_db": ("psnr_db", "min"),
    "min_within_fraction": ("within_fraction", "min"),
    "min_top1_agreement": ("top1_agreement", "min"),
    "min_topk_overlap": ("topk_overlap", "min"),
    "max_nan_count": ("nan_count", "max"),
    "max_inf_count": ("inf_count", "max"),
}
_METRIC_KINDS = {k: (INTEGER if k.endswith("_count") else NUMBER) for k in DRIFT_METRICS}


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


def drift_sample_size(results: dict, check: Check) -> int | None:
    """The golden cases the drift figures rest on."""
    cases = (results.get("drift") or {}).get("cases") or []
    return len({row.get("case") for row in cases}) or None


SECTION = GateSection(
    "drift",
    keys={
        "require_passed": BOOL,
        "timed_outputs_must_match": BOOL,
        **_METRIC_KINDS,
        "max_flip_count": INTEGER,
        "max_flip_rate": NUMBER,
        "max_near_threshold_flips": INTEGER,
        "max_near_threshold_flip_rate": NUMBER,
    },
    checks=drift_checks,
    sample_size=drift_sample_size,
    named=NamedTables("outputs", "drift_outputs", _METRIC_KINDS, "outputs", "NAME"),
)
