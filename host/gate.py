"""``edgequal gate``: judge a verified report against a policy and, optionally, a baseline.

Every limit in the policy becomes one :class:`Check` with its limit, the measured
value and a message, so a pipeline can say why it failed. The report is verified
first: one that does not verify fails the gate before any figure is read. Latency
percentiles are judged on the upper end of their 95 % confidence interval, so a
lucky run cannot pass a limit its own data does not support.

Against a baseline, latency is compared on the raw samples (host/regression.py):
a bootstrap interval of the median ratio plus a minimum effect size. What changed
in the fingerprint (firmware, kernel, runtime, power mode, governor, clocks) is
listed beside the verdict, because that is usually the reason.

An ``inconclusive`` report (a drop explained by interference from other processes)
fails with ``retry``: re-run it on a quiet board; it is not a regression.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import VerificationFailed
from .policy import DRIFT_METRICS, Policy
from .regression import bootstrap_median_ratio, decode_samples_ns, judge_ratio, mann_whitney_u
from .report_file import ReportFile, load_report
from .trust import KnownDevices

_MB = 1 << 20
_PERCENTILE_KEYS = {
    "max_p50_ms": ("p50", 0.50, "p50_ms", "p50_ci_ms"),
    "max_p90_ms": ("p90", 0.90, "p90_ms", None),
    "max_p95_ms": ("p95", 0.95, "p95_ms", None),
    "max_p99_ms": ("p99", 0.99, "p99_ms", "p99_ci_ms"),
    "max_p99_9_ms": ("p99.9", 0.999, "p99_9_ms", None),
}
_MIN_SAMPLES = {"p90": 10, "p95": 20, "p99": 368, "p99.9": 3688}


@dataclass(frozen=True)
class Check:
    """One policy check: what was limited, the limit, what was measured, and why it passed or not.

    ``retry`` marks a failure explained by interference: re-run rather than fix.
    """

    name: str
    section: str
    passed: bool
    limit: str
    measured: str
    message: str
    retry: bool = False

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


@dataclass
class GateResult:
    """The verdict on one report. True when it verified and every check passed."""

    report: str
    policy: str
    verified: bool
    signature: str
    checks: list[Check] = field(default_factory=list)
    run_id: str | None = None
    status: str | None = None
    reason: str | None = None
    device: str | None = None
    baseline: dict | None = None

    @property
    def passed(self) -> bool:
        """Verified, and no check failed."""
        return self.verified and all(c.passed for c in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failed_checks(self) -> list[Check]:
        """The checks that failed, in policy order."""
        return [c for c in self.checks if not c.passed]

    @property
    def retry(self) -> bool:
        """Failed only because of interference: re-run on a quiet board; not a regression."""
        failed = self.failed_checks
        return self.verified and bool(failed) and all(c.retry for c in failed)

    @property
    def summary(self) -> str:
        """One line: the verdict and the first reason."""
        if self.passed:
            return f"gate passed: {len(self.checks)} checks of policy '{self.policy}'"
        failed = self.failed_checks
        first = failed[0].message if failed else self.signature
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        if self.retry:
            return f"gate failed, re-run on a quiet board (interference, not a regression): {first}{more}"
        return f"gate failed: {first}{more}"

    def to_json(self) -> dict:
        """The verdict as JSON: passed, retry, every check, the baseline comparison."""
        return {
            "report": self.report,
            "policy": self.policy,
            "passed": self.passed,
            "retry": self.retry,
            "summary": self.summary,
            "verified": self.verified,
            "signature": self.signature,
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "device": self.device,
            "checks": [c.to_json() for c in self.checks],
            "baseline": self.baseline,
        }


# ---------------------------------------------------------------------------
# Formatting


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip() if unit else text


def _limit_check(
    section: str,
    name: str,
    what: str,
    value: float | None,
    limit: float,
    direction: str,
    unit: str = "",
    *,
    detail: str = "",
    retry: bool = False,
    missing: str = "not measured",
) -> Check:
    """A numeric limit: ``direction`` "max" means value <= limit passes, "min" value >= limit."""
    sign = "≤" if direction == "max" else "≥"
    limit_text = f"{sign} {_fmt(limit, unit)}"
    if value is None:
        return Check(name, section, False, limit_text, "—", f"{what}: {missing}")
    ok = value <= limit if direction == "max" else value >= limit
    verb = "within" if ok else ("above" if direction == "max" else "below")
    message = f"{what} {_fmt(value, unit)} is {verb} the limit {limit_text}"
    if detail:
        message += f" ({detail})"
    return Check(name, section, ok, limit_text, _fmt(value, unit), message, retry and not ok)


def _flag_check(section: str, name: str, what: str, bad: bool, message: str, retry=False) -> Check:
    return Check(
        name, section, not bad, "no", _fmt(bad), message if bad else f"no {what}", retry and bad
    )


# ---------------------------------------------------------------------------
# Checks by section


def _status_checks(pred: dict, policy: Policy) -> list[Check]:
    status = pred.get("status")
    reason = pred.get("reason")
    allowed = policy.allowed_statuses
    limit = "one of " + ", ".join(allowed)
    if status in allowed:
        msg = f"status {status} is allowed" + (f" ({reason})" if reason else "")
        return [Check("status", "status", True, limit, str(status), msg)]
    if status == "inconclusive":
        msg = (
            f"inconclusive: {reason or 'a drop explained by interference from other processes'}; "
            "re-run on a quiet board (interference, not a regression)"
        )
        return [Check("status", "status", False, limit, status, msg, retry=True)]
    msg = f"status {status} is not allowed by the policy ({limit})" + (
        f": {reason}" if reason else ""
    )
    return [Check("status", "status", False, limit, str(status), msg)]


def _findings_checks(pred: dict, policy: Policy) -> list[Check]:
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
            _limit_check(
                "findings",
                "findings.max_count",
                "findings",
                len(findings),
                policy.findings["max_count"],
                "max",
            )
        )
    return checks


def _cold_load_checks(results: dict, policy: Policy) -> list[Check]:
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
            _limit_check(
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


def _percentile_upper_ci(entry: dict, key: str) -> tuple[float | None, str, str | None]:
    """(upper 95 % CI bound in ms, detail, why missing) for one percentile limit of a shape."""
    label, q, point_key, ci_key = _PERCENTILE_KEYS[key]
    summary = entry.get("summary") or {}
    n = summary.get("count") or 0
    point = summary.get(point_key)
    if point is None:
        need = _MIN_SAMPLES.get(label)
        return (
            None,
            "",
            f"{label} not measured ({n} samples" + (f", needs {need})" if need else ")"),
        )
    ci = summary.get(ci_key) if ci_key else None
    if ci is None and entry.get("samples_ns_b64"):
        from edgequal.agent.measure.stats import quantile_ci

        ordered = np.sort(decode_samples_ns(entry["samples_ns_b64"]))
        bounds = quantile_ci(ordered, q)
        ci = None if bounds is None else [bounds[0] / 1e6, bounds[1] / 1e6]
    if not ci:
        return None, "", f"{label} {point:.4g} ms has no 95 % confidence interval ({n} samples)"
    detail = f"{label} {point:.4g} ms, 95 % CI {ci[0]:.4g}–{ci[1]:.4g} ms, n {n}"
    return float(ci[1]), detail, None


def _interference(entry: dict) -> bool:
    return entry.get("cause") == "interference"


def _latency_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.latency
    if not limits:
        return []
    per_shape = (results.get("latency") or {}).get("per_shape") or []
    if not per_shape:
        return [
            Check(
                "latency", "latency", False, "measured", "—", "latency: not measured in the report"
            )
        ]
    checks = []
    for entry in per_shape:
        shape = entry.get("shape", "?")
        retry = _interference(entry)
        summary = entry.get("summary") or {}
        for key, limit in limits.items():
            name = f"latency.{key}[{shape}]"
            if key in _PERCENTILE_KEYS:
                label = _PERCENTILE_KEYS[key][0]
                upper, detail, missing = _percentile_upper_ci(entry, key)
                checks.append(
                    _limit_check(
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
                    _limit_check(
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
                        name, "latency", steady, "steady", _fmt(steady), msg, retry and not steady
                    )
                )
    return checks


def _sustained_checks(results: dict, policy: Policy) -> list[Check]:
    limits = dict(policy.sustained)
    required = limits.pop("required", False)
    if not limits and not required:
        return []
    s = results.get("sustained") or {}
    if "peak_per_s" not in s:
        return [
            Check(
                "sustained.measured",
                "sustained",
                False,
                "a sustained phase",
                "none",
                "sustained: no sustained phase in the report (run with --sustain or the standard plan)",
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
                _limit_check(
                    "sustained", name, "peak throughput", s.get("peak_per_s"), limit, "min", "/s"
                )
            )
        elif key == "min_sustained_per_s":
            checks.append(
                _limit_check(
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
                _limit_check(
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
                _flag_check(
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
                _flag_check(
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
                        f"≥ {_fmt(limit, 's')}",
                        "never",
                        "the board never throttled",
                    )
                )
            else:
                checks.append(
                    _limit_check("sustained", name, "time to first throttle", t, limit, "min", "s")
                )
        elif key == "max_peak_temp_c":
            checks.append(
                _limit_check(
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
                _limit_check(
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


def _drift_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.drift
    per_output = policy.drift_outputs
    if not limits and not per_output:
        return []
    drift = results.get("drift")
    if not drift:
        return [
            Check(
                "drift",
                "drift",
                False,
                "measured",
                "—",
                "drift: not measured (qualify with --golden to measure output drift)",
            )
        ]
    outputs = drift.get("outputs") or {}
    checks = []
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
                _fmt(bool(drift.get("passed"))),
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
                _limit_check(
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
            Check(
                "drift.decisions",
                "drift",
                False,
                "a decision rule",
                "none",
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
                _limit_check(
                    "drift", f"drift.{key}", what, value, limits[key], "max", detail=detail
                )
            )
    return checks


def _memory_checks(results: dict, policy: Policy) -> list[Check]:
    memory = results.get("memory") or {}
    checks = []
    for key, figure, what in (
        ("max_peak_rss_mb", "peak_rss_bytes", "worker peak RSS"),
        ("max_rss_added_by_load_mb", "rss_added_by_load_bytes", "RSS added by loading the model"),
    ):
        if key in policy.memory:
            raw = memory.get(figure)
            checks.append(
                _limit_check(
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


def _not_run(section: str, name: str, what: str, how: str) -> Check:
    return Check(name, section, False, what, "none", f"{section}: no {what} in the report ({how})")


def _scenario_retry(entry: dict) -> bool:
    """A scenario's shortfall that other processes' CPU explains: re-run, not fix."""
    return bool(entry.get("interference_present"))


def _batch_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.batch
    if not limits:
        return []
    sweep = results.get("batch_sweep")
    if not sweep:
        return [
            _not_run("batch", "batch.measured", "batch sweep", "--batch-sizes or the standard plan")
        ]
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
                _limit_check(
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


def _thread_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.threads
    if not limits:
        return []
    scaling = results.get("thread_scaling")
    if not scaling:
        return [
            _not_run(
                "threads",
                "threads.measured",
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
                _limit_check(
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


def _server_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.server
    if not limits:
        return []
    server = results.get("server")
    if not server:
        return [
            _not_run(
                "server", "server.measured", "server scenario", "--server or the standard plan"
            )
        ]
    at = server.get("at_target") or {}
    retry = _scenario_retry(server)
    bound = server.get("p99_bound_ms")
    checks = []
    if "min_rate_at_p99_per_s" in limits:
        checks.append(
            _limit_check(
                "server",
                "server.min_rate_at_p99_per_s",
                f"highest rate with p99 within {_fmt(bound, 'ms')}",
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
            _limit_check(
                "server",
                "server.max_p99_ms_at_target",
                f"p99 at {_fmt(at.get('target_rate_per_s'), '/s')} (queueing included)",
                at.get("p99_ms"),
                limits["max_p99_ms_at_target"],
                "max",
                "ms",
                retry=retry,
            )
        )
    if limits.get("require_held_at_target"):
        held = bool(at.get("held"))
        why = "saturated" if at.get("saturated") else f"p99 above {_fmt(bound, 'ms')}"
        checks.append(
            Check(
                "server.require_held_at_target",
                "server",
                held,
                "held",
                _fmt(held),
                "server scenario held its target rate"
                if held
                else f"server scenario did not hold {_fmt(at.get('target_rate_per_s'), '/s')}: {why}",
                retry and not held,
            )
        )
    return checks


def _operator_checks(results: dict, policy: Policy) -> list[Check]:
    limits = policy.operators
    if not limits:
        return []
    ops = results.get("operators")
    if not ops:
        return [
            _not_run(
                "operators",
                "operators.measured",
                "operator diagnostics",
                "--operators, --providers or the standard plan",
            )
        ]
    nodes = ((ops.get("cpu_fallback") or {}).get("cpu_nodes")) or []
    checks = []
    if limits.get("allow_cpu_fallback") is False:
        checks.append(
            _flag_check(
                "operators",
                "operators.allow_cpu_fallback",
                "CPU fallback",
                bool(nodes),
                ops.get("fallback_finding") or f"{len(nodes)} nodes fell back to the CPU",
            )
        )
    if "max_cpu_fallback_nodes" in limits:
        checks.append(
            _limit_check(
                "operators",
                "operators.max_cpu_fallback_nodes",
                "nodes that fell back to the CPU",
                len(nodes),
                limits["max_cpu_fallback_nodes"],
                "max",
            )
        )
    return checks


def _energy_checks(results: dict, policy: Policy) -> list[Check]:
    limits = dict(policy.energy)
    require = limits.pop("require_rails", False)
    if not limits and not require:
        return []
    power = (results.get("sustained") or {}).get("power")
    if not power:
        return [
            _not_run(
                "energy", "energy.measured", "energy figures", "a sustained phase measures them"
            )
        ]
    if not power.get("present"):
        reason = power.get("reason") or "no readable power rail"
        return [
            Check("energy.rails", "energy", False, "readable rails", "none", f"energy: {reason}")
        ]
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
                _limit_check(
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


def evaluate(predicate: dict, policy: Policy) -> list[Check]:
    """Every check of ``policy`` on a verified predicate, in the policy's section order."""
    results = predicate.get("results") or {}
    return [
        *_status_checks(predicate, policy),
        *_findings_checks(predicate, policy),
        *_cold_load_checks(results, policy),
        *_latency_checks(results, policy),
        *_sustained_checks(results, policy),
        *_drift_checks(results, policy),
        *_memory_checks(results, policy),
        *_batch_checks(results, policy),
        *_thread_checks(results, policy),
        *_server_checks(results, policy),
        *_operator_checks(results, policy),
        *_energy_checks(results, policy),
    ]


