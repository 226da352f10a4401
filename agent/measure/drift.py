"""Output drift: how far the device's outputs moved from the golden reference outputs,
whether that is within tolerance, and whether any product decision flipped.

Pure functions over numpy arrays, computed in float64. Metrics and default gates follow
DESIGN.md "Drift" and reference/measurement.md §4 and §6.5:

- elementwise closeness uses numpy ``allclose`` semantics: |a - r| <= atol + rtol * |r|;
- PSNR is AI Hub's 20 log10((max|r| + 1e-5) / (RMSE + 1e-10)), so numbers compare;
- a decision flip is a golden case whose decision (argmax, top-k set or threshold) on the
  device differs from the decision on the reference; cases whose reference sits within
  NEAR_THRESHOLD_BAND of the decision boundary are the "fragile set".

Every function returns plain Python values that ``json.dumps(..., allow_nan=False)``
accepts: infinities and NaN are reported as None next to a flag saying why.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
from edgequal.contract.drift_rules import (
    DecisionRule,
    Tolerance,
    finite_or_none,
    parse_decision_rule,
    real_float64,
    score_rows,
)
from edgequal.contract.errors import BadInput

# A reference value closer than this to the decision boundary (threshold distance, or
# top-1/top-2 gap for argmax) makes the case "near threshold". 0.02 is meant for
# probabilities (measurement.md §4, §6.5); logits deserve a wider band.
NEAR_THRESHOLD_BAND = 0.02

# Default decision gates (measurement.md §6.5): at most 0.5 % of all cases may flip,
# and at most 10 % of the near-threshold (fragile) cases.
MAX_FLIP_RATE = 0.005
MAX_NEAR_THRESHOLD_FLIP_RATE = 0.10

# top-k width for classification-like outputs in the drift report.
DEFAULT_TOPK = 5


# ---------------------------------------------------------------------------
# Elementwise metrics


def compare_arrays(actual, reference, atol: float, rtol: float) -> dict:
    """Drift metrics of one output array against its reference (JSON-ready dict).

    Keys: size, max_abs, mean_abs, max_rel (|a-r| / (|r| + eps), eps = 1e-6 * max|r|
    or 1e-12 for an all-zero reference), within_fraction (share with |a-r| <= atol +
    rtol*|r|), cosine (flattened; 1.0 when both are all zero), snr_db (None when exact,
    i.e. infinite, or when the reference is all zero), psnr_db, exact, nan_count and
    inf_count (in actual), reference_nonfinite_count.

    Non-finite positions never count as within tolerance unless both sides hold the
    same NaN/Inf, and are left out of the numeric metrics (which then describe the
    finite part only); nan_count and inf_count say how many there were.
    """
    a = real_float64(actual, "actual output")
    r = real_float64(reference, "reference output")
    if a.shape != r.shape:
        raise BadInput(
            f"output shape {list(a.shape)} differs from reference shape {list(r.shape)}",
            hint="the model and the golden set disagree on this output",
        )
    a = a.ravel()
    r = r.ravel()
    size = int(a.size)
    nan_count = int(np.count_nonzero(np.isnan(a)))
    inf_count = int(np.count_nonzero(np.isinf(a)))
    finite = np.isfinite(a) & np.isfinite(r)
    same_nonfinite = ~finite & ((np.isnan(a) & np.isnan(r)) | (a == r))
    af = a[finite]
    rf = r[finite]

    diff = np.abs(af - rf)
    abs_ref = np.abs(rf)
    within = int(np.count_nonzero(diff <= atol + rtol * abs_ref)) + int(
        np.count_nonzero(same_nonfinite)
    )
    max_ref = float(abs_ref.max()) if abs_ref.size else 0.0
    eps = 1e-6 * max_ref if max_ref > 0 else 1e-12

    if diff.size:
        max_abs = float(diff.max())
        mean_abs = float(diff.mean())
        max_rel = float((diff / (abs_ref + eps)).max())
        rmse = math.sqrt(float(np.mean(diff * diff)))
    else:
        max_abs = mean_abs = max_rel = rmse = 0.0

    norm_a = float(np.linalg.norm(af))
    norm_r = float(np.linalg.norm(rf))
    if norm_a == 0.0 and norm_r == 0.0:
        cosine = 1.0
    elif norm_a == 0.0 or norm_r == 0.0:
        cosine = 0.0
    else:
        cosine = min(1.0, max(-1.0, float(np.dot(af, rf)) / (norm_a * norm_r)))

    signal = float(np.sum(rf * rf))
    noise = float(np.sum(diff * diff))
    exact = noise == 0.0 and bool(np.all(finite | same_nonfinite))
    snr_db = 10.0 * math.log10(signal / noise) if noise > 0.0 and signal > 0.0 else None
    psnr_db = 20.0 * math.log10((max_ref + 1e-5) / (rmse + 1e-10))

    return {
        "size": size,
        "max_abs": max_abs,
        "mean_abs": mean_abs,
        "max_rel": max_rel,
        "within_fraction": float(within) / size if size else 1.0,
        "cosine": cosine,
        "snr_db": finite_or_none(snr_db) if snr_db is not None else None,
        "psnr_db": psnr_db,
        "exact": exact,
        "nan_count": nan_count,
        "inf_count": inf_count,
        "reference_nonfinite_count": int(np.count_nonzero(~np.isfinite(r))),
    }


def _topk_indices(rows: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values per row, largest first; ties keep the lower index."""
    return np.argsort(-rows, axis=1, kind="stable")[:, :k]


