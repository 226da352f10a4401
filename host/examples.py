"""Example models for edgequal's tests, demo and benchmarks, built locally with no download.

Every model is generated from code: ONNX graphs with ``onnx.helper`` and TFLite
flatbuffers with the LiteRT schema's object API. Weights come from
``numpy.random.default_rng`` with a fixed seed per model and calibration constants
are rounded to a few decimals, so a build writes byte-identical files every time.

``onnx``, ``flatbuffers`` and ``ai_edge_litert`` (for its flatbuffer schema) are
imported only when a model of that kind is built, so importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
from edgequal.host.errors import UsageError

# Opset 17 / IR 8 load in every onnxruntime since 1.14, which covers the runtimes
# shipped for Raspberry Pi OS and JetPack 6.
_ONNX_OPSET = 17
_ONNX_IR_VERSION = 8
_PRODUCER = "edgequal.examples"

# The classifier's score threshold (its decision rule) and how close the
# near-threshold example inputs are placed to it, in score units.
_SCORE_THRESHOLD = 0.5
_NEAR_MIN = 2e-4
_NEAR_MAX = 2e-3


@dataclass(frozen=True)
class ExampleModel:
    """One example model: where it goes, what it is, and the function that writes it."""

    name: str
    filename: str
    kind: str  # "onnx" | "tflite"
    description: str
    decision_rule: str | None
    build: Callable[[Path], None]


# --------------------------------------------------------------------------------------
# Synthetic inputs


def _natural_images(rng: np.random.Generator, n: int, height: int, width: int) -> np.ndarray:
    """Image-like float32 [n,3,H,W] in [0,1]: colour, gradient, blob, stripes and noise.

    Plain uniform noise would make every global-average-pooled feature nearly equal;
    these images differ in colour and structure, so pooled features (and the
    classifier's score) spread over a realistic range.
    """
    ys, xs = np.meshgrid(np.linspace(0.0, 1.0, height), np.linspace(0.0, 1.0, width), indexing="ij")
    out = np.empty((n, 3, height, width), dtype=np.float32)
    for i in range(n):
        base = rng.uniform(0.1, 0.9, size=3)
        angle = rng.uniform(0.0, 2 * np.pi)
        grad = (np.cos(angle) * (xs - 0.5) + np.sin(angle) * (ys - 0.5)) * rng.uniform(0.0, 0.6)
        cy, cx, radius = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.1, 0.35)
        blob = np.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * radius**2))
        blob_colour = rng.uniform(-0.5, 0.5, size=3)
        freq, phase = rng.uniform(1.0, 6.0), rng.uniform(0.0, 2 * np.pi)
        stripes = np.sin(2 * np.pi * freq * (xs + 0.3 * ys) + phase) * rng.uniform(0.0, 0.2)
        noise = rng.normal(0.0, 0.03, size=(3, height, width))
        img = (
            base[:, None, None]
            + grad[None]
            + blob_colour[:, None, None] * blob[None]
            + stripes[None]
            + noise
        )
        out[i] = np.clip(img, 0.0, 1.0)
    return out


# --------------------------------------------------------------------------------------
# Numpy reference maths (used for calibration and for placing near-threshold inputs)


def _conv3x3_same(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 stride-1 'same' convolution of NCHW float64 x with OIHW weights w."""
    n, _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), dtype=np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum(
                "oc,nchw->nohw", w[:, :, dy, dx], padded[:, :, dy : dy + h, dx : dx + wd]
            )
    return out + b[None, :, None, None]


def _pooled_features(images: np.ndarray, conv_w: np.ndarray, conv_b: np.ndarray) -> np.ndarray:
    """Conv3x3 -> ReLU -> global average pool, as float64 [n, C]."""
    act = np.maximum(_conv3x3_same(images.astype(np.float64), conv_w, conv_b), 0.0)
    return act.mean(axis=(2, 3))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


# --------------------------------------------------------------------------------------
# Weights (deterministic; calibrated against a fixed set of synthetic images)


