"""Drift metrics, tolerances, decision rules and the drift report, on hand-computed arrays."""

import json
import math

import numpy as np
import pytest
from edgequal.agent.measure import drift
from edgequal.agent.measure.drift import DecisionRule, Tolerance
from edgequal.contract.errors import BadInput

FP32 = Tolerance.for_class("fp32")


def _assert_plain_json(value):
    """Only builtin JSON types (no numpy scalars), and no NaN or Inf anywhere."""
    if isinstance(value, dict):
        assert all(isinstance(k, str) for k in value)
        for item in value.values():
            _assert_plain_json(item)
    elif isinstance(value, list):
        for item in value:
            _assert_plain_json(item)
    else:
        assert value is None or type(value) in (bool, int, float, str), type(value)
    json.dumps(value, allow_nan=False)


# ---------------------------------------------------------------------------
# compare_arrays


def test_compare_one_element_off_by_half():
    reference = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    actual = np.array([1.0, 2.0, 3.0, 4.5], dtype=np.float32)
    m = drift.compare_arrays(actual, reference, atol=1e-4, rtol=1e-3)
    assert m["size"] == 4
    assert m["max_abs"] == 0.5
    assert m["mean_abs"] == 0.125
    # eps = 1e-6 * max|ref| = 4e-6
    assert m["max_rel"] == pytest.approx(0.5 / (4 + 4e-6), rel=1e-12)
    assert m["within_fraction"] == 0.75
    # <a, r> = 1 + 4 + 9 + 18 = 32, |a|^2 = 34.25, |r|^2 = 30
    assert m["cosine"] == pytest.approx(32 / math.sqrt(34.25 * 30), rel=1e-12)
    assert m["snr_db"] == pytest.approx(10 * math.log10(30 / 0.25), rel=1e-12)  # 20.79 dB
    # rmse = sqrt(0.25 / 4) = 0.25
    assert m["psnr_db"] == pytest.approx(20 * math.log10((4 + 1e-5) / (0.25 + 1e-10)), rel=1e-12)
    assert m["exact"] is False
    assert m["nan_count"] == 0 and m["inf_count"] == 0
    assert m["reference_nonfinite_count"] == 0


def test_compare_identical_is_exact_with_no_snr():
    reference = np.array([[1.0, -2.0], [3.0, 4.0]])
    m = drift.compare_arrays(reference.copy(), reference, atol=0, rtol=0)
    assert m["exact"] is True
    assert m["snr_db"] is None
    assert m["max_abs"] == 0.0 and m["max_rel"] == 0.0
    assert m["within_fraction"] == 1.0
    assert m["cosine"] == pytest.approx(1.0, abs=1e-15)
    assert m["psnr_db"] == pytest.approx(20 * math.log10((4 + 1e-5) / 1e-10))
    _assert_plain_json(m)


def test_compare_all_zero():
    zeros = np.zeros(3)
    m = drift.compare_arrays(zeros, zeros, atol=0, rtol=0)
    assert m["cosine"] == 1.0
    assert m["exact"] is True
    assert m["snr_db"] is None
    assert m["max_rel"] == 0.0


def test_compare_zero_reference_uses_tiny_eps():
    m = drift.compare_arrays(np.array([0.0, 1e-6]), np.zeros(2), atol=1e-4, rtol=0)
    assert m["max_rel"] == pytest.approx(1e-6 / 1e-12)
    assert m["cosine"] == 0.0
    assert m["snr_db"] is None  # no signal: undefined, and not exact
    assert m["exact"] is False
    assert m["within_fraction"] == 1.0


def test_compare_counts_nan_and_inf_without_crashing():
    actual = np.array([1.0, np.nan, 3.0, np.inf])
    reference = np.array([1.0, 2.0, 3.0, 4.0])
    m = drift.compare_arrays(actual, reference, atol=1e-4, rtol=1e-3)
    assert m["nan_count"] == 1
    assert m["inf_count"] == 1
    assert m["within_fraction"] == 0.5
    assert m["max_abs"] == 0.0  # over the finite elements
    assert m["exact"] is False
    _assert_plain_json(m)