def topk_agreement(actual, reference, k: int) -> dict:
    """Top-1 and top-k agreement over the last axis, per row, of two score arrays.

    Returns rows, k (clamped to the number of classes), top1_agreement (share of rows
    whose argmax matches) and topk_overlap (mean share of the reference top-k found in
    the actual top-k).
    """
    if k < 1:
        raise BadInput(f"top-k needs k >= 1, got {k}")
    a = real_float64(actual, "actual output")
    r = real_float64(reference, "reference output")
    if a.shape != r.shape:
        raise BadInput(f"output shape {list(a.shape)} differs from reference shape {list(r.shape)}")
    a_rows = score_rows(a, "actual output")
    r_rows = score_rows(r, "reference output")
    k = min(k, r_rows.shape[1])
    # NaN scores sort last so a NaN output loses its class instead of winning it.
    a_rows = np.where(np.isnan(a_rows), -np.inf, a_rows)
    top_a = _topk_indices(a_rows, k)
    top_r = _topk_indices(r_rows, k)
    top1 = float(np.mean(top_a[:, 0] == top_r[:, 0]))
    overlap = [
        len(set(ta.tolist()) & set(tr.tolist())) / k for ta, tr in zip(top_a, top_r, strict=True)
    ]
    return {
        "rows": int(a_rows.shape[0]),
        "k": int(k),
        "top1_agreement": top1,
        "topk_overlap": float(np.mean(overlap)),
    }


def smallest_passing_tolerance(actual, reference, rtol: float) -> float:
    """Smallest atol for which every element passes at this rtol: max(|a-r| - rtol*|r|),
    floored at 0. math.inf when the actual output holds NaN/Inf where the reference
    does not (no tolerance passes).
    """
    a = real_float64(actual, "actual output").ravel()
    r = real_float64(reference, "reference output").ravel()
    finite = np.isfinite(a) & np.isfinite(r)
    if not np.all(finite | (np.isnan(a) & np.isnan(r)) | (a == r)):
        return math.inf
    if not np.any(finite):
        return 0.0
    af, rf = a[finite], r[finite]
    return max(0.0, float(np.max(np.abs(af - rf) - rtol * np.abs(rf))))


def smallest_passing_rtol(actual, reference) -> float | None:
    """Smallest rtol for which every element passes with atol = 0: max(|a-r| / |r|).

    None when undefined: some element differs where the reference is zero, or the
    actual output holds NaN/Inf the reference does not.
    """
    a = real_float64(actual, "actual output").ravel()
    r = real_float64(reference, "reference output").ravel()
    finite = np.isfinite(a) & np.isfinite(r)
    if not np.all(finite | (np.isnan(a) & np.isnan(r)) | (a == r)):
        return None
    af, rf = a[finite], r[finite]
    diff = np.abs(af - rf)
    if np.any((rf == 0) & (diff > 0)):
        return None
    nonzero = rf != 0
    if not np.any(nonzero):
        return 0.0
    return float(np.max(diff[nonzero] / np.abs(rf[nonzero])))


