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
from edgequal.host.examples.weights import classifier_weights

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


def _int8_scores(path: Path, cases, level: str, optimized: Path | None = None) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.array([session.run(["score"], c)[0].item() for c in cases])


def test_the_int8_variant_drifts_and_flips_the_cases_just_above_the_threshold(models, tmp_path):
    """classifier_qdq against the float classifier on the demo's inputs, with onnxruntime's
    graph optimisation off (QuantizeLinear/DequantizeLinear and float kernels) and at its
    default (int8 kernels): its score sits about 0.02 lower both ways, and exactly the
    near-threshold cases above the threshold (1, 9, 17 of 24) change their decision."""
    cases = example_inputs("classifier_qdq", 24)
    ref = _int8_scores(models["classifier"], cases, "ORT_ENABLE_ALL")
    optimized = tmp_path / "optimized.onnx"
    plain = _int8_scores(models["classifier_qdq"], cases, "ORT_DISABLE_ALL")
    fused = _int8_scores(models["classifier_qdq"], cases, "ORT_ENABLE_ALL", optimized)
    for got in (plain, fused):
        drift = got - ref
        assert 0.01 < float(np.abs(drift).max()) < 0.1
        assert -0.04 < float(drift.mean()) < -0.01
        assert [i for i in range(24) if (ref[i] > 0.5) != (got[i] > 0.5)] == [1, 9, 17]
        # Every case that keeps its decision keeps it by a margin the drift cannot eat.
        assert float(np.abs(got - 0.5).min()) > 0.02
    # The int8 kernels compute what the float graph of the same quantized model does: both
    # ways agree to float32 rounding (a saturating kernel would move scores by up to 0.4).
    np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-5)
    ops = {n.op_type for n in onnx.load(optimized).graph.node}
    assert "QLinearConv" in ops, ops  # the quantized pairs became int8 kernels


# --- the int8 example on x86 without VNNI --------------------------------------------------
# onnxruntime's u8 x s8 kernels on AVX2 / AVX-512BW without VNNI multiply with vpmaddubsw:
# two adjacent products (u8 activation x s8 weight) added into an int16 that saturates at
# ±32767, then summed into int32. With VNNI (vpdpbusd), or on arm64, the sum is exact.

INT16_MAX = 32767


def _initializers(path: Path) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def _worst_pair(weights: np.ndarray, activation_max: int) -> int:
    """The largest |a1*w1 + a2*w2| any two weights of one output channel can make with
    activations in [0, activation_max]: the two largest |w| of the row, whatever the pairing
    (it depends on the kernel's packing)."""
    rows = np.sort(np.abs(weights.reshape(weights.shape[0], -1).astype(np.int64)), axis=1)
    return int(activation_max * (rows[:, -1] + rows[:, -2]).max())


def test_no_pair_of_the_int8_examples_products_can_saturate_int16(models):
    """By construction: the weights the model holds and the activations' uint8 range (zero
    point 0, so 0..255 whatever the input) keep every pair within int16."""
    init = _initializers(models["classifier_qdq"])
    # Every activation (image, ReLU, features) is quantized with this zero point.
    assert init["uint8.zero"].dtype == np.uint8 and int(init["uint8.zero"]) == 0
    activation_max = int(np.iinfo(np.uint8).max)
    conv, head = init["conv.weight_q"], init["head.weight_q"]
    assert conv.dtype == head.dtype == np.int8
    assert int(np.abs(conv).max()) == int(np.abs(head).max()) == 63  # reduce_range: 7 bits
    assert _worst_pair(conv, activation_max) <= 2 * 255 * 63 == 32130 <= INT16_MAX
    assert _worst_pair(head.T, activation_max) <= INT16_MAX  # Gemm: a column per output
    # The same weights in full 8 bits (what the example held before) reach almost twice int16.
    full = np.round(conv.astype(np.float64) * 127 / 63).clip(-127, 127)
    assert _worst_pair(full, activation_max) > 1.9 * INT16_MAX