# ---------------------------------------------------------------------------
# Baseline


_FINGERPRINT_SKIP = {
    "absent",
    "boot_id",
    "python_executable",
    "memory_total_kb",
    "board_model_source",
}


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        out[prefix] = ", ".join(map(str, value))
    else:
        out[prefix] = value


def fingerprint_fields(predicate: dict, subjects: list[dict] | None = None) -> dict[str, Any]:
    """The fields whose change explains a different result, flattened to dotted keys."""
    out: dict[str, Any] = {}
    fp = {
        k: v for k, v in (predicate.get("fingerprint") or {}).items() if k not in _FINGERPRINT_SKIP
    }
    _flatten("", fp, out)
    results = predicate.get("results") or {}
    runtime = results.get("runtime") or (results.get("cold_load") or {}).get("runtime") or {}
    _flatten("runtime", {k: v for k, v in runtime.items() if k != "providers_requested"}, out)
    sustained = results.get("sustained") or {}
    clocks = [
        w.get("max_clock_khz")
        for w in sustained.get("windows_detail") or []
        if w.get("max_clock_khz")
    ]
    if clocks:
        out["clocks.max_clock_khz"] = max(clocks)
    plan = predicate.get("plan") or {}
    for key in ("profile", "threads", "preset"):
        if key in plan:
            out[f"plan.{key}"] = plan[key]
    for s in subjects or []:
        kind = "golden" if s["name"].endswith(".npz") else "model"
        out.setdefault(kind, f"{s['name']} sha256 {s['sha256'][:12]}")
    return out


