"""Accuracy on the device, scored on the host: top-1/top-k, per-class precision, recall and
F1, each with its 95 % interval, and the change against the reference paired on the same
cases; the ``[accuracy]`` gate checks.

The agent reports, per labelled case, the device's top-k and the reference's top-k beside
the label (``drift.labelled``, ``agent/measure/labelled.py``). Here:

- a proportion's interval is Wilson's score interval (Wilson 1927), which keeps its
  coverage near 0 and 1 where the normal approximation does not;
- the paired change (reference minus device, in percentage points) has Newcombe's
  interval for a difference of paired proportions (Newcombe 1998, Statistics in
  Medicine 17:2635, method 10: the two Wilson intervals combined with the pairs'
  correlation, corrected as he gives it), and McNemar's exact test on the
  discordant pairs (a two-sided binomial test at 1/2);
- ``[accuracy] max_drop`` fails only when the whole interval of the drop lies beyond
  the limit; an interval that straddles it passes and says about how many more labelled
  cases would decide (the interval narrows as 1/sqrt(n), the rates held).

Pure: the report's figures in, figures and checks out (docs/accuracy.md).
"""

from __future__ import annotations

import math

from .check_kit import NUMBER, Check, GateSection, fmt_value, section_absent

Z95 = 1.959963984540054
"""The standard normal's 97.5 % quantile: two-sided 95 % intervals."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion ``successes / n``; None when ``n`` is 0."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference_interval(
    both: int, first_only: int, second_only: int, neither: int, z: float = Z95
) -> tuple[float, float] | None:
    """Newcombe's (1998, method 10) interval for p1 - p2 of paired proportions, where p1 is
    ``(both + first_only) / n`` and p2 ``(both + second_only) / n``; None for no pairs."""
    n = both + first_only + second_only + neither
    if n == 0:
        return None
    p1, p2 = (both + first_only) / n, (both + second_only) / n
    l1, u1 = wilson_interval(both + first_only, n, z)
    l2, u2 = wilson_interval(both + second_only, n, z)
    margins = (
        (both + first_only)
        * (second_only + neither)
        * (both + second_only)
        * (first_only + neither)
    )
    # Newcombe's phi with his correction: ad - bc shrunk by n/2 towards 0 when positive.
    cross = both * neither - first_only * second_only
    cross = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    lower = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, d - lower), min(1.0, d + upper)


def mcnemar_p(first_only: int, second_only: int) -> float:
    """McNemar's exact two-sided p-value: the discordant pairs against a fair coin, twice
    the smaller tail of Binomial(n, 1/2) capped at 1 (what ``scipy.stats.binomtest`` gives
    at p 1/2), in exact integers: no scipy import for one sum."""
    n = first_only + second_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(first_only, second_only) + 1))
    return min(1.0, 2 * tail / 2**n)


def per_class(labels: list[int], predicted: list[int], names=None) -> list[dict]:
    """Per class (every class a label or a prediction names): support, precision, recall and
    F1 of the top-1 predictions, recall with its Wilson interval; None where undefined."""
    out = []
    for cls in sorted(set(labels) | set(predicted)):
        tp = sum(1 for t, p in zip(labels, predicted) if t == cls and p == cls)
        support = sum(1 for t in labels if t == cls)
        claimed = sum(1 for p in predicted if p == cls)
        precision = tp / claimed if claimed else None
        recall = tp / support if support else None
        f1 = (
            2 * precision * recall / (precision + recall)
            if precision is not None and recall is not None and precision + recall > 0
            else (0.0 if precision is not None and recall is not None else None)
        )
        ci = wilson_interval(tp, support)
        out.append(
            {
                "class": cls,
                "name": names[cls] if names and 0 <= cls < len(names) else str(cls),
                "support": support,
                "predicted": claimed,
                "precision": precision,
                "recall": recall,
                "recall_ci": list(ci) if ci else None,
                "f1": f1,
            }
        )
    return out


def _proportion(correct: int, n: int) -> dict:
    ci = wilson_interval(correct, n)
    return {"correct": correct, "value": correct / n if n else None, "ci": list(ci) if ci else None}


def score_labelled(labelled: dict) -> dict:
    """The scores of a report's ``drift.labelled``: ``{"task", "cases", "k", "device",
    "reference", "paired", "per_class", "macro_f1"}``; ``device`` and ``reference`` hold
    ``top1`` and ``topk`` (``correct``, ``value``, ``ci``), ``paired`` the top-1 pairs
    (``both``, ``reference_only``, ``device_only``, ``neither``), the drop in points
    with its interval and McNemar's p. ``{"error"}`` when the agent could not rank them."""
    if "error" in labelled:
        return {"task": labelled.get("task"), "error": labelled["error"]}
    if labelled.get("task", "classification") != "classification":
        from ..task_scores import score_task

        return score_task(labelled)
    rows = labelled.get("cases") or []
    n, k = len(rows), labelled.get("k")
    dev1 = [r["device"][:1] == [r["label"]] for r in rows]
    ref1 = [r["reference"][:1] == [r["label"]] for r in rows]
    devk = [r["label"] in r["device"] for r in rows]
    refk = [r["label"] in r["reference"] for r in rows]
    both = sum(d and r for d, r in zip(dev1, ref1))
    ref_only = sum(r and not d for d, r in zip(dev1, ref1))
    dev_only = sum(d and not r for d, r in zip(dev1, ref1))
    neither = n - both - ref_only - dev_only
    drop = paired_difference_interval(both, ref_only, dev_only, neither)
    labels = [r["label"] for r in rows]
    classes = per_class(
        labels, [r["device"][0] if r["device"] else -1 for r in rows], labelled.get("classes")
    )
    f1s = [c["f1"] for c in classes if c["support"] and c["f1"] is not None]
    return {
        "task": labelled.get("task"),
        "output": labelled.get("output"),
        "cases": n,
        "k": k,
        "unlabelled": len(labelled.get("unlabelled") or []),
        "device": {"top1": _proportion(sum(dev1), n), "topk": _proportion(sum(devk), n)},
        "reference": {"top1": _proportion(sum(ref1), n), "topk": _proportion(sum(refk), n)},
        "paired": {
            "both": both,
            "reference_only": ref_only,
            "device_only": dev_only,
            "neither": neither,
            "drop_points": 100 * (ref_only - dev_only) / n if n else None,
            "drop_ci_points": [100 * drop[0], 100 * drop[1]] if drop else None,
            "mcnemar_p": mcnemar_p(ref_only, dev_only),
        },
        "per_class": classes,
        "macro_f1": sum(f1s) / len(f1s) if f1s else None,
    }