def test_compare_matching_nonfinite_reference_counts_as_within():
    actual = np.array([1.0, np.nan, -np.inf])
    reference = np.array([1.0, np.nan, -np.inf])
    m = drift.compare_arrays(actual, reference, atol=0, rtol=0)
    assert m["within_fraction"] == 1.0
    assert m["reference_nonfinite_count"] == 2
    assert m["nan_count"] == 1 and m["inf_count"] == 1


def test_compare_rejects_shape_mismatch_naming_both_shapes():
    with pytest.raises(BadInput) as info:
        drift.compare_arrays(np.zeros((1, 10)), np.zeros((1, 1000)), 1e-4, 1e-3)
    assert "[1, 10]" in str(info.value) and "[1, 1000]" in str(info.value)


def test_compare_in_float64_even_for_float16_inputs():
    reference = np.array([1.0, 2.0], dtype=np.float16)
    actual = np.array([1.0, 2.001953125], dtype=np.float16)  # one fp16 ulp above 2
    m = drift.compare_arrays(actual, reference, atol=0, rtol=1e-4)
    assert m["max_abs"] == 0.001953125
    assert m["within_fraction"] == 0.5


# ---------------------------------------------------------------------------
# top-k


def test_topk_agreement_rows():
    actual = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]])
    reference = np.array([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]])
    result = drift.topk_agreement(actual, reference, k=2)
    # row 0: argmax 1 == 1, top-2 {1,2} == {1,2}; row 1: argmax 0 != 2, {0,1} vs {2,1}
    assert result == {"rows": 2, "k": 2, "top1_agreement": 0.5, "topk_overlap": 0.75}
    clamped = drift.topk_agreement(actual, reference, k=10)
    assert clamped["k"] == 3 and clamped["topk_overlap"] == 1.0


def test_topk_agreement_nan_scores_lose():
    actual = np.array([[np.nan, 0.2, 0.1]])
    reference = np.array([[0.9, 0.2, 0.1]])
    result = drift.topk_agreement(actual, reference, k=1)
    assert result["top1_agreement"] == 0.0


# ---------------------------------------------------------------------------
# tolerances


def test_tolerance_classes():
    assert Tolerance(atol=1e-4, rtol=1e-3, cls="fp32", elementwise=True) == FP32
    fp16 = Tolerance.for_class("fp16")
    assert fp16.min_psnr_db == 40.0 and fp16.elementwise is False
    int8 = Tolerance.for_class("int8")
    assert int8.min_psnr_db == 30.0 and int8.min_top1 == 0.95 and int8.elementwise is False
    with pytest.raises(BadInput):
        Tolerance.for_class("bf16")


def test_tolerance_from_dict():
    assert Tolerance.from_dict({"class": "fp16"}) == Tolerance.for_class("fp16")
    custom = Tolerance.from_dict({"atol": 1e-3, "rtol": 0})
    assert custom == Tolerance(atol=1e-3, rtol=0.0, cls="custom", elementwise=True)
    only_atol = Tolerance.from_dict({"atol": 0.5})
    assert only_atol.rtol == 1e-3  # missing numbers come from fp32
    looser = Tolerance.from_dict({"class": "int8", "min_top1": 0.9})
    assert looser.cls == "int8" and looser.min_top1 == 0.9 and looser.min_psnr_db == 30.0
    no_top1 = Tolerance.from_dict({"class": "int8", "min_top1": None})
    assert no_top1.min_top1 is None
    assert Tolerance.from_dict({}) == FP32
    assert Tolerance.from_dict(FP32.to_dict() | {"class": "fp32"}) == FP32
    assert FP32.to_dict()["class"] == "fp32"


@pytest.mark.parametrize(
    "bad",
    [
        {"atoll": 1e-3},
        {"atol": "1e-3"},
        {"atol": -1.0},
        {"atol": float("nan")},
        {"min_top1": 1.5},
        {"class": 16},
        {"elementwise": "yes"},
        ["atol", 1],
    ],
)
def test_tolerance_from_dict_rejects(bad):
    with pytest.raises(BadInput):
        Tolerance.from_dict(bad)