def change_category(key: str) -> str:
    """What kind of change a fingerprint key is: firmware, kernel, runtime, power mode, ..."""
    if "firmware" in key or key.startswith("jetson.l4t"):
        return "firmware"
    if key in ("kernel", "os_release"):
        return "kernel" if key == "kernel" else "os"
    if key.startswith("runtime."):
        return "runtime"
    if key.startswith("jetson.nvpmodel"):
        return "power mode"
    if key.startswith("cpu_governors"):
        return "governor"
    if key.startswith(("jetson.jetson_clocks", "clocks.")):
        return "clocks"
    if key.startswith("raspberry_pi."):
        return "throttle state"
    if key in ("model", "golden"):
        return key
    if key.startswith("plan."):
        return "plan"
    return "board"


def fingerprint_changes(base: ReportFile, cand: ReportFile) -> list[dict]:
    """[{field, category, baseline, candidate}] for every fingerprint field that differs."""
    a = fingerprint_fields(base.predicate, base.subjects)
    b = fingerprint_fields(cand.predicate, cand.subjects)
    changes = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            changes.append(
                {
                    "field": key,
                    "category": change_category(key),
                    "baseline": a.get(key),
                    "candidate": b.get(key),
                }
            )
    return changes


_SAME_FIELD_KEYS = {
    "runtime": "runtime.runtime",
    "runtime_version": "runtime.version",
    "threads": "runtime.threads",
}


