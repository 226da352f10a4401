"""host/judge/accuracy.py: the intervals against hand-computed values, the scores of an
agent's ``drift.labelled``, and the ``[accuracy]`` checks on them."""

from __future__ import annotations

import math

import pytest
from edgequal.host.judge.accuracy import (
    accuracy_checks,
    mcnemar_p,
    more_cases_to_decide,
    paired_difference_interval,
    per_class,
    score_labelled,
    wilson_interval,
)
from edgequal.host.judge.policy import parse_policy


def test_wilson_interval_matches_the_formula_by_hand():
    # 81 of 263: centre (p + z²/2n)/(1 + z²/n), half z·sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n).
    lo, hi = wilson_interval(81, 263)
    assert lo == pytest.approx(0.25529, abs=1e-5) and hi == pytest.approx(0.36621, abs=1e-5)
    # 0 of 10: the lower end is 0 and the upper z²/(n + z²), not the Wald interval's 0.
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1.959964**2 / (10 + 1.959964**2), rel=1e-6)
    assert wilson_interval(0, 0) is None


def test_paired_interval_is_newcombes_method_10():
    # 12 both right, 9 first only, 2 second only, 21 neither (n 44): D = 7/44, and the
    # interval from the two Wilson intervals and phi (ad - bc - n/2)/sqrt(margins).
    a, b, c, d = 12, 9, 2, 21
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n)
    l2, u2 = wilson_interval(a + c, n)
    phi = (a * d - b * c - n / 2) / math.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    lower = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    lo, hi = paired_difference_interval(a, b, c, d)
    assert lo == pytest.approx(lower) and lo == pytest.approx(0.011243, abs=1e-6)
    assert hi == pytest.approx(0.295372, abs=1e-6)
    # Swapping the discordant cells mirrors the interval.
    assert paired_difference_interval(a, c, b, d) == pytest.approx((-hi, -lo))
    # No discordant pair: an interval about 0 that narrows as the cases grow.
    narrow = paired_difference_interval(760, 0, 0, 37)
    assert narrow[0] == pytest.approx(-narrow[1]) and 0 < narrow[1] < 0.005


def test_mcnemar_is_the_exact_binomial_on_the_discordant_pairs():
    # 9 against 2: 2 * (C(11,0) + C(11,1) + C(11,2)) / 2^11 = 134/2048.
    assert mcnemar_p(9, 2) == pytest.approx(134 / 2048)
    assert mcnemar_p(0, 0) == 1.0


def test_per_class_precision_recall_f1():
    rows = per_class([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], names=["a", "b", "c"])
    by = {r["name"]: r for r in rows}
    assert by["a"]["precision"] == 0.5 and by["a"]["recall"] == 0.5 and by["a"]["f1"] == 0.5
    assert by["b"]["precision"] == pytest.approx(2 / 3) and by["b"]["recall"] == 1.0
    assert by["b"]["f1"] == pytest.approx(0.8)
    assert by["c"]["precision"] is None and by["c"]["recall"] == 0.0 and by["c"]["support"] == 1


def _labelled(pairs: list[tuple[bool, bool]], k: int = 2) -> dict:
    """``drift.labelled`` of cases whose (reference right, device right) are ``pairs``."""
    rows = []
    for i, (ref_ok, dev_ok) in enumerate(pairs):
        label = i % 3
        wrong = (label + 1) % 3
        rows.append(
            {
                "case": f"c{i}",
                "label": label,
                "reference": [label if ref_ok else wrong, 9],
                "device": [label if dev_ok else wrong, label],
            }
        )
    return {"task": "classification", "output": "probs", "k": k, "classes": None, "cases": rows}


def test_scores_of_labelled_cases():
    pairs = [(True, True)] * 80 + [(True, False)] * 12 + [(False, True)] * 3 + [(False, False)] * 5
    score = score_labelled(_labelled(pairs))
    assert score["cases"] == 100
    assert score["device"]["top1"]["correct"] == 83 and score["reference"]["top1"]["correct"] == 92
    assert score["device"]["topk"]["correct"] == 100  # the label is always second on the device
    paired = score["paired"]
    assert (paired["both"], paired["reference_only"], paired["device_only"]) == (80, 12, 3)
    assert paired["drop_points"] == pytest.approx(9.0)
    lo, hi = paired_difference_interval(80, 12, 3, 5)
    assert paired["drop_ci_points"] == pytest.approx([100 * lo, 100 * hi])
    assert paired["mcnemar_p"] == pytest.approx(mcnemar_p(12, 3))
    assert score_labelled({"task": "classification", "error": "no row"})["error"] == "no row"


def _results(pairs) -> dict:
    return {"drift": {"labelled": _labelled(pairs)}}


def test_a_drop_beyond_the_limit_with_confidence_fails():
    pairs = [(True, True)] * 80 + [(True, False)] * 12 + [(False, True)] * 3 + [(False, False)] * 5
    policy = parse_policy({"accuracy": {"max_drop": 0.5}})
    (check,) = accuracy_checks(_results(pairs), policy)
    assert not check.passed and check.name == "accuracy.max_drop"
    assert "with 95 % confidence" in check.message and "12 lost, 3 gained" in check.message


def test_a_straddling_drop_passes_and_says_how_many_cases_would_decide():
    pairs = [(True, True)] * 90 + [(True, False)] * 3 + [(False, True)] * 2 + [(False, False)] * 5
    policy = parse_policy({"accuracy": {"max_drop": 0.5}})
    (check,) = accuracy_checks(_results(pairs), policy)
    assert check.passed and "not decided" in check.message
    lo, hi = paired_difference_interval(90, 3, 2, 5)
    more = more_cases_to_decide(1.0, (100 * lo, 100 * hi), 0.5, 100)
    assert f"about {more} more labelled cases" in check.message and more > 100


def test_no_change_on_enough_cases_passes_within_the_limit():
    pairs = [(True, True)] * 760 + [(False, False)] * 37
    policy = parse_policy({"accuracy": {"max_drop": 0.5, "min_top1": 90}})
    drop, top1 = accuracy_checks(_results(pairs), policy)
    assert drop.passed and "within the limit" in drop.message
    assert top1.passed and "within" in top1.message


def test_more_cases_to_decide():
    # Half-width 2 points toward a limit 1 point away: four times the cases.
    assert more_cases_to_decide(3.0, (1.0, 5.0), 2.0, 100) == 300
    assert more_cases_to_decide(0.5, (-1.0, 2.0), 0.5, 100) is None


def test_an_accuracy_limit_without_labelled_cases_fails_and_says_how_to_measure():
    policy = parse_policy({"accuracy": {"max_drop": 0.5}})
    (check,) = accuracy_checks({"drift": {"passed": True}}, policy)
    assert not check.passed and "--labels" in check.message
    (check,) = accuracy_checks({"drift": {"labelled": {"error": "bad rows"}}}, policy)
    assert not check.passed and "bad rows" in check.message
    assert accuracy_checks({}, parse_policy({})) == []