def _classifier_weights() -> dict[str, np.ndarray]:
    """Weights of the 32x32 classifier: conv [8,3,3,3], gemm [8,11] (10 classes + score).

    The class columns are scaled so logits spread with std ~1.5, and the score column
    so its logit has std ~2 and median 0 over typical images, putting about half of
    them on each side of the 0.5 threshold.
    """
    rng = np.random.default_rng(1001)
    conv_w = rng.normal(0.0, np.sqrt(2.0 / 27.0), size=(8, 3, 3, 3))
    conv_b = rng.normal(0.0, 0.05, size=8)
    cls_w = rng.normal(0.0, 1.0, size=(8, 10))
    cls_b = rng.normal(0.0, 0.1, size=10)
    score_w = rng.normal(0.0, 1.0, size=(8, 1))
    # Round to float32 first so calibration sees exactly what the models will hold.
    conv_w, conv_b = conv_w.astype(np.float32), conv_b.astype(np.float32)
    calib = _natural_images(np.random.default_rng(1002), 64, 32, 32)
    feats = _pooled_features(calib, conv_w.astype(np.float64), conv_b.astype(np.float64))
    feats_c = feats - feats.mean(axis=0)
    cls_gain = round(1.5 / float(np.std(feats_c @ cls_w)), 3)
    score_logit = (feats @ score_w)[:, 0]
    score_gain = round(2.0 / float(np.std(score_logit)), 3)
    score_b = round(-float(np.median(score_logit)) * score_gain, 4)
    gemm_w = np.concatenate([cls_w * cls_gain, score_w * score_gain], axis=1).astype(np.float32)
    gemm_b = np.concatenate([cls_b, [score_b]]).astype(np.float32)
    return {"conv_w": conv_w, "conv_b": conv_b, "gemm_w": gemm_w, "gemm_b": gemm_b}