def compare_latency(base_entry: dict, cand_entry: dict, settings: dict) -> dict:
    """Median-ratio bootstrap, Mann–Whitney U and the verdict for one input shape."""
    if base_entry.get("samples_ns_b64") and cand_entry.get("samples_ns_b64"):
        a = decode_samples_ns(base_entry["samples_ns_b64"])
        b = decode_samples_ns(cand_entry["samples_ns_b64"])
        ratio = bootstrap_median_ratio(
            a,
            b,
            confidence=settings["confidence"],
            iterations=settings["iterations"],
            seed=settings["seed"],
        )
        return {
            "median_ratio": ratio.to_json(),
            "mann_whitney": mann_whitney_u(a, b).to_json(),
            "verdict": judge_ratio(ratio, settings["min_effect"]),
            "min_effect": settings["min_effect"],
        }
    # Reports without raw samples: the point medians only, no interval.
    p_a = (base_entry.get("summary") or {}).get("p50_ms")
    p_b = (cand_entry.get("summary") or {}).get("p50_ms")
    if not p_a or p_b is None:
        return {"verdict": "unresolved", "min_effect": settings["min_effect"], "median_ratio": None}
    r = p_b / p_a
    e = settings["min_effect"]
    verdict = "slower" if r >= 1 + e else "faster" if r <= 1 - e else "same"
    return {
        "verdict": verdict,
        "min_effect": e,
        "median_ratio": {
            "ratio": r,
            "ci_low": None,
            "ci_high": None,
            "baseline_median_ms": p_a,
            "candidate_median_ms": p_b,
        },
    }