def test_smallest_passing_tolerance():
    reference = np.array([1.0, 2.0, 3.0, 4.0])
    actual = np.array([1.0, 2.0, 3.0, 4.5])
    # |a-r| - rtol*|r| at the last element: 0.5 - 1e-3*4 = 0.496
    assert drift.smallest_passing_tolerance(actual, reference, rtol=1e-3) == pytest.approx(0.496)
    assert drift.smallest_passing_tolerance(actual, reference, rtol=0.2) == 0.0
    assert drift.smallest_passing_rtol(actual, reference) == 0.125
    # The atol found really is the boundary: it passes, anything smaller does not.
    atol = drift.smallest_passing_tolerance(actual, reference, rtol=1e-3)
    assert drift.compare_arrays(actual, reference, atol, 1e-3)["within_fraction"] == 1.0
    assert drift.compare_arrays(actual, reference, atol * 0.99, 1e-3)["within_fraction"] == 0.75


def test_smallest_passing_tolerance_edge_cases():
    assert drift.smallest_passing_rtol(np.array([0.0, 1e-6]), np.zeros(2)) is None
    assert drift.smallest_passing_rtol(np.zeros(2), np.zeros(2)) == 0.0
    assert drift.smallest_passing_tolerance(np.array([np.nan]), np.array([1.0]), 0) == math.inf
    assert drift.smallest_passing_rtol(np.array([np.nan]), np.array([1.0])) is None


# ---------------------------------------------------------------------------
# decision rules


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("argmax", DecisionRule("argmax")),
        ("argmax:logits", DecisionRule("argmax", output="logits")),
        ("argmax:dense/Softmax:0", DecisionRule("argmax", output="dense/Softmax:0")),
        ("topk:5", DecisionRule("topk", k=5)),
        ("topk:3:scores", DecisionRule("topk", output="scores", k=3)),
        ("threshold:prob>0.5", DecisionRule("threshold", output="prob", op=">", threshold=0.5)),
        ("threshold:prob>=0.5", DecisionRule("threshold", output="prob", op=">=", threshold=0.5)),
        ("threshold:prob<0.25", DecisionRule("threshold", output="prob", op="<", threshold=0.25)),
        ("threshold:p<=-1e-3", DecisionRule("threshold", output="p", op="<=", threshold=-0.001)),
        (
            " threshold: prob >= 0.5 ",
            DecisionRule("threshold", output="prob", op=">=", threshold=0.5),
        ),
        ("threshold:>0.5", DecisionRule("threshold", op=">", threshold=0.5)),
    ],
)
def test_parse_decision_rule_forms(text, rule):
    parsed = drift.parse_decision_rule(text)
    assert parsed == rule
    assert drift.parse_decision_rule(str(parsed)) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "",
        "median",
        "argmax:",
        "topk",
        "topk:",
        "topk:0",
        "topk:x",
        "topk:3:",
        "threshold:prob",
        "threshold:prob>",
        "threshold:prob>abc",
        "threshold:prob>inf",
        "threshold:prob=0.5",
    ],
)
def test_parse_decision_rule_rejects_malformed(text):
    with pytest.raises(BadInput) as info:
        drift.parse_decision_rule(text)
    assert "threshold:OUTPUT>VALUE" in info.value.hint
    assert "topk:K" in info.value.hint


def test_argmax_and_topk_decisions_per_row():
    outputs = {"logits": np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]]), "other": np.zeros(2)}
    argmax = drift.parse_decision_rule("argmax").decide(outputs)
    assert argmax["output"] == "logits"  # no name: the first output
    assert argmax["decisions"] == [1, 0]
    assert argmax["margins"] == pytest.approx([0.5, 0.2])
    top2 = drift.parse_decision_rule("topk:2:logits").decide(outputs)
    assert top2["decisions"] == [[1, 2], [0, 1]]
    assert top2["margins"] == pytest.approx([0.1, 0.1])
    top3 = drift.parse_decision_rule("topk:3").decide(outputs)
    assert top3["margins"] == [None, None]  # k covers every class: nothing can change it
    _assert_plain_json(top3)