def _conv_u8s8(xq: np.ndarray, wq: np.ndarray, saturate: bool) -> np.ndarray:
    """int32 [O,H,W] of a 3x3 'same' conv of uint8 [C,H,W] by int8 [O,C,3,3], accumulated
    as onnxruntime's im2col GEMM does in NHWC: K ordered (ky, kx, c), padded to even, adjacent
    pairs added first, each pair clipped to int16 when ``saturate`` (vpmaddubsw)."""
    c, h, w = xq.shape
    xp = np.pad(xq.astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    patches = np.stack(
        [xp[:, dy : dy + h, dx : dx + w].transpose(1, 2, 0) for dy in range(3) for dx in range(3)],
        axis=2,
    ).reshape(h, w, 9 * c)
    weights = wq.astype(np.int64).transpose(0, 2, 3, 1).reshape(wq.shape[0], 9 * c)
    if (9 * c) % 2:
        patches = np.concatenate([patches, np.zeros((h, w, 1), np.int64)], axis=2)
        weights = np.concatenate([weights, np.zeros((wq.shape[0], 1), np.int64)], axis=1)
    pairs = np.einsum(
        "hwkj,okj->ohwk", patches.reshape(h, w, -1, 2), weights.reshape(len(wq), -1, 2)
    )
    if saturate:
        pairs = np.clip(pairs, -INT16_MAX - 1, INT16_MAX)
    return pairs.sum(axis=-1)


def _emulated_qdq_scores(init: dict[str, np.ndarray], cases, saturate: bool) -> np.ndarray:
    """The QDQ classifier's score as onnxruntime's int8 conv computes it (requantized with
    round half to even, ReLU as the uint8 clamp), the rest in float64."""
    x_scale, w_scale, y_scale = init["image.scale"], init["conv.weight_scale"], init["relu.scale"]
    bias = np.round(
        init["conv.bias_q"] * init["conv.bias_scale"].astype(np.float64) / (x_scale * w_scale)
    ).astype(np.int64)
    multiplier = (x_scale * w_scale / y_scale).astype(np.float32).astype(np.float64)
    f_scale = float(init["features.scale"])
    head_w = init["head.weight_q"].astype(np.float64) * float(init["head.weight_scale"])
    head_b = init["head.bias_q"].astype(np.float64) * float(init["head.bias_scale"])
    scores = []
    for case in cases:
        xq = np.clip(np.rint(case["image"][0] / x_scale), 0, 255).astype(np.uint8)
        acc = _conv_u8s8(xq, init["conv.weight_q"], saturate) + bias[:, None, None]
        relu = np.clip(np.rint(acc * multiplier[:, None, None]), 0, 255) * float(y_scale)
        features = np.clip(np.rint(relu.mean(axis=(1, 2)) / f_scale), 0, 255) * f_scale
        scores.append(1 / (1 + np.exp(-(features @ head_w[:, 10] + head_b[10]))))
    return np.array(scores)


def test_emulated_non_vnni_kernels_give_the_int8_example_the_same_scores(models):
    """The int16-saturating path emulated in numpy: on the example it equals the exact path and
    onnxruntime's own scores on this machine. The same emulation with the 8-bit weights the
    example held before reproduces what onnxruntime measured on an AVX-512BW CPU without VNNI
    (issue 31: flips 1, 7, 9 and drift 0.418), so it models that kernel."""
    cases = example_inputs("classifier_qdq", 24)
    init = _initializers(models["classifier_qdq"])
    exact = _emulated_qdq_scores(init, cases, saturate=False)
    saturating = _emulated_qdq_scores(init, cases, saturate=True)
    np.testing.assert_array_equal(saturating, exact)
    measured = _int8_scores(models["classifier_qdq"], cases, "ORT_ENABLE_ALL")
    np.testing.assert_allclose(exact, measured, rtol=0, atol=1e-5)

    ref = _int8_scores(models["classifier"], cases, "ORT_ENABLE_ALL")
    w = classifier_weights()  # the float weights both models were quantized from
    conv_scale = (np.abs(w["conv_w"]).reshape(8, -1).max(axis=1) / 127).astype(np.float32)
    head_scale = np.float32(np.abs(w["gemm_w"]).max() / 127)
    before = {  # the model as it was: 8-bit weights, float biases
        **init,
        "conv.weight_q": np.round(w["conv_w"] / conv_scale[:, None, None, None]).astype(np.int8),
        "conv.weight_scale": conv_scale,
        "conv.bias_q": w["conv_b"],
        "conv.bias_scale": np.ones(8, np.float32),
        "head.weight_q": np.round(w["gemm_w"] / head_scale).astype(np.int8),
        "head.weight_scale": head_scale,
        "head.bias_q": w["gemm_b"],
        "head.bias_scale": np.float32(1),
    }
    assert _worst_pair(before["conv.weight_q"], 255) > INT16_MAX
    wide = _emulated_qdq_scores(before, cases, saturate=False)
    clipped = _emulated_qdq_scores(before, cases, saturate=True)
    assert round(float(np.abs(wide - ref).max()), 4) == 0.0175  # as ORT_DISABLE_ALL measured
    assert round(float(np.abs(clipped - ref).max()), 3) == 0.418  # as the int8 kernels did
    flips = [i for i in range(24) if (ref[i] > 0.5) != (clipped[i] > 0.5)]
    assert flips == [1, 7, 9]


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