def _latency_message(shape: str, cmp: dict) -> str:
    r = cmp.get("median_ratio")
    if not r:
        return f"{shape}: no median latency to compare"
    change = f"median {r['candidate_median_ms']:.4g} ms vs {r['baseline_median_ms']:.4g} ms, ×{r['ratio']:.3f}"
    if r.get("ci_low") is not None:
        change += f" (95 % CI {r['ci_low']:.3f}–{r['ci_high']:.3f})"
    else:
        change += " (no raw samples: no interval)"
    effect = f"{cmp['min_effect']:.0%} minimum effect"
    return {
        "slower": f"{shape}: slower than the baseline, {change}; beyond the {effect}: a regression",
        "faster": f"{shape}: faster than the baseline, {change}",
        "same": f"{shape}: same as the baseline within the {effect}, {change}",
        "unresolved": f"{shape}: a change beyond the {effect} the interval does not confirm, {change}",
    }[cmp["verdict"]]


def baseline_checks(base: ReportFile, cand: ReportFile, policy: Policy) -> tuple[list[Check], dict]:
    """Checks against the baseline, and the comparison (with fingerprint changes) for the verdict."""
    settings = policy.baseline
    changes = fingerprint_changes(base, cand)
    summary: dict[str, Any] = {
        "report": str(base.path),
        "run_id": base.predicate.get("run_id"),
        "verified": base.verified,
        "signature": base.signature,
        "fingerprint_changes": changes,
        "latency": [],
        "throughput": None,
    }
    checks: list[Check] = []
    if not base.verified:
        checks.append(
            Check(
                "baseline.verify",
                "baseline",
                False,
                "verified",
                "not verified",
                f"baseline {base.path}: {base.signature}",
            )
        )
        return checks, summary
    a = fingerprint_fields(base.predicate, base.subjects)
    b = fingerprint_fields(cand.predicate, cand.subjects)
    for f in settings.get("require_same", []):
        key = _SAME_FIELD_KEYS.get(f, f)
        same = a.get(key) == b.get(key)
        checks.append(
            Check(
                f"baseline.require_same[{f}]",
                "baseline",
                same,
                _fmt(a.get(key)),
                _fmt(b.get(key)),
                f"{f} is the baseline's"
                if same
                else f"{f} differs from the baseline's ({a.get(key)} → {b.get(key)}): the comparison is not like for like",
            )
        )
    base_shapes = {
        e.get("shape"): e
        for e in (base.predicate.get("results") or {}).get("latency", {}).get("per_shape") or []
    }
    cand_shapes = {
        e.get("shape"): e
        for e in (cand.predicate.get("results") or {}).get("latency", {}).get("per_shape") or []
    }
    for shape, base_entry in base_shapes.items():
        name = f"baseline.latency[{shape}]"
        cand_entry = cand_shapes.get(shape)
        if cand_entry is None:
            checks.append(
                Check(
                    name,
                    "baseline",
                    False,
                    "measured",
                    "—",
                    f"{shape}: measured in the baseline but not in this report",
                )
            )
            continue
        cmp = compare_latency(base_entry, cand_entry, settings)
        summary["latency"].append({"shape": shape, **cmp})
        r = cmp.get("median_ratio") or {}
        ok = cmp["verdict"] != "slower"
        retry = not ok and _interference(cand_entry)
        msg = _latency_message(shape, cmp)
        if retry:
            msg += "; the run saw interference: re-run on a quiet board"
        checks.append(
            Check(
                name,
                "baseline",
                ok,
                f"median ratio < {1 + settings['min_effect']:.3f} or not significant",
                _fmt(r.get("ratio")),
                msg,
                retry,
            )
        )
    if "max_throughput_drop" in settings:
        sa = (base.predicate.get("results") or {}).get("sustained") or {}
        sb = (cand.predicate.get("results") or {}).get("sustained") or {}
        drop = settings["max_throughput_drop"]
        name = "baseline.max_throughput_drop"
        if not sa.get("sustained_per_s") or sb.get("sustained_per_s") is None:
            checks.append(
                Check(
                    name,
                    "baseline",
                    False,
                    f"≥ {1 - drop:.3f}× baseline",
                    "—",
                    "sustained throughput: not measured in both reports",
                )
            )
        else:
            ratio = sb["sustained_per_s"] / sa["sustained_per_s"]
            summary["throughput"] = {
                "baseline_per_s": sa["sustained_per_s"],
                "candidate_per_s": sb["sustained_per_s"],
                "ratio": ratio,
            }
            ok = ratio >= 1 - drop
            retry = not ok and sb.get("cause") == "interference"
            checks.append(
                Check(
                    name,
                    "baseline",
                    ok,
                    f"≥ {1 - drop:.3f}× baseline",
                    f"{ratio:.3f}×",
                    f"sustained throughput {sb['sustained_per_s']:.4g}/s vs {sa['sustained_per_s']:.4g}/s "
                    f"(×{ratio:.3f}; at most {drop:.0%} drop allowed)",
                    retry,
                )
            )
    return checks, summary