def test_threshold_decisions_and_margins():
    outputs = {"prob": np.array([[0.51], [0.2], [np.nan]])}
    result = drift.parse_decision_rule("threshold:prob>0.5").decide(outputs)
    assert result["decisions"] == [[True], [False], [False]]
    assert result["margins"][0][0] == pytest.approx(0.01)
    assert result["margins"][1][0] == pytest.approx(0.3)
    assert result["margins"][2] == [None]
    assert drift.parse_decision_rule("threshold:prob<=0.2").decide(outputs)["decisions"] == [
        [False],
        [True],
        [False],
    ]
    _assert_plain_json(result)


def test_decision_on_missing_output_names_it():
    with pytest.raises(BadInput) as info:
        drift.parse_decision_rule("argmax:scores").decide({"logits": np.zeros(3)})
    assert "scores" in str(info.value)


# ---------------------------------------------------------------------------
# drift report


def _prob_case(name, actual, reference):
    return (name, {"prob": np.array([[actual]])}, {"prob": np.array([[reference]])})


def test_report_threshold_flips_and_near_threshold_cases():
    cases = [
        _prob_case("a", 0.49, 0.51),  # flips, reference 0.01 from the threshold
        _prob_case("b", 0.30, 0.90),  # flips, far from the threshold
        _prob_case("c", 0.21, 0.20),  # no flip
        _prob_case("d", 0.5052, 0.505),  # near, no flip, within fp32 tolerance
    ]
    rule = drift.parse_decision_rule("threshold:prob>0.5")
    report = drift.drift_report(cases, FP32, rule)
    decisions = report["decisions"]
    assert decisions["rule"] == "threshold:prob>0.5"
    assert decisions["output"] == "prob"
    assert decisions["total_cases"] == 4
    assert decisions["flips"] == ["a", "b"]
    assert decisions["flip_count"] == 2
    assert decisions["flip_rate"] == 0.5
    assert decisions["near_threshold_cases"] == ["a", "d"]
    assert decisions["near_threshold_count"] == 2
    assert decisions["flips_near_threshold"] == ["a"]
    assert decisions["flips_near_threshold_count"] == 1
    assert decisions["passed"] is False
    assert report["passed"] is False

    prob = report["outputs"]["prob"]
    assert prob["max_abs"] == pytest.approx(0.6)
    assert prob["median_max_abs"] == pytest.approx((0.01 + 0.02) / 2)
    assert prob["passed"] is False
    assert "3 of 4 cases" in prob["reason"]
    assert [row["passed"] for row in report["cases"]] == [False, False, False, True]
    _assert_plain_json(report)


def test_report_passes_on_identical_outputs():
    logits = np.array([[0.1, 2.0, -1.0]])
    cases = [
        ("c1", {"logits": logits}, {"logits": logits}),
        ("c2", {"logits": logits * 2}, {"logits": logits * 2}),
    ]
    report = drift.drift_report(cases, FP32, drift.parse_decision_rule("argmax"))
    assert report["passed"] is True
    out = report["outputs"]["logits"]
    assert out["exact"] is True
    assert out["snr_db"] is None
    assert out["smallest_passing_atol"] == 0.0
    assert out["top1_agreement"] == 1.0
    assert out["reason"] is None
    assert report["decisions"]["flip_count"] == 0
    _assert_plain_json(report)


def test_report_fp16_gates_on_psnr():
    reference = np.array([1.0, 0.0, 0.0, 0.0])
    ok = np.array([1.0, 0.0, 0.0, 0.02])  # rmse 0.01: PSNR 20 log10(1.00001 / 0.01) = 40.0001 dB
    bad = reference + 0.011  # PSNR 39.17 dB
    tol = Tolerance.for_class("fp16")
    passing = drift.drift_report([("x", {"y": ok}, {"y": reference})], tol, None)
    assert passing["passed"] is True
    assert passing["outputs"]["y"]["psnr_db"] == pytest.approx(
        20 * math.log10(1.00001 / 0.01), rel=1e-6
    )
    # 0.02 > atol 1e-2 + rtol 1e-2 * 0: reported, not gated
    assert passing["outputs"]["y"]["within_fraction"] == 0.75
    assert passing["decisions"] is None
    failing = drift.drift_report(
        [("x", {"y": ok}, {"y": reference}), ("z", {"y": bad}, {"y": reference})], tol, None
    )
    assert failing["passed"] is False
    assert failing["outputs"]["y"]["worst_psnr_case"] == "z"
    assert "PSNR 39.2 dB < 40 dB" in failing["outputs"]["y"]["reason"]


