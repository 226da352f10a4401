"""The first divergent node from known tensors: hand-computed errors, tolerances and ranges."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.measure.divergence import (
    divergence_message,
    localize,
    merge_localizations,
    node_ranges,
    saturation,
    tensor_error,
    worst_case,
)

NODES = [
    {"name": "conv_0", "op_type": "Conv", "inputs": ["x", "w0"], "outputs": ["a"]},
    {"name": "", "op_type": "Relu", "inputs": ["a"], "outputs": ["b"]},
    {"name": "conv_2", "op_type": "Conv", "inputs": ["b", "w2"], "outputs": ["c"]},
    {"name": "head", "op_type": "Gemm", "inputs": ["c"], "outputs": ["y"]},
]


def test_tolerance_scales_with_the_reference_magnitude():
    ref = np.array([100.0, -200.0, 50.0], dtype=np.float32)
    got = ref + np.array([0.1, 0.0, 0.0], dtype=np.float32)
    err = tensor_error(ref, got, atol=1e-6, rtol=1e-3)
    assert err["scale"] == 200.0
    assert err["tolerance"] == pytest.approx(1e-6 + 0.2)
    assert err["max_abs"] == pytest.approx(0.1, rel=1e-3)
    assert err["ratio"] == pytest.approx(0.1 / 0.200001, rel=1e-3)  # within: 0.1 < 0.2
    small = tensor_error(ref / 1000, got / 1000 + np.float32(0.001))  # same shift, tiny tensor
    assert small["ratio"] > 1.0


def test_integer_tensors_allow_one_step_and_saturation_is_counted():
    ref = np.array([10, 20, 30, 40], dtype=np.int8)
    assert tensor_error(ref, ref + np.int8(1))["ratio"] < 1.0
    assert tensor_error(ref, ref + np.int8(3))["ratio"] > 1.0
    sat = saturation(np.array([127, 127, 3, -128], dtype=np.int8))
    assert sat == {"dtype": "int8", "low": 0.25, "high": 0.5, "saturated": True}
    assert saturation(np.zeros(3, np.float32)) is None
    # A ReLU's zeros at a uint8 zero point of 0 sit at the limit in the reference as well.
    relu = np.array([0, 0, 5, 9], dtype=np.uint8)
    assert saturation(relu)["saturated"] and not saturation(relu, relu)["saturated"]
    clipped = np.array([0, 0, 255, 255], dtype=np.uint8)
    assert saturation(clipped, relu)["more_than_reference"] == 0.5


def test_a_shape_or_nonfinite_difference_is_divergent():
    assert tensor_error(np.zeros((1, 2)), np.zeros((2, 1)))["shape_differs"] == [[1, 2], [2, 1]]
    assert tensor_error(np.zeros(3), np.array([0.0, np.nan, 0.0]))["nonfinite"] == 1


def _tensors(shift_c: float):
    rng = np.random.default_rng(3)
    ref = {n: rng.normal(size=16).astype(np.float32) for n in ("x", "a", "b", "c", "y")}
    got = {k: v.copy() for k, v in ref.items()}
    got["c"] = got["c"] + np.float32(shift_c)
    got["y"] = got["y"] + np.float32(3 * shift_c)
    return ref, got


def test_the_first_node_past_tolerance_is_named_with_its_inputs_and_growth():
    ref, got = _tensors(0.05)
    located = localize(NODES, ref, got, final_outputs=["y"])
    assert located["found"] and located["node"] == "conv_2" and located["index"] == 2
    assert located["op_type"] == "Conv" and located["output"] == "c"
    assert located["error"] == pytest.approx(0.05, rel=1e-4)
    assert located["error_before"] == 0.0  # its input b agrees exactly
    assert located["inputs"][0]["name"] == "b" and located["inputs"][0]["max_abs"] == 0.0
    scale_c, scale_y = np.abs(ref["c"]).max(), np.abs(ref["y"]).max()
    expected = (0.15 / (1e-6 + 1e-3 * scale_y)) / (0.05 / (1e-6 + 1e-3 * scale_c))
    assert located["growth"]["at_outputs"] == pytest.approx(expected, rel=1e-3)
    assert [c["divergent"] for c in located["curve"]] == [False, False, True, True]
    assert located["curve"][1]["node"] == "b"  # an unnamed node is named by its output
    message = divergence_message(located, "the reference path opt:disabled")
    assert message.startswith("first divergent node: conv_2 (Conv), error 0.05 from 0 before it")


def test_nothing_divergent_and_tensors_one_side_lacks():
    ref, got = _tensors(0.0)
    del got["a"]  # fused away on the divergent side
    located = localize(NODES, ref, got)
    assert not located["found"] and located["compared"] == 3 and located["skipped"] == 1
    assert "no node's output differs" in divergence_message(located, "x")


def test_ranges_fit_the_budget_and_merge_in_order():
    assert node_ranges([10, 10, 10, 10], 25) == [(0, 2), (2, 4)]
    assert node_ranges([30, 5, 5], 20) == [(0, 1), (1, 3)]  # too big alone: a range of its own
    assert node_ranges([], 10) == []
    ref, got = _tensors(0.05)
    first = localize([{**n, "outputs": []} if i >= 2 else n for i, n in enumerate(NODES)], ref, got)
    second = localize([{**n, "outputs": []} if i < 2 else n for i, n in enumerate(NODES)], ref, got)
    merged = merge_localizations([first, second])
    assert merged["node"] == "conv_2" and merged["compared"] == 4
    assert [c["index"] for c in merged["curve"]] == [0, 1, 2, 3]


def test_worst_case_prefers_flips_then_failures_then_lowest_psnr():
    rows = [
        {"case": "a", "passed": True, "metrics": {"psnr_db": 20.0, "max_abs": 1.0}},
        {"case": "b", "passed": False, "metrics": {"psnr_db": 40.0, "max_abs": 0.1}},
        {"case": "c", "passed": False, "metrics": {"psnr_db": 30.0, "max_abs": 0.2}},
    ]
    assert worst_case({"cases": rows}) == "c"
    assert worst_case({"cases": rows, "decisions": {"flips": ["b"]}}) == "b"
    assert worst_case({"cases": []}) is None