# ---------------------------------------------------------------------------
# The gate


def run_gate(
    report_path: str | Path,
    policy: Policy,
    *,
    known: KnownDevices | None = None,
    device: str | None = None,
    baseline_path: str | Path | None = None,
) -> GateResult:
    """Verify the report, then every check of the policy (and the baseline's, when given).

    An unreadable file raises UsageError (exit 2); a report that does not verify gives
    a failed result with no checks read from it.
    """
    known = known if known is not None else KnownDevices()
    try:
        cand = load_report(report_path, known=known, device=device, require=True)
    except VerificationFailed as e:
        return GateResult(
            str(report_path),
            policy.name,
            False,
            f"NOT VERIFIED: {e}",
            [
                Check(
                    "verify",
                    "verify",
                    False,
                    "signed by a pinned device key",
                    "not verified",
                    str(e),
                )
            ],
        )
    base = None
    if baseline_path is not None:
        try:
            base = load_report(baseline_path, known=known, require=True)
        except VerificationFailed as e:
            base = ReportFile(Path(baseline_path), {}, [], False, f"NOT VERIFIED: {e}")
    pred = cand.predicate
    result = GateResult(
        report=str(report_path),
        policy=policy.name,
        verified=True,
        signature=cand.signature,
        checks=[
            Check(
                "verify",
                "verify",
                True,
                "signed by a pinned device key",
                "verified",
                cand.signature,
            )
        ],
        run_id=pred.get("run_id"),
        status=pred.get("status"),
        reason=pred.get("reason"),
        device=cand.device_name,
    )
    result.checks += evaluate(pred, policy)
    if base is not None:
        checks, summary = baseline_checks(base, cand, policy)
        result.checks += checks
        result.baseline = summary
    return result