def _decisions_differ(rule: DecisionRule, actual: list, reference: list) -> bool:
    """True when any row's decision differs; top-k compares sets, not order."""
    if rule.kind == "topk":
        if len(actual) != len(reference):
            return True
        return any(set(a) != set(r) for a, r in zip(actual, reference, strict=True))
    return actual != reference


def _min_margin(margins) -> float | None:
    """Smallest margin anywhere in a (nested) margin list, ignoring None."""
    if margins is None:
        return None
    if isinstance(margins, list):
        found = [m for m in (_min_margin(x) for x in margins) if m is not None]
        return min(found) if found else None
    return margins


# ---------------------------------------------------------------------------
# Drift report over a golden set


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def _worst(values: list, worst=max) -> float | None:
    present = [v for v in values if v is not None]
    return float(worst(present)) if present else None


def _case_failures(metrics: dict, tolerance: Tolerance) -> list[str]:
    """Why one case fails its tolerance (empty when it passes); top-1 is gated per set."""
    reasons = []
    if metrics["nan_count"] or metrics["inf_count"]:
        reasons.append(f"{metrics['nan_count']} NaN and {metrics['inf_count']} Inf in the output")
    if tolerance.elementwise and metrics["within_fraction"] < 1.0:
        reasons.append(
            f"{1 - metrics['within_fraction']:.2%} of elements outside "
            f"atol {tolerance.atol:g} + rtol {tolerance.rtol:g}*|ref|"
        )
    if tolerance.min_psnr_db is not None and metrics["psnr_db"] < tolerance.min_psnr_db:
        reasons.append(f"PSNR {metrics['psnr_db']:.1f} dB < {tolerance.min_psnr_db:g} dB")
    return reasons


def _tolerance_for(tolerances, name: str) -> Tolerance:
    if isinstance(tolerances, Tolerance):
        return tolerances
    if tolerances is None:
        return Tolerance.for_class("fp32")
    tolerance = tolerances.get(name)
    if tolerance is None:
        return Tolerance.for_class("fp32")
    if isinstance(tolerance, dict):
        return Tolerance.from_dict(tolerance)
    return tolerance


def drift_report(
    cases,
    tolerances: dict[str, Tolerance] | Tolerance | None,
    decision_rule: DecisionRule | None,
    topk: int = DEFAULT_TOPK,
) -> dict:
    """Drift of a whole golden set, JSON-ready.

    ``cases`` is a list of (case_name, actual_outputs, reference_outputs), outputs being
    dicts of name -> array; every reference output must be present in actual (extra
    actual outputs are ignored). ``tolerances`` is one Tolerance for all outputs or a
    per-output mapping (missing outputs get fp32).

    Returns {"passed", "outputs": {name: worst case, medians, pass/fail and reason,
    smallest passing atol/rtol}, "cases": [{case, output, metrics, passed}],
    "decisions": flips and near-threshold cases, or None without a rule}.
    """
    cases = list(cases)
    if not cases:
        raise BadInput("the golden set has no cases to compare")
    if topk < 1:
        raise BadInput(f"top-k needs k >= 1, got {topk}")

    output_names: list[str] = []
    for _, _, reference in cases:
        output_names.extend(n for n in reference if n not in output_names)

    rows = []
    per_output: dict[str, list[dict]] = {name: [] for name in output_names}
    for case_name, actual, reference in cases:
        for name in reference:
            if name not in actual:
                raise BadInput(
                    f"case {case_name!r}: output {name!r} is missing from the device's outputs",
                    hint=f"the device returned {sorted(actual)}",
                )
            tolerance = _tolerance_for(tolerances, name)
            try:
                metrics = compare_arrays(
                    actual[name], reference[name], tolerance.atol, tolerance.rtol
                )
            except BadInput as e:
                raise BadInput(f"case {case_name!r}, output {name!r}: {e}", hint=e.hint) from e
            ref = np.asarray(reference[name])
            if ref.ndim >= 1 and ref.size and ref.shape[-1] >= 2:
                metrics["topk"] = topk_agreement(actual[name], reference[name], topk)
            smallest_atol = smallest_passing_tolerance(
                actual[name], reference[name], tolerance.rtol
            )
            metrics["smallest_passing_atol"] = finite_or_none(smallest_atol)
            metrics["smallest_passing_rtol"] = smallest_passing_rtol(actual[name], reference[name])
            failures = _case_failures(metrics, tolerance)
            row = {"case": case_name, "output": name, "metrics": metrics, "passed": not failures}
            if failures:
                row["reason"] = "; ".join(failures)
            rows.append(row)
            per_output[name].append(row)

    outputs = {
        name: _aggregate_output(per_output[name], _tolerance_for(tolerances, name))
        for name in output_names
    }
    decisions = None
    if decision_rule is not None:
        decisions = _decision_summary(cases, decision_rule)
    passed = all(o["passed"] for o in outputs.values()) and (
        decisions is None or decisions["passed"]
    )
    return {"passed": passed, "outputs": outputs, "cases": rows, "decisions": decisions}