def _int8_cases(flipped: int, total: int = 20):
    reference = np.array([[0.34, 0.33, 0.33]])
    swapped = np.array([[0.33, 0.34, 0.33]])  # PSNR 32.4 dB, argmax moves 0 -> 1
    return [
        (
            f"case{i}",
            {"scores": swapped if i < flipped else reference.copy()},
            {"scores": reference},
        )
        for i in range(total)
    ]


def test_report_int8_gates_on_pooled_top1():
    tol = Tolerance.for_class("int8")
    one_flip = drift.drift_report(_int8_cases(1), tol, None)
    assert one_flip["outputs"]["scores"]["top1_agreement"] == 0.95
    assert one_flip["outputs"]["scores"]["top1_gated"] is True
    assert one_flip["passed"] is True
    two_flips = drift.drift_report(_int8_cases(2), tol, None)
    assert two_flips["outputs"]["scores"]["top1_agreement"] == 0.9
    assert two_flips["passed"] is False
    assert "top-1 agreement 90.0% < 95%" in two_flips["outputs"]["scores"]["reason"]


def test_report_argmax_flip_rate_gate():
    report = drift.drift_report(
        _int8_cases(1), Tolerance.for_class("int8"), drift.parse_decision_rule("argmax")
    )
    # The reference top-1/top-2 gap is 0.01 (< 0.02): every case is near the boundary.
    assert report["decisions"]["near_threshold_count"] == 20
    assert report["decisions"]["flips"] == ["case0"]
    assert report["decisions"]["near_threshold_flip_rate"] == 0.05
    assert report["decisions"]["flip_rate"] == 0.05  # above the 0.5 % overall limit
    assert report["decisions"]["passed"] is False
    assert report["passed"] is False


def test_report_nan_output_fails_and_stays_json():
    cases = [("n", {"y": np.array([1.0, np.nan])}, {"y": np.array([1.0, 2.0])})]
    report = drift.drift_report(cases, FP32, None)
    out = report["outputs"]["y"]
    assert out["nan_count"] == 1
    assert out["passed"] is False
    assert "1 NaN" in out["reason"]
    assert out["smallest_passing_atol"] is None
    _assert_plain_json(report)


def test_report_per_output_tolerances():
    reference = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 2.0])}
    actual = {"a": np.array([1.0, 2.01]), "b": np.array([1.0, 2.01]), "extra": np.zeros(1)}
    report = drift.drift_report(
        [("c", actual, reference)], {"a": Tolerance.from_dict({"atol": 0.02})}, None
    )
    assert report["outputs"]["a"]["passed"] is True
    assert report["outputs"]["b"]["passed"] is False  # falls back to fp32
    assert report["outputs"]["b"]["tolerance"]["class"] == "fp32"
    assert report["outputs"]["b"]["smallest_passing_atol"] == pytest.approx(0.01 - 2e-3)
    assert report["outputs"]["b"]["smallest_passing_rtol"] == pytest.approx(0.005)
    assert set(report["outputs"]) == {"a", "b"}
    assert report["passed"] is False


def test_report_rejects_missing_output_and_bad_cases():
    with pytest.raises(BadInput) as info:
        drift.drift_report(
            [("c", {"a": np.zeros(1)}, {"a": np.zeros(1), "b": np.zeros(1)})], FP32, None
        )
    assert "'b'" in str(info.value) and "'c'" in str(info.value)
    with pytest.raises(BadInput) as info:
        drift.drift_report([("c", {"a": np.zeros(2)}, {"a": np.zeros(3)})], FP32, None)
    assert "'c'" in str(info.value) and "[2]" in str(info.value) and "[3]" in str(info.value)
    with pytest.raises(BadInput):
        drift.drift_report([], FP32, None)
