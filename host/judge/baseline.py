"""A candidate report against a baseline: what changed in the fingerprint, and whether
latency regressed, run against run.

The three-way verdict (host/judge/verdict.py) decides each shape on the runs' clean p50s
(run_figures.py: every run of a ``--repeat N`` report, else its one run; the board's
history noise as the spread when the gate is given ``--history``): DIFFERENT and slower
by at least the minimum effect fails, SAME (or DIFFERENT and faster) passes, UNKNOWN is
not judged (``retry``: run more, ``--repeat-until-decided``). The bootstrap interval of
the median ratio of the two runs' calls (host/judge/regression.py) is shown beside it:
each run's own precision, not the evidence."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from edgequal.contract.board_families import BOARD_FAMILIES
from edgequal.contract.json_tree import leaves
from edgequal.contract.preemption import decisive_samples_ns, decisive_summary
from edgequal.contract.signing import RolesUnmarked, subject_with_role

from ..errors import UsageError
from .check_kit import (
    INTEGER,
    NUMBER,
    RUN_MORE_ADVICE,
    TEXT_LIST,
    Check,
    GateSection,
    blamed_on_interference,
    fmt_value,
    not_measured,
)
from .regression import bootstrap_median_ratio
from .report_file import ReportFile
from .run_figures import RunFigures, fastest_call_ms, run_figures
from .verdict import Spread

if TYPE_CHECKING:
    from .policy import Policy

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
    """Each leaf of ``value`` into ``out`` under its dotted path; a list is one field."""
    for path, _, leaf in leaves(value, prefix, into_lists=False):
        out[path] = ", ".join(map(str, leaf)) if isinstance(leaf, list) else leaf


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


def compare_latency(
    base_entry: dict,
    cand_entry: dict,
    settings: dict,
    *,
    base_runs: RunFigures | None = None,
    cand_runs: RunFigures | None = None,
    prior: Spread | None = None,
) -> dict:
    """One input shape of two reports: the three-way verdict over their runs' clean p50s
    (``base_runs``/``cand_runs``, run_figures.py; else each entry's one p50), ``prior`` the
    board's run-to-run spread from history; beside it, the median ratio of the two runs'
    own calls with its bootstrap interval (each run's precision, never the verdict's)."""
    from .verdict import decide

    base_runs = base_runs or RunFigures([], [])
    cand_runs = cand_runs or RunFigures([], [])
    p_a = decisive_summary(base_entry).get("p50_ms")
    p_b = decisive_summary(cand_entry).get("p50_ms")
    if not base_runs.values and isinstance(p_a, (int, float)):
        base_runs = RunFigures([float(p_a)], ["baseline"])
    if not cand_runs.values and isinstance(p_b, (int, float)):
        cand_runs = RunFigures([float(p_b)], ["candidate"])
    e = settings["min_effect"]
    if not p_a or p_b is None or not base_runs.values or not cand_runs.values:
        return {"min_effect": e, "median_ratio": None, "three_way": None}
    three = decide(
        base_runs.values,
        cand_runs.values,
        e,
        settings,
        prior=prior,
        baseline_runs=base_runs.run_ids,
        candidate_runs=cand_runs.run_ids,
        floors=(fastest_call_ms(base_entry), fastest_call_ms(cand_entry)),
    ).to_json()
    out = {"three_way": three, "min_effect": three["min_effect"]}
    if base_entry.get("samples_ns_b64") and cand_entry.get("samples_ns_b64"):
        # The calls that kept the CPU: the two runs' own precision, shown beside the verdict.
        ratio = bootstrap_median_ratio(
            decisive_samples_ns(base_entry),
            decisive_samples_ns(cand_entry),
            confidence=settings["confidence"],
            iterations=settings["iterations"],
            seed=settings["seed"],
        )
        return {**out, "median_ratio": ratio.to_json()}
    return {
        **out,
        "median_ratio": {
            "ratio": p_b / p_a,
            "ci_low": None,
            "ci_high": None,
            "baseline_median_ms": p_a,
            "candidate_median_ms": p_b,
        },
    }


def _change_text(cmp: dict) -> str:
    """``median 1.2 ms vs 1.0 ms (the runs' calls ×1.200, 95 % CI 1.18–1.22)``: the two
    first runs' medians and their calls' own interval (not the verdict's evidence)."""
    r = cmp["median_ratio"]
    change = f"median {r['candidate_median_ms']:.4g} ms vs {r['baseline_median_ms']:.4g} ms"
    if r.get("ci_low") is not None:
        return change + (
            f" (the runs' calls ×{r['ratio']:.3f}, 95 % CI {r['ci_low']:.3f}–{r['ci_high']:.3f})"
        )
    return change + f" (×{r['ratio']:.3f}; no raw samples)"


def latency_decision(shape: str, cmp: dict) -> tuple[bool | None, str]:
    """(passed, message) for one shape's comparison by its three-way verdict: False when
    DIFFERENT and slower (a regression), True when SAME or DIFFERENT and faster, None when
    UNKNOWN (not judged: run more)."""
    three = cmp.get("three_way")
    if not cmp.get("median_ratio") or not three:
        return None, f"{shape}: no median latency to compare; {RUN_MORE_ADVICE}"
    change = _change_text(cmp)
    effect = f"{cmp['min_effect']:.0%} minimum effect"
    why = f"{three['text']}"
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


def baseline_checks(
    base: ReportFile, cand: ReportFile, policy: Policy, prior: Spread | None = None
) -> tuple[list[Check], dict]:
    """Checks against the baseline, and the comparison (with fingerprint changes) for the
    verdict; ``prior``: the board's run-to-run spread of the clean p50 from history."""
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
    for i, (shape, base_entry) in enumerate(base_shapes.items()):
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
        cmp = compare_latency(
            base_entry,
            cand_entry,
            settings,
            base_runs=run_figures(base.predicate, "p50_ms", shape),
            cand_runs=run_figures(cand.predicate, "p50_ms", shape),
            prior=prior if i == 0 else None,  # the noise score is the first shape's p50
        )
        summary["latency"].append({"shape": shape, **cmp})
        three = cmp.get("three_way") or {}
        passed, msg = latency_decision(shape, cmp)
        limit = f"not DIFFERENT and ≥ {settings['min_effect']:.0%} slower"
        measured = (
            f"{three.get('verdict', 'UNKNOWN')} ×{three['ratio']:.3f}"
            if three.get("ratio") is not None
            else three.get("verdict", "UNKNOWN")
        )
        if three.get("basis"):
            measured += f" ({three['basis']})"
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
        # Of repeated runs, their median: one run's figure does not stand for N.
        ta = run_figures(base.predicate, "sustained_per_s").median
        tb = run_figures(cand.predicate, "sustained_per_s").median
        sb = (cand.predicate.get("results") or {}).get("sustained") or {}
        drop = settings["max_throughput_drop"]
        name = "baseline.max_throughput_drop"
        if not ta or tb is None:
            checks.append(
                not_measured(
                    "baseline",
                    name,
                    f"≥ {1 - drop:.3f}× baseline",
                    "sustained throughput: not measured in both reports",
                )
            )
        else:
            ratio = tb / ta
            summary["throughput"] = {
                "baseline_per_s": ta,
                "candidate_per_s": tb,
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
                    f"sustained throughput {tb:.4g}/s vs {ta:.4g}/s "
                    f"(×{ratio:.3f}; at most {drop:.0%} drop allowed)",
                    retry,
                )
            )
    return checks, summary


# ---------------------------------------------------------------------------
# The [baseline] section: judged by baseline_checks when the gate is given a baseline

BASELINE_DEFAULTS = {"min_effect": 0.03, "confidence": 0.95, "iterations": 1000, "seed": 0}
# Fingerprint fields a baseline may be required to share (require_same).
SAME_FIELDS = (
    "board_model",
    "soc",
    "architecture",
    "cpu_count",
    "kernel",
    "os_release",
    "runtime",
    "runtime_version",
    "threads",
    "model",
    "golden",
)


def _settings_hold(where: str, baseline: dict) -> None:
    """The interval's confidence and iterations, the verdict's levels (host/judge/verdict.py),
    the fields ``require_same`` names."""
    if not 0.0 < baseline["confidence"] < 1.0:
        raise UsageError(f"policy {where}: 'baseline.confidence' must be between 0 and 1")
    if baseline["iterations"] < 1:
        raise UsageError(f"policy {where}: 'baseline.iterations' must be at least 1")
    for key, ok, rule in (
        ("min_effect", lambda v: v >= 0, "at least 0"),
        ("alpha_different", lambda v: 0 < v < 1, "above 0 and below 1"),
        ("alpha_same", lambda v: 0 < v < 0.5, "above 0 and below 0.5"),
        ("session_shift", lambda v: v >= 0, "at least 0"),
    ):
        if key in baseline and not ok(baseline[key]):
            raise UsageError(
                f"policy {where}: 'baseline.{key}' must be {rule}, got {baseline[key]}"
            )
    for f in baseline.get("require_same", []):
        if f not in SAME_FIELDS:
            close = difflib.get_close_matches(f, SAME_FIELDS, 1, 0.5)
            hint = f"did you mean '{close[0]}'?" if close else "one of " + ", ".join(SAME_FIELDS)
            raise UsageError(
                f"policy {where}: unknown field '{f}' in baseline.require_same ({hint})"
            )


SECTION = GateSection(
    "baseline",
    keys={
        "min_effect": NUMBER,
        # SAME / DIFFERENT / UNKNOWN (host/judge/verdict.py: VERDICT_DEFAULTS).
        "alpha_different": NUMBER,
        "alpha_same": NUMBER,
        "session_shift": NUMBER,
        "confidence": NUMBER,
        "iterations": INTEGER,
        "seed": INTEGER,
        "max_throughput_drop": NUMBER,
        "require_same": TEXT_LIST,
    },
    defaults=BASELINE_DEFAULTS,
    validate=_settings_hold,
)