def _aggregate_output(rows: list[dict], tolerance: Tolerance) -> dict:
    """Worst case and median over cases for one output, with its pass/fail reason."""
    metrics = [row["metrics"] for row in rows]

    def column(key):
        return [m[key] for m in metrics]

    worst_psnr_row = min(rows, key=lambda row: row["metrics"]["psnr_db"])
    summary: dict[str, Any] = {
        "cases": len(rows),
        "tolerance": tolerance.to_dict(),
        "max_abs": _worst(column("max_abs")),
        "median_max_abs": _median(column("max_abs")),
        "mean_abs": _worst(column("mean_abs")),
        "median_mean_abs": _median(column("mean_abs")),
        "max_rel": _worst(column("max_rel")),
        "within_fraction": _worst(column("within_fraction"), min),
        "median_within_fraction": _median(column("within_fraction")),
        "cosine": _worst(column("cosine"), min),
        "median_cosine": _median(column("cosine")),
        # Exact cases have infinite SNR and are left out of the minimum.
        "snr_db": _worst(column("snr_db"), min),
        "median_snr_db": _median(column("snr_db")),
        "psnr_db": worst_psnr_row["metrics"]["psnr_db"],
        "median_psnr_db": _median(column("psnr_db")),
        "worst_psnr_case": worst_psnr_row["case"],
        "exact": all(column("exact")),
        "nan_count": sum(column("nan_count")),
        "inf_count": sum(column("inf_count")),
    }
    # The smallest tolerance that passes every case is the largest per-case one.
    atols = column("smallest_passing_atol")
    summary["smallest_passing_atol"] = None if None in atols else max(atols)
    rtols = column("smallest_passing_rtol")
    summary["smallest_passing_rtol"] = None if None in rtols else max(rtols)

    topk_rows = [m["topk"] for m in metrics if "topk" in m]
    top1 = None
    if topk_rows:
        total = sum(t["rows"] for t in topk_rows)
        top1 = sum(t["top1_agreement"] * t["rows"] for t in topk_rows) / total
        summary["top1_agreement"] = top1
        summary["topk_overlap"] = sum(t["topk_overlap"] * t["rows"] for t in topk_rows) / total
        summary["topk_k"] = min(t["k"] for t in topk_rows)

    reasons = []
    failed_cases = [row for row in rows if not row["passed"]]
    if failed_cases:
        first = failed_cases[0]
        reasons.append(
            f"{len(failed_cases)} of {len(rows)} cases out of tolerance "
            f"(first {first['case']!r}: {first['reason']})"
        )
    # The top-1 gate only means something for an output with a class axis; scalar or
    # single-value outputs are judged on PSNR alone.
    summary["top1_gated"] = tolerance.min_top1 is not None and top1 is not None
    if summary["top1_gated"] and top1 < tolerance.min_top1:
        reasons.append(f"top-1 agreement {top1:.1%} < {tolerance.min_top1:.0%}")
    summary["passed"] = not reasons
    summary["reason"] = "; ".join(reasons) or None
    return summary