def accuracy_of(results: dict) -> dict | None:
    """The scores of a report's results (:func:`score_labelled`), None without labelled cases."""
    labelled = (results.get("drift") or {}).get("labelled")
    return score_labelled(labelled) if labelled else None


def more_cases_to_decide(value: float, ci: tuple[float, float], limit: float, n: int) -> int | None:
    """About how many more cases would put the interval of ``value`` wholly on one side of
    ``limit``, the observed rates held (a half-width narrows as 1/sqrt(n)); None when the
    value sits on the limit (no number of cases decides it) or the interval has no width."""
    gap = abs(value - limit)
    half = (ci[1] - value) if value < limit else (value - ci[0])
    if gap <= 0 or half <= 0:
        return None
    return max(1, math.ceil(n * (half / gap) ** 2) - n)


def _interval_check(
    name: str, what: str, value, ci, limit: float, direction: str, n: int, detail: str
) -> Check:
    """A limit judged on an interval: ``max`` fails only when the interval's lower end is
    above the limit (``min``: its upper end below); a straddling interval passes, saying
    how many more labelled cases would decide."""
    sign = "≤" if direction == "max" else "≥"
    limit_text = f"{sign} {fmt_value(limit, 'points' if direction == 'max' else '%')}"
    unit = "points" if direction == "max" else "%"
    measured = f"{value:.2f} {unit} (95 % CI {ci[0]:.2f}–{ci[1]:.2f})"
    beyond = ci[0] > limit if direction == "max" else ci[1] < limit
    within = ci[1] <= limit if direction == "max" else ci[0] >= limit
    if beyond:
        verb = "above" if direction == "max" else "below"
        message = (
            f"{what} {measured} is {verb} the limit {limit_text} with 95 % confidence ({detail})"
        )
        return Check(name, "accuracy", False, limit_text, measured, message)
    if within:
        return Check(
            name,
            "accuracy",
            True,
            limit_text,
            measured,
            f"{what} {measured} is within the limit {limit_text} ({detail})",
        )
    more = more_cases_to_decide(value, ci, limit, n)
    decide = (
        f"about {more} more labelled cases would decide it"
        if more is not None
        else "it sits on the limit: no number of cases decides it"
    )
    message = f"{what} {measured} straddles the limit {limit_text}: not decided, passed; {decide} ({detail})"
    return Check(name, "accuracy", True, limit_text, measured, message)