def _classifier_score(images: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """Reference score (sigmoid of the last Gemm column) for NCHW images, float64 [n]."""
    feats = _pooled_features(images, w["conv_w"].astype(np.float64), w["conv_b"].astype(np.float64))
    logit = feats @ w["gemm_w"][:, 10].astype(np.float64) + float(w["gemm_b"][10])
    return _sigmoid(logit)


def _dynamic_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2001)
    return {
        "conv_w": rng.normal(0.0, np.sqrt(2.0 / 27.0), size=(8, 3, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0.0, 0.05, size=8).astype(np.float32),
    }


def _multi_input_weights() -> np.ndarray:
    return np.random.default_rng(3001).normal(0.0, 0.5, size=(16, 4)).astype(np.float32)


_MICRO_CONSTANT = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
# (out_channels, stride) per Conv 3x3 + ReLU: ~175 MFLOP, about 2 ms on one x86 core.
_MID_LAYERS = ((32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1))
_MID_CLASSES = 100

# classifier_int8: input [1,64] post-ReLU-like features in [0, 6], quantized to int8.
_INT8_IN_FEATURES = 64
_INT8_CLASSES = 10
_INT8_IN_SCALE = 6.0 / 255.0
_INT8_IN_ZERO_POINT = -128
# TFLite's int8 SOFTMAX kernel only accepts this output quantization.
_INT8_SOFTMAX_SCALE = 1.0 / 256.0
_INT8_SOFTMAX_ZERO_POINT = -128


def _int8_features(rng: np.random.Generator, n: int) -> np.ndarray:
    """Float32 [n,64] feature vectors in [0, 6], like a ReLU6 embedding."""
    return np.clip(rng.normal(0.6, 1.2, size=(n, _INT8_IN_FEATURES)), 0.0, 6.0).astype(np.float32)


def _quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Affine int8 quantization: clip(round(x / scale) + zero_point, -128, 127)."""
    q = np.round(x.astype(np.float64) / scale) + zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def _int8_classifier_params() -> dict[str, object]:
    """Quantized weights and the calibrated logit quantization of the int8 classifier."""
    rng = np.random.default_rng(8001)
    w = rng.normal(0.0, 0.12, size=(_INT8_CLASSES, _INT8_IN_FEATURES))
    b = rng.normal(0.0, 0.2, size=_INT8_CLASSES)
    w_scale = float(np.float32(round(float(np.abs(w).max()) / 127.0, 6)))
    w_q = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    bias_scale = _INT8_IN_SCALE * w_scale
    b_q = np.round(b / bias_scale).astype(np.int32)
    # Logit range over calibration features, widened 10 % so real inputs rarely clip.
    calib = _int8_features(np.random.default_rng(8002), 256)
    x_q = _quantize(calib, _INT8_IN_SCALE, _INT8_IN_ZERO_POINT).astype(np.float64)
    x_deq = (x_q - _INT8_IN_ZERO_POINT) * _INT8_IN_SCALE
    logits = x_deq @ (w_q.astype(np.float64) * w_scale).T + b_q * bias_scale
    lo, hi = float(logits.min()) * 1.1, float(logits.max()) * 1.1
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    out_scale = round((hi - lo) / 255.0, 5)
    out_zero_point = int(np.clip(round(-128 - lo / out_scale), -128, 127))
    return {
        "w_q": w_q,
        "w_scale": w_scale,
        "b_q": b_q,
        "bias_scale": bias_scale,
        "logit_scale": out_scale,
        "logit_zero_point": out_zero_point,
    }


# --------------------------------------------------------------------------------------
# ONNX writers


def _write_onnx(model, path: Path, check: bool = True) -> None:
    """Check (unless told not to) and write an ONNX model with deterministic bytes."""
    import onnx

    model.producer_name = _PRODUCER
    model.producer_version = "1"
    if check:
        onnx.checker.check_model(model, full_check=True)
    Path(path).write_bytes(model.SerializeToString(deterministic=True))


def _onnx_model(nodes, name, inputs, outputs, initializers, doc, extra_opsets=()):
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", _ONNX_OPSET), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=_ONNX_IR_VERSION)
    model.doc_string = doc
    return model


def _build_classifier_onnx(path: Path, float16: bool = False) -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = _classifier_weights()
    dtype = np.float16 if float16 else np.float32
    elem = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(w["conv_w"].astype(dtype), "conv.weight"),
        numpy_helper.from_array(w["conv_b"].astype(dtype), "conv.bias"),
        numpy_helper.from_array(w["gemm_w"].astype(dtype), "head.weight"),
        numpy_helper.from_array(w["gemm_b"].astype(dtype), "head.bias"),
        numpy_helper.from_array(np.array([10, 1], dtype=np.int64), "head.split"),
    ]
    nodes = [
        helper.make_node(
            "Conv",
            ["image", "conv.weight", "conv.bias"],
            ["conv"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "head.weight", "head.bias"], ["head"]),
        helper.make_node("Split", ["head", "head.split"], ["logits", "score_logit"], axis=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("Sigmoid", ["score_logit"], ["score"]),
    ]
    model = _onnx_model(
        nodes,
        "classifier_fp16" if float16 else "classifier",
        [helper.make_tensor_value_info("image", elem, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("probs", elem, [1, 10]),
            helper.make_tensor_value_info("score", elem, [1, 1]),
        ],
        inits,
        _DESCRIPTIONS["classifier_fp16" if float16 else "classifier"],
    )
    _write_onnx(model, path)


def _build_classifier(path: Path) -> None:
    _build_classifier_onnx(path, float16=False)


def _build_classifier_fp16(path: Path) -> None:
    _build_classifier_onnx(path, float16=True)


def _build_dynamic(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = _dynamic_weights()
    nodes = [
        helper.make_node(
            "Conv",
            ["image", "conv.weight", "conv.bias"],
            ["conv"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["embedding"], axis=1),
    ]
    model = _onnx_model(
        nodes,
        "dynamic",
        [
            helper.make_tensor_value_info(
                "image", TensorProto.FLOAT, ["batch", 3, "height", "width"]
            )
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 8])],
        [
            numpy_helper.from_array(w["conv_w"], "conv.weight"),
            numpy_helper.from_array(w["conv_b"], "conv.bias"),
        ],
        _DESCRIPTIONS["dynamic"],
    )
    _write_onnx(model, path)


def _build_multi_input(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Cast", ["scale"], ["scale_f"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["features", "weight"], ["proj"]),
        helper.make_node("Mul", ["proj", "scale_f"], ["out"]),
    ]
    model = _onnx_model(
        nodes,
        "multi_input",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16]),
            helper.make_tensor_value_info("scale", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(_multi_input_weights(), "weight")],
        _DESCRIPTIONS["multi_input"],
    )
    _write_onnx(model, path)


def _build_mid(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5001)
    nodes, inits = [], []
    prev, prev_ch = "image", 3
    for i, (ch, stride) in enumerate(_MID_LAYERS):
        # He init keeps activations from vanishing through the stack.
        cw = rng.normal(0.0, np.sqrt(2.0 / (prev_ch * 9)), size=(ch, prev_ch, 3, 3)).astype(
            np.float32
        )
        cb = rng.normal(0.0, 0.01, size=ch).astype(np.float32)
        inits += [
            numpy_helper.from_array(cw, f"conv{i}.weight"),
            numpy_helper.from_array(cb, f"conv{i}.bias"),
        ]
        nodes += [
            helper.make_node(
                "Conv",
                [prev, f"conv{i}.weight", f"conv{i}.bias"],
                [f"conv{i}"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[stride, stride],
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
        ]
        prev, prev_ch = f"relu{i}", ch
    # Gain 5 spreads the logits (std ~1.5) so probs are not near-uniform.
    fc_w = rng.normal(0.0, 5.0 / np.sqrt(prev_ch), size=(prev_ch, _MID_CLASSES)).astype(np.float32)
    fc_b = rng.normal(0.0, 0.01, size=_MID_CLASSES).astype(np.float32)
    inits += [numpy_helper.from_array(fc_w, "fc.weight"), numpy_helper.from_array(fc_b, "fc.bias")]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    model = _onnx_model(
        nodes,
        "mid",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 96, 96])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, _MID_CLASSES])],
        inits,
        _DESCRIPTIONS["mid"],
    )
    _write_onnx(model, path)


def _build_micro(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    model = _onnx_model(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "micro",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(_MICRO_CONSTANT, "bias")],
        _DESCRIPTIONS["micro"],
    )
    _write_onnx(model, path)


def _build_unsupported_op(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    model = _onnx_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", gain=2.0)],
        "unsupported_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [],
        _DESCRIPTIONS["unsupported_op"],
        extra_opsets=[helper.make_opsetid("com.example", 1)],
    )
    # The checker accepts ops of unknown domains without a schema; full_check would
    # also run shape inference, which cannot know Frobnicate, so only the plain check.
    onnx.checker.check_model(model)
    _write_onnx(model, path, check=False)


def _build_nan_output(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    model = _onnx_model(
        [
            helper.make_node("Sub", ["x", "ten"], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["y"]),
        ],
        "nan_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(10.0, dtype=np.float32), "ten")],
        _DESCRIPTIONS["nan_output"],
    )
    _write_onnx(model, path)


# --------------------------------------------------------------------------------------
# TFLite writer


class _TfliteGraph:
    """Accumulates tensors, buffers and operators of a one-subgraph TFLite model."""

    def __init__(self) -> None:
        from ai_edge_litert import schema_py_generated as schema

        self.schema = schema
        self.buffers = [schema.BufferT()]  # buffer 0: the empty sentinel by convention
        self.tensors: list = []
        self.opcodes: list = []
        self.operators: list = []

    def tensor(
        self,
        name: str,
        shape: list[int],
        tensor_type: int,
        data: np.ndarray | None = None,
        scale: float | None = None,
        zero_point: int = 0,
    ) -> int:
        """Add a tensor (a constant when data is given); returns its index."""
        s = self.schema
        t = s.TensorT()
        t.name = name
        t.shape = list(shape)
        t.type = tensor_type
        t.buffer = 0
        if data is not None:
            buf = s.BufferT()
            # TFLite buffers are little-endian raw bytes.
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
            self.buffers.append(buf)
            t.buffer = len(self.buffers) - 1
        if scale is not None:
            q = s.QuantizationParametersT()
            q.scale = [float(scale)]
            q.zeroPoint = [int(zero_point)]
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code: int, inputs, outputs, options_type=0, options=None, version=1) -> None:
        """Add a builtin operator, registering its opcode once per (code, version)."""
        s = self.schema
        for i, oc in enumerate(self.opcodes):
            if oc.builtinCode == code and oc.version == version:
                index = i
                break
        else:
            oc = s.OperatorCodeT()
            oc.builtinCode = code
            # Old readers only look at the deprecated int8 field; codes < 127 fit in it.
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = version
            self.opcodes.append(oc)
            index = len(self.opcodes) - 1
        o = s.OperatorT()
        o.opcodeIndex = index
        o.inputs = list(inputs)
        o.outputs = list(outputs)
        o.builtinOptionsType = options_type
        o.builtinOptions = options
        self.operators.append(o)

    def finish(self, inputs: list[int], outputs: list[int], description: str) -> bytes:
        """Serialize with a serving_default signature; returns the flatbuffer bytes."""
        import flatbuffers

        s = self.schema
        sg = s.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.operators
        sg.inputs, sg.outputs = list(inputs), list(outputs)
        sg.name = "main"
        sig = s.SignatureDefT()
        sig.signatureKey = "serving_default"
        sig.subgraphIndex = 0
        sig.inputs = [self._tensor_map(i) for i in inputs]
        sig.outputs = [self._tensor_map(i) for i in outputs]
        model = s.ModelT()
        model.version = 3
        model.description = description
        model.operatorCodes = self.opcodes
        model.subgraphs = [sg]
        model.buffers = self.buffers
        model.signatureDefs = [sig]
        builder = flatbuffers.Builder(0)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def _tensor_map(self, index: int):
        m = self.schema.TensorMapT()
        m.name = self.tensors[index].name
        m.tensorIndex = index
        return m


def _build_classifier_tflite(path: Path) -> None:
    g = _TfliteGraph()
    s = g.schema
    f32, i32 = s.TensorType.FLOAT32, s.TensorType.INT32
    w = _classifier_weights()
    # Same weights as classifier.onnx: OIHW -> OHWI for the conv, [in,out] -> [out,in]
    # for the fully connected layers, so both files compute the same function.
    conv_w = np.ascontiguousarray(w["conv_w"].transpose(0, 2, 3, 1)).astype("<f4")
    fc_w = np.ascontiguousarray(w["gemm_w"][:, :10].T).astype("<f4")
    score_w = np.ascontiguousarray(w["gemm_w"][:, 10:].T).astype("<f4")

    image = g.tensor("image", [1, 32, 32, 3], f32)
    t_conv_w = g.tensor("conv/weight", [8, 3, 3, 3], f32, conv_w)
    t_conv_b = g.tensor("conv/bias", [8], f32, w["conv_b"].astype("<f4"))
    conv = g.tensor("conv/relu", [1, 32, 32, 8], f32)
    axes = g.tensor("pool/axes", [2], i32, np.array([1, 2], dtype="<i4"))
    pooled = g.tensor("pool", [1, 8], f32)
    t_fc_w = g.tensor("head/weight", [10, 8], f32, fc_w)
    t_fc_b = g.tensor("head/bias", [10], f32, w["gemm_b"][:10].astype("<f4"))
    logits = g.tensor("logits", [1, 10], f32)
    probs = g.tensor("probs", [1, 10], f32)
    t_sc_w = g.tensor("score_head/weight", [1, 8], f32, score_w)
    t_sc_b = g.tensor("score_head/bias", [1], f32, w["gemm_b"][10:].astype("<f4"))
    score_logit = g.tensor("score_logit", [1, 1], f32)
    score = g.tensor("score", [1, 1], f32)

    conv_opt = s.Conv2DOptionsT()
    conv_opt.padding = s.Padding.SAME
    conv_opt.strideW = conv_opt.strideH = 1
    conv_opt.fusedActivationFunction = s.ActivationFunctionType.RELU
    g.op(
        s.BuiltinOperator.CONV_2D,
        [image, t_conv_w, t_conv_b],
        [conv],
        s.BuiltinOptions.Conv2DOptions,
        conv_opt,
    )
    mean_opt = s.ReducerOptionsT()
    mean_opt.keepDims = False
    g.op(s.BuiltinOperator.MEAN, [conv, axes], [pooled], s.BuiltinOptions.ReducerOptions, mean_opt)
    for wt, bt, out in ((t_fc_w, t_fc_b, logits), (t_sc_w, t_sc_b, score_logit)):
        g.op(
            s.BuiltinOperator.FULLY_CONNECTED,
            [pooled, wt, bt],
            [out],
            s.BuiltinOptions.FullyConnectedOptions,
            s.FullyConnectedOptionsT(),
        )
    sm_opt = s.SoftmaxOptionsT()
    sm_opt.beta = 1.0
    g.op(s.BuiltinOperator.SOFTMAX, [logits], [probs], s.BuiltinOptions.SoftmaxOptions, sm_opt)
    g.op(s.BuiltinOperator.LOGISTIC, [score_logit], [score])
    Path(path).write_bytes(g.finish([image], [probs, score], _DESCRIPTIONS["classifier_tflite"]))


def _build_classifier_int8(path: Path) -> None:
    g = _TfliteGraph()
    s = g.schema
    p = _int8_classifier_params()
    i8, i32 = s.TensorType.INT8, s.TensorType.INT32
    features = g.tensor(
        "features", [1, _INT8_IN_FEATURES], i8, scale=_INT8_IN_SCALE, zero_point=_INT8_IN_ZERO_POINT
    )
    weight = g.tensor(
        "head/weight", [_INT8_CLASSES, _INT8_IN_FEATURES], i8, p["w_q"], scale=p["w_scale"]
    )
    bias = g.tensor(
        "head/bias", [_INT8_CLASSES], i32, p["b_q"].astype("<i4"), scale=p["bias_scale"]
    )
    logits = g.tensor(
        "logits", [1, _INT8_CLASSES], i8, scale=p["logit_scale"], zero_point=p["logit_zero_point"]
    )
    probs = g.tensor(
        "probs",
        [1, _INT8_CLASSES],
        i8,
        scale=_INT8_SOFTMAX_SCALE,
        zero_point=_INT8_SOFTMAX_ZERO_POINT,
    )
    # Op versions follow TFLite's versioning: int8 FULLY_CONNECTED is v4, int8 SOFTMAX v2.
    g.op(
        s.BuiltinOperator.FULLY_CONNECTED,
        [features, weight, bias],
        [logits],
        s.BuiltinOptions.FullyConnectedOptions,
        s.FullyConnectedOptionsT(),
        version=4,
    )
    sm_opt = s.SoftmaxOptionsT()
    sm_opt.beta = 1.0
    g.op(
        s.BuiltinOperator.SOFTMAX,
        [logits],
        [probs],
        s.BuiltinOptions.SoftmaxOptions,
        sm_opt,
        version=2,
    )
    Path(path).write_bytes(g.finish([features], [probs], _DESCRIPTIONS["classifier_int8"]))


# --------------------------------------------------------------------------------------
# The catalogue

_DESCRIPTIONS = {
    "classifier": "Image classifier: image float32 [1,3,32,32] in [0,1] (NCHW, RGB) -> Conv 3x3 (8) "
    "-> ReLU -> global average pool -> Gemm; probs = softmax over 10 classes [1,10], "
    "score = sigmoid of an 11th column [1,1].",
    "dynamic": "Embedding net with dynamic shape: image float32 [batch,3,height,width] in [0,1] "
    "-> Conv 3x3 (8) -> ReLU -> global average pool -> embedding [batch,8].",
    "multi_input": "Two inputs: features float32 [1,16] and scale int64 scalar (shape []); "
    "out = (features @ W[16,4]) * float(scale), [1,4].",
    "classifier_fp16": "The classifier with float16 input, weights and outputs "
    "(image float16 [1,3,32,32] -> probs float16 [1,10], score float16 [1,1]).",
    "mid": "Mid-size CNN for benchmarks: image float32 [1,3,96,96] -> 6x (Conv 3x3 + ReLU; 32-32-64-64-"
    "128-128 channels, stride 2 then 1) -> global average pool -> Gemm(100) -> softmax probs [1,100].",
    "micro": "Trivial model for overhead benchmarks: y = x + constant, float32 [1,4].",
    "classifier_tflite": "TFLite float32 classifier, same weights as classifier.onnx: image float32 "
    "[1,32,32,3] (NHWC) -> CONV_2D+RELU -> MEAN(H,W) -> FULLY_CONNECTED(10) -> SOFTMAX probs [1,10]; "
    "FULLY_CONNECTED(1) -> LOGISTIC score [1,1].",
    "classifier_int8": "TFLite int8 classifier: features int8 [1,64] (scale 6/255, zero point -128) "
    "-> FULLY_CONNECTED int8 -> SOFTMAX int8 probs [1,10] (scale 1/256, zero point -128).",
    "unsupported_op": "Valid ONNX graph whose only node is the custom op com.example:Frobnicate, "
    "which onnxruntime cannot resolve: loading it must fail naming the op.",
    "nan_output": "y = sqrt(x - 10) for x float32 [1,4]: ordinary inputs give NaN.",
}

_CATALOGUE = (
    ("classifier", "classifier.onnx", "onnx", "threshold:score>0.5", _build_classifier),
    ("dynamic", "dynamic.onnx", "onnx", None, _build_dynamic),
    ("multi_input", "multi_input.onnx", "onnx", "argmax", _build_multi_input),
    (
        "classifier_fp16",
        "classifier_fp16.onnx",
        "onnx",
        "threshold:score>0.5",
        _build_classifier_fp16,
    ),
    ("mid", "mid.onnx", "onnx", None, _build_mid),
    ("micro", "micro.onnx", "onnx", None, _build_micro),
    (
        "classifier_tflite",
        "classifier.tflite",
        "tflite",
        "threshold:score>0.5",
        _build_classifier_tflite,
    ),
    ("classifier_int8", "classifier_int8.tflite", "tflite", "argmax", _build_classifier_int8),
    ("unsupported_op", "unsupported_op.onnx", "onnx", None, _build_unsupported_op),
    ("nan_output", "nan_output.onnx", "onnx", None, _build_nan_output),
)

EXAMPLES: Mapping[str, ExampleModel] = MappingProxyType(
    {
        name: ExampleModel(name, filename, kind, _DESCRIPTIONS[name], rule, build)
        for name, filename, kind, rule, build in _CATALOGUE
    }
)


def _lookup(name: str) -> ExampleModel:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise UsageError(
            f"unknown example model {name!r}", hint="one of: " + ", ".join(EXAMPLES)
        ) from None


def build_example(name: str, out_dir: str | Path) -> Path:
    """Build one example model into out_dir (created if missing); returns the file's path."""
    example = _lookup(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / example.filename
    example.build(path)
    return path


def build_all(out_dir: str | Path) -> dict[str, Path]:
    """Build every example model into out_dir; returns name -> path in catalogue order."""
    return {name: build_example(name, out_dir) for name in EXAMPLES}


# --------------------------------------------------------------------------------------
# Example inputs


def _case_rng(seed: int, case: int) -> np.random.Generator:
    """Generator for one case, so the first k of n cases equal the k cases asked alone."""
    return np.random.default_rng([seed, case])


def _classifier_images(n_cases: int, seed: int) -> np.ndarray:
    """NCHW float32 images for the classifiers; cases 1, 5, 9, ... sit near the threshold.

    Near-threshold case i has a reference score of 0.5 ± d with d in [2e-4, 2e-3],
    above the threshold for i = 1, 9, 17, ... and below for i = 5, 13, ..., so a small
    numeric drift can flip the decision. Each is a blend of two ordinary images on
    opposite sides of the threshold, with the blend weight found by bisection.
    """
    images = np.empty((n_cases, 3, 32, 32), dtype=np.float32)
    if n_cases > 1:
        w = _classifier_weights()
        # Blend endpoints come from a pool outside the case numbering.
        pool = _natural_images(_case_rng(seed, 2**31), 32, 32, 32)
        scores = _classifier_score(pool, w)
        above, below = pool[scores > 0.6], pool[scores < 0.4]
    for i in range(n_cases):
        rng = _case_rng(seed, i)
        if i % 4 != 1:
            images[i] = _natural_images(rng, 1, 32, 32)[0]
            continue
        a = above[rng.integers(len(above))].astype(np.float64)
        b = below[rng.integers(len(below))].astype(np.float64)
        d = rng.uniform(_NEAR_MIN, _NEAR_MAX)
        target = _SCORE_THRESHOLD + (d if (i // 4) % 2 == 0 else -d)
        lo, hi = 0.0, 1.0  # score(blend(lo)) > target > score(blend(hi))
        for _ in range(40):
            mid = (lo + hi) / 2
            s = _classifier_score(((1 - mid) * a + mid * b)[None].astype(np.float32), w)[0]
            if s > target:
                lo = mid
            else:
                hi = mid
        images[i] = ((1 - lo) * a + lo * b).astype(np.float32)
    return images


_DYNAMIC_SHAPES = ((1, 32, 32), (2, 32, 32), (1, 48, 64))


def example_inputs(name: str, n_cases: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Realistic inputs for an example model: n_cases dicts of input name -> array.

    Images are float in [0, 1] (NCHW, or NHWC for the TFLite classifier); int8 inputs
    are quantized with the model's own scale and zero point. For the classifiers,
    cases 1, 5, 9, ... lie within 0.002 of the 0.5 score threshold, alternating
    sides. For "dynamic", cases cycle through the shapes [1,3,32,32], [2,3,32,32],
    [1,3,48,64]. Case i depends only on (seed, i).
    """
    _lookup(name)
    if n_cases < 0:
        raise UsageError(f"n_cases must be >= 0, got {n_cases}")
    if name in ("classifier", "classifier_fp16", "classifier_tflite"):
        images = _classifier_images(n_cases, seed)
        if name == "classifier_fp16":
            return [{"image": img[None].astype(np.float16)} for img in images]
        if name == "classifier_tflite":
            return [{"image": np.ascontiguousarray(img.transpose(1, 2, 0)[None])} for img in images]
        return [{"image": img[None]} for img in images]
    cases = []
    for i in range(n_cases):
        rng = _case_rng(seed, i)
        if name == "dynamic":
            batch, h, w = _DYNAMIC_SHAPES[i % len(_DYNAMIC_SHAPES)]
            cases.append({"image": _natural_images(rng, batch, h, w)})
        elif name == "multi_input":
            features = rng.normal(0.0, 1.0, size=(1, 16)).astype(np.float32)
            cases.append(
                {"features": features, "scale": np.array(rng.integers(1, 5), dtype=np.int64)}
            )
        elif name == "mid":
            cases.append({"image": _natural_images(rng, 1, 96, 96)})
        elif name == "classifier_int8":
            features = _int8_features(rng, 1)
            cases.append({"features": _quantize(features, _INT8_IN_SCALE, _INT8_IN_ZERO_POINT)})
        else:  # micro, unsupported_op, nan_output: x float32 [1,4] in [0, 1)
            cases.append({"x": rng.random((1, 4), dtype=np.float32)})
    return cases


# --------------------------------------------------------------------------------------
# Bad input files


def corrupt_model_bytes(kind: str, src: str | Path, dst: str | Path) -> Path:
    """Write a broken copy of the model at src to dst; returns dst.

    "empty": zero bytes; "truncated": the first half of src; "random": as many
    bytes as src from a fixed-seed generator (so the file is reproducible).
    """
    data = Path(src).read_bytes()
    if kind == "empty":
        out = b""
    elif kind == "truncated":
        out = data[: len(data) // 2]
    elif kind == "random":
        out = np.random.default_rng(9001).integers(0, 256, size=len(data), dtype=np.uint8).tobytes()
    else:
        raise UsageError(f"unknown corruption {kind!r}", hint="one of: empty, truncated, random")
    dst = Path(dst)
    dst.write_bytes(out)
    return dst
