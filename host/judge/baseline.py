"""A candidate report against a baseline: what changed in the fingerprint, and whether
latency regressed on the raw samples.

The three-way verdict (host/judge/verdict.py) decides each shape: DIFFERENT and slower by
at least the minimum effect fails, SAME (or DIFFERENT and faster) passes, UNKNOWN is not
judged (``retry``: run more pairs, ``--repeat-until-decided``). The bootstrap interval of
the median ratio and Mann–Whitney U (host/judge/regression.py) are shown beside it."""

from __future__ import annotations

from typing import Any

from edgequal.contract.board_families import BOARD_FAMILIES
from edgequal.contract.preemption import decisive_samples_ns, decisive_summary
from edgequal.contract.signing import RolesUnmarked, subject_with_role

from .check_kit import (
    RUN_MORE_ADVICE,
    Check,
    blamed_on_interference,
    fmt_value,
    not_measured,
)
from .policy import Policy
from .regression import bootstrap_median_ratio, judge_ratio, mann_whitney_u
from .report_file import ReportFile

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


def runtime_env_fields(envs: list) -> dict[str, Any]:
    """The runtime environments a run named, by their place in the plan (``runtime_envs[1]``
    is the first, the baseline of its ratios): name, runtime, version, Python and every
    wheel's file and digest. By place, not name, so the environment a lab's nightly plan
    measures stays one field when it is replaced by another version under another name."""
    out: dict[str, Any] = {}
    for i, env in enumerate(envs, start=1):
        if not isinstance(env, dict):
            continue
        for key in ("name", "runtime", "distribution", "version", "python"):
            if env.get(key) is not None:
                out[f"runtime_envs[{i}].{key}"] = env[key]
        wheels = [w for w in env.get("wheels") or [] if isinstance(w, dict)]
        if wheels:
            out[f"runtime_envs[{i}].wheels"] = ", ".join(
                f"{w.get('file')} sha256 {str(w.get('sha256'))[:12]}" for w in wheels
            )
    return out


ROLE_UNMARKED = "unknown (the report's subjects carry no roles)"
"""The ``golden`` field of a report whose subjects have no roles (an agent from before
them): its golden set cannot be told, so ``require_same[golden]`` fails on it."""


def fingerprint_fields(predicate: dict, subjects: list[dict] | None = None) -> dict[str, Any]:
    """The fields whose change explains a different result, flattened to dotted keys."""
    out: dict[str, Any] = {}
    fp = {
        k: v for k, v in (predicate.get("fingerprint") or {}).items() if k not in _FINGERPRINT_SKIP
    }
    envs = fp.pop("runtime_envs", None)
    _flatten("", fp, out)
    if isinstance(envs, list):
        out.update(runtime_env_fields(envs))
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
    for role in ("model", "golden"):
        try:
            s = subject_with_role(subjects or [], role)
        except RolesUnmarked:
            out[role] = ROLE_UNMARKED
            continue
        if s is not None:
            out[role] = f"{s['name']} sha256 {s['sha256'][:12]}"
    return out


def change_category(key: str) -> str:
    """What kind of change a fingerprint key is: firmware, kernel, runtime, power mode, ..."""
    if "firmware" in key:
        return "firmware"
    for family in BOARD_FAMILIES:  # a board family's section: what each of its fields is
        category = family.category_of(key)
        if category is not None:
            return category
    if key in ("kernel", "os_release"):
        return "kernel" if key == "kernel" else "os"
    if key.startswith("runtime."):
        return "runtime"
    if key.startswith("runtime_envs"):
        return "runtime environments"  # what a run measured beside its runtime, not the board
    if key.startswith("cpu_governors"):
        return "governor"
    if key in ("cpu_model", "cpu_isa", "cpu_flags"):
        # Not "board": agents record them since the int8 finding; a lab's older approvals
        # lack them, and the board model already names a board swap.
        return "cpu"
    if key.startswith("clocks."):
        return "clocks"
    if key == "thermal_trip_c":
        return "thermal"
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
        # The calls that kept the CPU where they decide: a busy neighbour sets no baseline.
        a = decisive_samples_ns(base_entry)
        b = decisive_samples_ns(cand_entry)
        ratio = bootstrap_median_ratio(
            a,
            b,
            confidence=settings["confidence"],
            iterations=settings["iterations"],
            seed=settings["seed"],
        )
        from .verdict import decide

        return {
            "median_ratio": ratio.to_json(),
            "mann_whitney": mann_whitney_u(a, b).to_json(),
            "verdict": judge_ratio(ratio, settings["min_effect"]),
            # SAME / DIFFERENT / UNKNOWN (verdict.py), beside the interval's verdict.
            "three_way": decide(a, b, settings["min_effect"], settings).to_json(),
            "min_effect": settings["min_effect"],
        }
    # Reports without raw samples: the point medians only, no interval.
    p_a = decisive_summary(base_entry).get("p50_ms")
    p_b = decisive_summary(cand_entry).get("p50_ms")
    if not p_a or p_b is None:
        return {"verdict": "unresolved", "min_effect": settings["min_effect"], "median_ratio": None}
    from .verdict import decide

    r = p_b / p_a
    e = settings["min_effect"]
    verdict = "slower" if r >= 1 + e else "faster" if r <= 1 - e else "same"
    return {
        "verdict": verdict,
        # One value a side: SAME when equal, else UNKNOWN (one run says nothing of its spread).
        "three_way": decide([p_a], [p_b], e, settings).to_json(),
        "min_effect": e,
        "median_ratio": {
            "ratio": r,
            "ci_low": None,
            "ci_high": None,
            "baseline_median_ms": p_a,
            "candidate_median_ms": p_b,
        },
    }