def accuracy_checks(results: dict, policy) -> list[Check]:
    """``[accuracy]``: ``max_drop`` (points, the paired top-1 drop against the reference) and
    ``min_top1`` (percent, the device's top-1), each judged on its 95 % interval."""
    limits = policy.accuracy
    if not limits:
        return []
    score = accuracy_of(results)
    if score is None:
        return [
            section_absent(
                "accuracy", "labelled cases", "qualify with a golden set made with --labels FILE"
            )
        ]
    if "error" in score:
        return [
            Check(
                "accuracy.labelled", "accuracy", False, "ranked", "—", f"accuracy: {score['error']}"
            )
        ]
    n = score["cases"]
    paired = score["paired"]
    if score.get("task", "classification") != "classification":
        return _task_checks(score, limits)
    checks = []
    if "max_drop" in limits:
        detail = (
            f"top-1 {100 * score['device']['top1']['value']:.2f} % on the device against "
            f"{100 * score['reference']['top1']['value']:.2f} % for the reference, paired on {n} "
            f"cases; {paired['reference_only']} lost, {paired['device_only']} gained, "
            f"McNemar p {paired['mcnemar_p']:.3g}"
        )
        checks.append(
            _interval_check(
                "accuracy.max_drop",
                "top-1 drop",
                paired["drop_points"],
                paired["drop_ci_points"],
                limits["max_drop"],
                "max",
                n,
                detail,
            )  # fmt: skip
        )
    if "min_top1" in limits:
        top1 = score["device"]["top1"]
        checks.append(
            _interval_check(
                "accuracy.min_top1",
                "device top-1",
                100 * top1["value"],
                [100 * x for x in top1["ci"]],
                limits["min_top1"],
                "min",
                n,
                f"{top1['correct']} of {n} labelled cases, Wilson interval",
            )  # fmt: skip
        )
    return checks