def _decision_summary(cases: list, rule: DecisionRule) -> dict:
    """Decision flips between reference and actual outputs over all cases."""
    flips, near, flips_near = [], [], []
    for case_name, actual, reference in cases:
        name = rule.output_name(reference)
        if name not in actual:
            raise BadInput(
                f"case {case_name!r}: output {name!r} is missing from the device's outputs"
            )
        ref_decision = rule.decide({name: reference[name]})
        act_decision = rule.decide({name: actual[name]})
        flipped = _decisions_differ(rule, act_decision["decisions"], ref_decision["decisions"])
        margin = _min_margin(ref_decision["margins"])
        is_near = margin is not None and margin < NEAR_THRESHOLD_BAND
        if flipped:
            flips.append(case_name)
        if is_near:
            near.append(case_name)
        if flipped and is_near:
            flips_near.append(case_name)
    total = len(cases)
    flip_rate = len(flips) / total
    near_flip_rate = len(flips_near) / len(near) if near else 0.0
    # Flips outside the fragile set count against the overall rate too.
    passed = flip_rate <= MAX_FLIP_RATE and near_flip_rate <= MAX_NEAR_THRESHOLD_FLIP_RATE
    return {
        "rule": str(rule),
        "output": rule.output_name(cases[0][2]),
        "total_cases": total,
        "flip_count": len(flips),
        "flips": flips,
        "flip_rate": flip_rate,
        "near_threshold_band": NEAR_THRESHOLD_BAND,
        "near_threshold_cases": near,
        "near_threshold_count": len(near),
        "flips_near_threshold": flips_near,
        "flips_near_threshold_count": len(flips_near),
        "near_threshold_flip_rate": near_flip_rate,
        "max_flip_rate": MAX_FLIP_RATE,
        "max_near_threshold_flip_rate": MAX_NEAR_THRESHOLD_FLIP_RATE,
        "passed": passed,
    }


def nonfinite_counts(outputs: dict) -> dict[str, dict]:
    """``{name: {nan, inf, size}}`` for each output holding NaN or ±Inf (empty when none)."""
    counts = {}
    for name, value in outputs.items():
        a = np.asarray(value)
        if a.dtype.kind not in "fc":
            continue
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        if nan or inf:
            counts[name] = {"nan": nan, "inf": inf, "size": int(a.size)}
    return counts


def default_tolerance_class(dtype: str) -> str:
    """fp32 for float32/float64 outputs, fp16 for float16, int8 for 8-bit integer outputs."""
    if dtype == "float16":
        return "fp16"
    if dtype in ("int8", "uint8"):
        return "int8"
    return "fp32"


def output_tolerances(outputs, overrides: dict) -> dict[str, Tolerance]:
    """Per output (``(name, dtype)`` pairs): the golden set's own tolerance (``overrides``)
    where it names one, else the default of the output's dtype class."""
    return {
        name: (
            Tolerance.from_dict(overrides[name])
            if overrides.get(name)
            else Tolerance.for_class(default_tolerance_class(dtype))
        )
        for name, dtype in outputs
    }


def measure_drift(runtime, golden, keep: dict | None = None) -> dict:
    """Run every golden case once on ``runtime`` and compare with the reference outputs.

    ``runtime`` is a loaded runtime adapter (``run``, ``outputs``); ``golden`` a golden
    set (``cases``, ``tolerances``, ``decision``). Per-output tolerances from the golden
    set win over the defaults of each output's dtype class. ``keep``, when given,
    receives each case's outputs by case name (to compare two runtimes with each other).
    """
    cases = []
    for case in golden.cases:
        actual = runtime.run(case.inputs)
        if keep is not None:
            keep[case.name] = actual
        cases.append((case.name, actual, case.outputs))
    return drift_of_cases(cases, runtime, golden)


def drift_of_cases(cases, runtime, golden) -> dict:
    """:func:`drift_report` of ``cases`` (``(name, actual, reference)``) with the golden set's
    tolerances and decision rule: what :func:`measure_drift` reports, for outputs the caller
    produced itself (the whole path from raw files, ``worker/pipeline.py``)."""
    tolerances = output_tolerances(
        [(spec.name, spec.dtype) for spec in runtime.outputs()], golden.tolerances
    )
    rule = parse_decision_rule(golden.decision) if golden.decision else None
    return drift_report(cases, tolerances, rule)