def _change_text(cmp: dict) -> str:
    """``median 1.2 ms vs 1.0 ms, ×1.200 (95 % CI 1.18–1.22)``: the change the verdict is on."""
    r = cmp["median_ratio"]
    change = f"median {r['candidate_median_ms']:.4g} ms vs {r['baseline_median_ms']:.4g} ms, ×{r['ratio']:.3f}"
    if r.get("ci_low") is not None:
        return change + f" (95 % CI {r['ci_low']:.3f}–{r['ci_high']:.3f})"
    return change + " (no raw samples: no interval)"


def latency_decision(shape: str, cmp: dict) -> tuple[bool | None, str]:
    """(passed, message) for one shape's comparison by its three-way verdict: False when
    DIFFERENT and slower (a regression), True when SAME or DIFFERENT and faster, None when
    UNKNOWN (not judged: run more)."""
    three = cmp.get("three_way")
    if not cmp.get("median_ratio") or not three:
        return None, f"{shape}: no median latency to compare; {RUN_MORE_ADVICE}"
    change = _change_text(cmp)
    effect = f"{cmp['min_effect']:.0%} minimum effect"
    why = f"{three['verdict']}: {three['why']}"
    if three["verdict"] == "DIFFERENT":
        if (three["ratio"] or cmp["median_ratio"]["ratio"]) > 1.0:
            return (
                False,
                f"{shape}: slower than the baseline, {change}; {why}, beyond the {effect}: a regression",
            )
        return True, f"{shape}: faster than the baseline, {change}; {why}"
    if three["verdict"] == "SAME":
        return True, f"{shape}: same as the baseline, {change}; {why}"
    return None, f"{shape}: not decided against the baseline, {change}; {why}; {RUN_MORE_ADVICE}"


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
        same = a.get(key) == b.get(key) and ROLE_UNMARKED not in (a.get(key), b.get(key))
        checks.append(
            Check(
                f"baseline.require_same[{f}]",
                "baseline",
                same,
                fmt_value(a.get(key)),
                fmt_value(b.get(key)),
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
                not_measured(
                    "baseline",
                    name,
                    "measured",
                    f"{shape}: measured in the baseline but not in this report",
                )
            )
            continue
        cmp = compare_latency(base_entry, cand_entry, settings)
        summary["latency"].append({"shape": shape, **cmp})
        three = cmp.get("three_way") or {}
        passed, msg = latency_decision(shape, cmp)
        limit = f"not DIFFERENT and ≥ {settings['min_effect']:.0%} slower"
        measured = (
            f"{three.get('verdict', 'UNKNOWN')} ×{three['ratio']:.3f}"
            if three.get("ratio") is not None
            else three.get("verdict", "UNKNOWN")
        )
        if passed is None:
            # UNKNOWN is no pass and no regression: not judged, and run more.
            checks.append(
                Check(name, "baseline", False, limit, measured, msg, retry=True, judged=False)
            )
            continue
        retry = not passed and blamed_on_interference(cand_entry)
        if retry:
            msg += "; the run saw interference: re-run on a quiet board"
        checks.append(Check(name, "baseline", passed, limit, measured, msg, retry))
    if "max_throughput_drop" in settings:
        sa = (base.predicate.get("results") or {}).get("sustained") or {}
        sb = (cand.predicate.get("results") or {}).get("sustained") or {}
        drop = settings["max_throughput_drop"]
        name = "baseline.max_throughput_drop"
        if not sa.get("sustained_per_s") or sb.get("sustained_per_s") is None:
            checks.append(
                not_measured(
                    "baseline",
                    name,
                    f"≥ {1 - drop:.3f}× baseline",
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
