"""Example models: built here, run in their real runtimes (onnxruntime, LiteRT), values checked."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ai_edge_litert.interpreter import Interpreter
from edgequal.host.errors import UsageError
from edgequal.host.examples.catalog import (
    EXAMPLES,
    build_all,
    build_example,
    example_inputs,
)

REPO = Path(__file__).resolve().parents[3]
NEAR_CASES = (1, 5, 9)  # example_inputs places these within 0.002 of the score threshold


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("examples"))


def run_onnx(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def litert(path: Path) -> Interpreter:
    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    return interp


def run_litert(interp: Interpreter, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], feeds[d["name"]])
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()}


def test_catalogue_names_files_and_rules():
    assert list(EXAMPLES) == [
        "classifier",
        "dynamic",
        "multi_input",
        "classifier_fp16",
        "classifier_qdq",
        "mid",
        "micro",
        "classifier_tflite",
        "classifier_int8",
        "unsupported_op",
        "nan_output",
    ]
    assert EXAMPLES["classifier"].filename == "classifier.onnx"
    assert EXAMPLES["classifier_tflite"].filename == "classifier.tflite"
    assert EXAMPLES["classifier_int8"].kind == "tflite"
    assert EXAMPLES["classifier"].decision_rule == "threshold:score>0.5"
    assert EXAMPLES["classifier_tflite"].decision_rule == "threshold:score>0.5"
    assert EXAMPLES["multi_input"].decision_rule == "argmax"
    assert EXAMPLES["classifier_int8"].decision_rule == "argmax"
    assert EXAMPLES["micro"].decision_rule is None
    for ex in EXAMPLES.values():
        assert ex.filename.endswith("." + ex.kind)
        assert ex.description


def test_the_int8_variant_drifts_and_flips_the_cases_just_above_the_threshold(models, tmp_path):
    """classifier_qdq against the float classifier on the demo's inputs: onnxruntime runs it
    as int8 kernels, its score sits about 0.01 lower, and exactly the near-threshold cases
    above the threshold (1, 9, 17 of 24) change their decision."""
    cases = example_inputs("classifier_qdq", 24)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    cpu = ["CPUExecutionProvider"]
    float_model = ort.InferenceSession(str(models["classifier"]), providers=cpu)
    int8_model = ort.InferenceSession(str(models["classifier_qdq"]), options, providers=cpu)
    ref = [float_model.run(["score"], c)[0].item() for c in cases]
    got = [int8_model.run(["score"], c)[0].item() for c in cases]
    drift = np.array(got) - np.array(ref)
    assert 1e-3 < float(np.abs(drift).max()) < 5e-2
    assert [i for i in range(24) if (ref[i] > 0.5) != (got[i] > 0.5)] == [1, 9, 17]
    ops = {n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node}
    assert "QLinearConv" in ops, ops  # the quantized pairs became int8 kernels


def test_build_all_writes_every_file(models):
    assert list(models) == list(EXAMPLES)
    for name, path in models.items():
        assert path.name == EXAMPLES[name].filename
        assert path.stat().st_size > 100
    assert models["classifier_tflite"].read_bytes()[4:8] == b"TFL3"


def test_builds_are_byte_identical(models, tmp_path):
    again = build_all(tmp_path)
    for name, path in models.items():
        assert again[name].read_bytes() == path.read_bytes(), name


def test_unknown_names_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="nope"):
        build_example("nope", tmp_path)
    with pytest.raises(UsageError):
        example_inputs("nope", 1)


def test_example_inputs_deterministic_and_prefix_stable():
    for name in EXAMPLES:
        eight = example_inputs(name, 8, seed=3)
        three = example_inputs(name, 3, seed=3)
        assert len(eight) == 8
        for a, b in zip(three, eight[:3], strict=True):
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
    a, b = example_inputs("micro", 1, seed=0), example_inputs("micro", 1, seed=1)
    assert not np.array_equal(a[0]["x"], b[0]["x"])


def test_classifier_onnx_values_and_near_threshold_cases(models):
    session = ort.InferenceSession(str(models["classifier"]))
    (inp,) = session.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("image", "tensor(float)", [1, 3, 32, 32])
    assert [(o.name, o.shape) for o in session.get_outputs()] == [
        ("probs", [1, 10]),
        ("score", [1, 1]),
    ]
    scores = []
    for case in example_inputs("classifier", 12):
        image = case["image"]
        assert image.dtype == np.float32 and image.shape == (1, 3, 32, 32)
        assert image.min() >= 0.0 and image.max() <= 1.0
        out = run_onnx(models["classifier"], case)
        assert out["probs"].dtype == np.float32 and out["probs"].shape == (1, 10)
        assert out["score"].dtype == np.float32 and out["score"].shape == (1, 1)
        assert abs(float(out["probs"].sum()) - 1.0) < 1e-5
        assert 0.0 < float(out["score"][0, 0]) < 1.0
        scores.append(float(out["score"][0, 0]))
    near = [scores[i] for i in NEAR_CASES]
    for i, s in zip(NEAR_CASES, near, strict=True):
        assert 1e-4 < abs(s - 0.5) < 2.5e-3, (i, s)
    # Alternating sides: case 1 and 9 above the threshold, case 5 below.
    assert near[0] > 0.5 > near[1] and near[2] > 0.5
    far = [s for i, s in enumerate(scores) if i not in NEAR_CASES]
    assert min(far) < 0.4 and max(far) > 0.6  # ordinary images land on both sides


def test_classifier_tflite_matches_onnx(models):
    interp = litert(models["classifier_tflite"])
    (inp,) = interp.get_input_details()
    assert inp["name"] == "image" and inp["dtype"] == np.float32
    assert list(inp["shape"]) == [1, 32, 32, 3]
    outs = {d["name"]: d for d in interp.get_output_details()}
    assert list(outs["probs"]["shape"]) == [1, 10] and outs["probs"]["dtype"] == np.float32
    assert list(outs["score"]["shape"]) == [1, 1] and outs["score"]["dtype"] == np.float32
    nchw = example_inputs("classifier", 6)
    nhwc = example_inputs("classifier_tflite", 6)
    for a, b in zip(nchw, nhwc, strict=True):
        np.testing.assert_array_equal(a["image"].transpose(0, 2, 3, 1), b["image"])
        got = run_litert(interp, b)
        ref = run_onnx(models["classifier"], a)
        assert abs(float(got["probs"].sum()) - 1.0) < 1e-5
        np.testing.assert_allclose(got["probs"], ref["probs"], atol=1e-5)
        np.testing.assert_allclose(got["score"], ref["score"], atol=1e-5)
    # The near-threshold case stays on the same side in both runtimes.
    assert float(run_litert(interp, nhwc[1])["score"][0, 0]) > 0.5
    assert float(run_litert(interp, nhwc[5])["score"][0, 0]) < 0.5


def test_classifier_fp16_runs_in_float16_close_to_fp32(models):
    session = ort.InferenceSession(
        str(models["classifier_fp16"]), providers=["CPUExecutionProvider"]
    )
    assert session.get_inputs()[0].type == "tensor(float16)"
    assert [o.type for o in session.get_outputs()] == ["tensor(float16)"] * 2
    for a, b in zip(
        example_inputs("classifier", 4), example_inputs("classifier_fp16", 4), strict=True
    ):
        assert b["image"].dtype == np.float16
        half = run_onnx(models["classifier_fp16"], b)
        full = run_onnx(models["classifier"], a)
        assert half["probs"].dtype == np.float16 and half["score"].shape == (1, 1)
        assert abs(float(half["probs"].astype(np.float32).sum()) - 1.0) < 5e-3
        np.testing.assert_allclose(half["probs"].astype(np.float32), full["probs"], atol=5e-3)
        np.testing.assert_allclose(half["score"].astype(np.float32), full["score"], atol=5e-3)


def test_dynamic_accepts_varying_shapes(models):
    session = ort.InferenceSession(str(models["dynamic"]))
    assert session.get_inputs()[0].shape == ["batch", 3, "height", "width"]
    assert session.get_outputs()[0].shape == ["batch", 8]
    cases = example_inputs("dynamic", 3)
    assert [c["image"].shape for c in cases] == [(1, 3, 32, 32), (2, 3, 32, 32), (1, 3, 48, 64)]
    for case in cases:
        emb = run_onnx(models["dynamic"], case)["embedding"]
        assert emb.dtype == np.float32 and emb.shape == (case["image"].shape[0], 8)
        assert emb.min() >= 0.0 and emb.max() > 0.0  # average of ReLU outputs
    # Each batch row is computed independently: row 0 of a batch equals that image alone.
    batch = cases[1]["image"]
    alone = run_onnx(models["dynamic"], {"image": batch[:1]})["embedding"]
    np.testing.assert_allclose(
        run_onnx(models["dynamic"], cases[1])["embedding"][:1], alone, atol=1e-6
    )


def test_multi_input_scales_linearly(models):
    session = ort.InferenceSession(str(models["multi_input"]))
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("features", "tensor(float)", [1, 16]),
        ("scale", "tensor(int64)", []),
    ]
    for case in example_inputs("multi_input", 4):
        assert case["scale"].shape == () and case["scale"].dtype == np.int64
        assert 1 <= int(case["scale"]) <= 4
        out = run_onnx(models["multi_input"], case)["out"]
        unit = run_onnx(
            models["multi_input"], {"features": case["features"], "scale": np.array(1, np.int64)}
        )["out"]
        assert out.shape == (1, 4) and out.dtype == np.float32
        np.testing.assert_allclose(out, unit * int(case["scale"]), rtol=1e-6)
        assert np.abs(unit).max() > 0.1


def test_mid_softmax(models):
    session = ort.InferenceSession(str(models["mid"]))
    assert session.get_inputs()[0].shape == [1, 3, 96, 96]
    for case in example_inputs("mid", 2):
        probs = run_onnx(models["mid"], case)["probs"]
        assert probs.shape == (1, 100) and probs.dtype == np.float32
        assert abs(float(probs.sum()) - 1.0) < 1e-5
        assert probs.max() > 0.02  # not uniform: the layers carry signal through


def test_micro_adds_constant(models):
    for case in example_inputs("micro", 3):
        y = run_onnx(models["micro"], case)["y"]
        np.testing.assert_allclose(y - case["x"], [[0.5, -1.0, 2.0, 0.25]], atol=1e-6)


def test_classifier_int8_quantized_io_and_values(models):
    interp = litert(models["classifier_int8"])
    (inp,) = interp.get_input_details()
    (out,) = interp.get_output_details()
    assert inp["name"] == "features" and inp["dtype"] == np.int8 and list(inp["shape"]) == [1, 64]
    in_scale, in_zp = inp["quantization"]
    assert in_scale == pytest.approx(6.0 / 255.0) and in_zp == -128
    assert out["name"] == "probs" and out["dtype"] == np.int8 and list(out["shape"]) == [1, 10]
    out_scale, out_zp = out["quantization"]
    assert out_scale == 1.0 / 256.0 and out_zp == -128
    # Float reference from the model's own dequantized weights and bias.
    tensors = {d["name"]: d for d in interp.get_tensor_details()}
    w_d, b_d = tensors["head/weight"], tensors["head/bias"]
    w = interp.get_tensor(w_d["index"]).astype(np.float64) * w_d["quantization"][0]
    b = interp.get_tensor(b_d["index"]).astype(np.float64) * b_d["quantization"][0]
    agree = 0
    cases = example_inputs("classifier_int8", 16)
    for case in cases:
        q = case["features"]
        assert q.dtype == np.int8 and q.shape == (1, 64)
        x = (q.astype(np.float64) - in_zp) * in_scale
        assert x.min() >= 0.0 and x.max() <= 6.0 + 1e-9
        probs_q = run_litert(interp, case)["probs"]
        assert probs_q.dtype == np.int8
        probs = (probs_q.astype(np.float64) - out_zp) * out_scale
        assert abs(probs.sum() - 1.0) < 0.02
        logits = x @ w.T + b
        ref = np.exp(logits - logits.max())
        ref /= ref.sum()
        assert np.abs(probs - ref).max() < 0.03
        agree += int(probs.argmax() == ref.argmax())
    assert agree >= 15
    # Inputs differ, and so do the decisions: the model is not constant.
    assert len({int(run_litert(interp, c)["probs"].argmax()) for c in cases}) >= 3


def test_unsupported_op_fails_to_load_naming_the_op(models):
    onnx.checker.check_model(onnx.load(str(models["unsupported_op"])))  # a valid graph
    with pytest.raises(Exception, match="Frobnicate"):
        ort.InferenceSession(str(models["unsupported_op"]), providers=["CPUExecutionProvider"])


def test_nan_output(models):
    for case in example_inputs("nan_output", 3):
        y = run_onnx(models["nan_output"], case)["y"]
        assert y.shape == (1, 4) and np.isnan(y).all()
    y = run_onnx(models["nan_output"], {"x": np.array([[14.0, 10.0, 11.0, 9.0]], np.float32)})["y"]
    np.testing.assert_allclose(y[0, :3], [2.0, 0.0, 1.0])
    assert np.isnan(y[0, 3])


@pytest.mark.parametrize("kind", ["empty", "truncated", "random"])
def test_corrupt_models_are_rejected(models, tmp_path, kind, corrupt_model_bytes):
    for name, pattern in (
        ("classifier", "Load model"),
        ("classifier_tflite", "not a valid Flatbuffer|null/empty"),
    ):
        src = models[name]
        dst = corrupt_model_bytes(kind, src, tmp_path / f"bad_{src.name}")
        data, orig = dst.read_bytes(), src.read_bytes()
        expected_size = {"empty": 0, "truncated": len(orig) // 2, "random": len(orig)}[kind]
        assert len(data) == expected_size and data != orig
        again = corrupt_model_bytes(kind, src, tmp_path / "again")
        assert again.read_bytes() == data
        with pytest.raises(Exception, match=pattern):
            if EXAMPLES[name].kind == "onnx":
                ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
            else:
                litert(dst)
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt_model_bytes("melted", models["micro"], tmp_path / "x")


def test_script_prints_name_path_size_sha256(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "make_example_models", REPO / "scripts" / "make_example_models.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path), "--only", "micro", "nan_output"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["micro", "nan_output"]
    for line in lines:
        name, path, size, unit, digest = line.split()
        data = Path(path).read_bytes()
        assert Path(path) == tmp_path / EXAMPLES[name].filename
        assert (int(size), unit) == (len(data), "B")
        assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