def _task_checks(score: dict, limits: dict) -> list[Check]:
    """``max_drop`` on a detection, segmentation or vad set's headline metric (mAP@0.5:0.95,
    mean IoU, VAD frame F1), judged on the paired bootstrap interval of its drop;
    ``min_top1`` is classification's and fails here, naming the task."""
    from ..task_scores import NAMES

    n, paired, head = score["cases"], score["paired"], score["headline"]
    checks = []
    if "max_drop" in limits and paired["drop_ci_points"] is None:
        checks.append(
            Check("accuracy.max_drop", "accuracy", False, "scored", "—", "no labelled cases")
        )
    elif "max_drop" in limits:
        detail = (
            f"{NAMES[head]} {100 * score['device'][head]['value']:.2f} % on the device against "
            f"{100 * score['reference'][head]['value']:.2f} % for the reference, paired bootstrap "
            f"over {n} cases, {paired['resamples']} resamples"
        )
        checks.append(
            _interval_check(
                "accuracy.max_drop",
                f"{NAMES[head]} drop",
                paired["drop_points"],
                paired["drop_ci_points"],
                limits["max_drop"],
                "max",
                n,
                detail,
            )  # fmt: skip
        )
    if "min_top1" in limits:
        message = f"accuracy: min_top1 is for classification, this golden set is {score['task']}"
        checks.append(Check("accuracy.min_top1", "accuracy", False, "top-1", "—", message))
    return checks


def labels_summary(labels: dict | None) -> dict | None:
    """What ``golden make`` says of a labelled set: its cases and the reference's own score."""
    if not labels:
        return None
    ref = labels.get("reference") or {}
    n = ref.get("cases") or 0
    if labels.get("task", "classification") != "classification":
        from ..task_scores import NAMES

        figures = ", ".join(f"{NAMES[k]} {v:.2f} %" for k, v in ref.items() if k in NAMES)
        return {
            "task": labels.get("task"),
            "cases": n,
            "reference": {k: v for k, v in ref.items() if k in NAMES},
            "line": f"{n} labelled {labels['task']} cases, reference {figures}",
        }
    top1 = ref.get("top1_correct", 0) / n if n else None
    ci = wilson_interval(ref.get("top1_correct", 0), n)
    line = f"{n} labelled cases, reference top-1 " + (
        f"{100 * top1:.2f} % (95 % CI {100 * ci[0]:.2f}–{100 * ci[1]:.2f})" if ci else "—"
    )
    return {
        "task": labels.get("task"),
        "cases": n,
        "k": labels.get("k"),
        "reference_top1": top1,
        "reference_top1_ci": list(ci) if ci else None,
        "reference_topk": ref.get("topk_correct", 0) / n if n else None,
        "line": line,
    }


def accuracy_text(score: dict) -> str:
    """One line of a report's accuracy (:func:`score_labelled`), as the summary and the page
    show it beside drift: the device's top-1 and top-k, the reference's, the paired drop."""
    if "error" in score:
        return f"accuracy not scored: {score['error']}"
    if score.get("task", "classification") != "classification":
        from ..task_scores import task_text

        return task_text(score)

    def pct(p: dict) -> str:
        if p["value"] is None:
            return "—"
        return f"{100 * p['value']:.2f} % (95 % CI {100 * p['ci'][0]:.2f}–{100 * p['ci'][1]:.2f})"

    dev, ref, paired = score["device"], score["reference"], score["paired"]
    line = (
        f"accuracy on {score['cases']} labelled cases: top-1 {pct(dev['top1'])}, "
        f"top-{score['k']} {100 * (dev['topk']['value'] or 0):.2f} %; reference top-1 "
        f"{100 * (ref['top1']['value'] or 0):.2f} %"
    )
    if paired["drop_ci_points"] is not None:
        lo, hi = paired["drop_ci_points"]
        line += (
            f"; drop {paired['drop_points']:.2f} points (95 % CI {lo:.2f}–{hi:.2f}, "
            f"{paired['reference_only']} lost, {paired['device_only']} gained, "
            f"McNemar p {paired['mcnemar_p']:.3g})"
        )
    return line


def labelled_cases(results: dict, check: Check) -> int | None:
    """The labelled golden cases the accuracy figures rest on."""
    labelled = (results.get("drift") or {}).get("labelled") or {}
    return len(labelled.get("cases") or []) or None


# Points and percent, each judged on its interval.
SECTION = GateSection(
    "accuracy",
    keys={"max_drop": NUMBER, "min_top1": NUMBER},
    checks=accuracy_checks,
    sample_size=labelled_cases,
)
