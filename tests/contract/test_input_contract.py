"""The input contract: pure rules on known inputs, then each classic mismatch caught on a model
built for it, by a real qualification (onnxruntime in a worker)."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.contract.errors import BadInput
from edgequal.contract.input_contract import (
    InputContract,
    Preprocessing,
    contract_mismatches,
    describe_inputs,
    infer_layout,
)
from edgequal.contract.tensors import TensorSpec


def test_layout_is_read_from_the_side_the_channel_axis_is_on():
    assert infer_layout([1, 3, 224, 224]) == "NCHW"
    assert infer_layout([1, 224, 224, 3]) == "NHWC"
    assert infer_layout(["N", 3, "H", "W"]) == "NCHW"
    assert infer_layout([1, 3, 4, 3]) is None  # either side: cannot tell
    assert infer_layout([1, 3, 224]) is None


def test_the_expected_range_comes_from_what_was_declared():
    c = InputContract("x", "float32", (0.0, 1.0))
    assert c.expected_range() is None
    assert InputContract("x", "float32", (0, 1), model_range=(-1.0, 1.0)).expected_range() == (
        -1.0,
        1.0,
    )
    assert InputContract("x", "float32", (0, 1), scale=1 / 255).expected_range() == pytest.approx(
        (0.0, 1.0)
    )
    imagenet = InputContract("x", "float32", (0, 1), mean=(0.5, 0.25), std=(0.5, 0.25))
    # (0 - 0.5) / 0.5 = -1, (0 - 0.25) / 0.25 = -1; (1 - 0.5) / 0.5 = 1, (1 - 0.25) / 0.25 = 3
    assert imagenet.expected_range() == pytest.approx((-1.0, 3.0))
    pixels = InputContract("x", "float32", (0, 1), mean=(127.5,), std=(127.5,))
    assert pixels.expected_range() == pytest.approx((-1.0, 1.0))


def test_describe_inputs_reads_the_data_and_keeps_what_was_declared():
    cases = [
        {"image": np.zeros((1, 8, 8, 3), np.float32)},
        {"image": np.full((1, 8, 8, 3), 255.0, np.float32)},
    ]
    pre = describe_inputs(cases, {"image": {"range": [0, 1], "color_order": "bgr"}})
    c = pre.inputs["image"]
    assert (c.dtype, c.range_seen, c.layout) == ("float32", (0.0, 255.0), "NHWC")
    assert c.model_range == (0.0, 1.0) and c.color_order == "BGR"
    assert Preprocessing.from_json(pre.to_json()) == pre  # round trip through the manifest


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"image": {"layout": "NCWH"}}, "'layout' must be one of NCHW, NHWC"),
        ({"image": {"range": [1, 0]}}, "'range' must be [low, high]"),
        ({"image": {"mean": [0.5]}}, "give mean and std together"),
        ({"image": {"resize": [224]}}, "'resize' must be [height, width]"),
        ({"other": {"layout": "NCHW"}}, "input 'other', which the golden inputs do not have"),
    ],
)
def test_bad_declarations_are_refused_naming_the_field(declared, message):
    with pytest.raises(BadInput) as e:
        describe_inputs([{"image": np.zeros((1, 3, 2, 2), np.float32)}], declared)
    assert message in str(e.value)


def _pre(**fields) -> Preprocessing:
    base = {"name": "image", "dtype": "float32", "range_seen": (0.0, 1.0)}
    return Preprocessing({"image": InputContract(**{**base, **fields})})


def test_each_classic_mismatch_against_declared_specs():
    nchw = [TensorSpec("image", "float32", [1, 3, 8, 8])]
    assert contract_mismatches(_pre(layout="NCHW", model_range=(0.0, 1.0)), nchw) == []
    [m] = contract_mismatches(_pre(range_seen=(0.0, 255.0), model_range=(0.0, 1.0)), nchw)
    assert m["mismatch"] == "range" and m["input"] == "image"
    assert "span 0–255" in m["message"] and "trained on 0–1" in m["message"]
    assert "÷255" in m["hint"]
    # A slightly wider range than the one declared is augmentation, not a mismatch.
    assert contract_mismatches(_pre(range_seen=(-0.1, 1.2), model_range=(0.0, 1.0)), nchw) == []
    [m] = contract_mismatches(_pre(layout="NHWC"), nchw)
    assert m["mismatch"] == "layout" and "NHWC" in m["message"] and "takes NCHW" in m["message"]
    quantized = [TensorSpec("image", "int8", [1, 3, 8, 8], {"scale": 0.5, "zero_point": -3})]
    [m] = contract_mismatches(_pre(), quantized)
    assert m["mismatch"] == "dtype" and "float32" in m["message"] and "takes int8" in m["message"]
    assert "zero point -3" in m["message"]
    # An integer model is not range-checked against a float training range.
    ints = [TensorSpec("image", "uint8", [1, 3, 8, 8])]
    pre = _pre(dtype="uint8", range_seen=(0.0, 255.0), model_range=(0.0, 1.0))
    assert contract_mismatches(pre, ints) == []


# --- end to end: a real qualification of a model built for each mismatch --------------


def _onnx_model(path, input_dtype, shape):
    """``x`` (of ``input_dtype`` and ``shape``) -> Cast float -> ReduceSum -> ``y`` [1, 1]."""
    import onnx
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8}[input_dtype]
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["xf"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "contract",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    path.write_bytes(model.SerializeToString())
    return path


def _qualify(model, golden):
    from edgequal.agent.phases.qualification import run_measurement
    from edgequal.contract.plan import make_plan

    plan = make_plan("quick", cold_runs=1, latency_min_runs=10, latency_min_s=0.1)
    return run_measurement(model, golden, plan)


def _contract_findings(out):
    assert out["status"] == "failed"
    found = [f for f in out["findings"] if f["kind"] == "input_contract"]
    assert found and len(found) == len(out["findings"])
    assert "latency" not in out["results"]  # nothing measured on inputs the model does not take
    return found


@pytest.mark.slow
def test_pixels_into_a_model_trained_on_0_to_1_are_a_finding(tmp_path):
    from edgequal.host.golden import make_golden

    model = _onnx_model(tmp_path / "float.onnx", "float32", [1, 3, 8, 8])
    pixels = np.random.default_rng(0).integers(0, 256, (1, 3, 8, 8)).astype(np.float32)
    warnings: list[str] = []
    golden = tmp_path / "g.npz"
    make_golden(
        model,
        {"c0": {"x": pixels}},
        golden,
        preprocessing={"*": {"range": [0, 1]}},
        on_warning=warnings.append,
    )
    assert len(warnings) == 1 and "trained on 0–1" in warnings[0]
    [f] = _contract_findings(_qualify(model, golden))
    assert (f["input"], f["mismatch"]) == ("x", "range")
    assert "the golden inputs span 0–255" in f["message"]


@pytest.mark.slow
def test_nhwc_inputs_into_an_nchw_model_are_a_finding(tmp_path):
    from edgequal.host.golden import make_golden

    nhwc = _onnx_model(tmp_path / "nhwc.onnx", "float32", [1, 8, 8, 3])
    nchw = _onnx_model(tmp_path / "nchw.onnx", "float32", [1, 3, 8, 8])
    golden = tmp_path / "g.npz"
    make_golden(nhwc, {"c0": {"x": np.ones((1, 8, 8, 3), np.float32)}}, golden)
    [f] = _contract_findings(_qualify(nchw, golden))
    assert (f["input"], f["mismatch"]) == ("x", "layout")
    assert "golden inputs are NHWC, the model takes NCHW" in f["message"]
    assert "(0, 3, 1, 2)" in f["hint"]


@pytest.mark.slow
def test_a_float_golden_set_against_a_model_quantized_to_uint8_inputs_is_a_finding(tmp_path):
    from edgequal.host.golden import make_golden

    float_model = _onnx_model(tmp_path / "float.onnx", "float32", [1, 16])
    quantized = _onnx_model(tmp_path / "quantized.onnx", "uint8", [1, 16])
    golden = tmp_path / "g.npz"
    make_golden(float_model, {"c0": {"x": np.linspace(0, 1, 16, dtype=np.float32)[None]}}, golden)
    [f] = _contract_findings(_qualify(quantized, golden))
    assert (f["input"], f["mismatch"]) == ("x", "dtype")
    assert "golden inputs are float32, the model takes uint8" in f["message"]


@pytest.mark.slow
def test_a_golden_set_that_fits_its_model_passes_the_contract(tmp_path):
    from edgequal.host.golden import make_golden

    model = _onnx_model(tmp_path / "float.onnx", "float32", [1, 3, 8, 8])
    golden = tmp_path / "g.npz"
    data = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)
    make_golden(model, {"c0": {"x": data}}, golden, preprocessing={"*": {"range": [0, 1]}})
    out = _qualify(model, golden)
    assert not [f for f in out["findings"] if f["kind"] == "input_contract"]
    assert "latency" in out["results"]
