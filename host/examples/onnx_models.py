"""The ONNX example models, written with ``onnx.helper`` (imported only when one is built).

Opset 17 / IR 8 load in every onnxruntime since 1.14, which covers the runtimes
shipped for Raspberry Pi OS and JetPack 6.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .weights import (
    IMAGE_SCALE,
    MICRO_CONSTANT,
    MID_CLASSES,
    MID_LAYERS,
    WEIGHT_QMAX,
    classifier_qdq_params,
    classifier_weights,
    dynamic_weights,
    multi_input_weights,
)

_ONNX_OPSET = 17
_ONNX_IR_VERSION = 8
_PRODUCER = "edgequal.examples"


# --------------------------------------------------------------------------------------
# ONNX writers


def write_onnx(model, path: Path, check: bool = True) -> None:
    """Check (unless told not to) and write an ONNX model with deterministic bytes."""
    import onnx

    model.producer_name = _PRODUCER
    model.producer_version = "1"
    if check:
        onnx.checker.check_model(model, full_check=True)
    Path(path).write_bytes(model.SerializeToString(deterministic=True))


def onnx_model(nodes, name, inputs, outputs, initializers, doc, extra_opsets=()):
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", _ONNX_OPSET), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=_ONNX_IR_VERSION)
    model.doc_string = doc
    return model


def _conv_relu_pool_nodes(output: str, image: str = "image", after_relu=()) -> list:
    """``image`` -> Conv 3x3 'same' (conv.weight, conv.bias) -> ReLU -> ``after_relu`` (nodes
    from ``relu`` on, e.g. a quantize/dequantize pair) -> global average pool -> ``output`` [n, C]."""
    from onnx import helper

    pooled = after_relu[-1].output[0] if after_relu else "relu"
    return [
        helper.make_node(
            "Conv",
            [image, "conv.weight", "conv.bias"],
            ["conv"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["conv"], ["relu"]),
        *after_relu,
        helper.make_node("GlobalAveragePool", [pooled], ["pool"]),
        helper.make_node("Flatten", ["pool"], [output], axis=1),
    ]


def _classifier_head_nodes(features: str) -> list:
    """``features`` -> Gemm (head.weight, head.bias) -> split 10 + 1 -> Softmax ``probs``,
    Sigmoid ``score``: the classifiers' head."""
    from onnx import helper

    return [
        helper.make_node("Gemm", [features, "head.weight", "head.bias"], ["head"]),
        helper.make_node("Split", ["head", "head.split"], ["logits", "score_logit"], axis=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("Sigmoid", ["score_logit"], ["score"]),
    ]


def _classifier_onnx(path: Path, description: str, float16: bool = False) -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = classifier_weights()
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
        *_conv_relu_pool_nodes("features"),
        *_classifier_head_nodes("features"),
    ]
    model = onnx_model(
        nodes,
        "classifier_fp16" if float16 else "classifier",
        [helper.make_tensor_value_info("image", elem, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("probs", elem, [1, 10]),
            helper.make_tensor_value_info("score", elem, [1, 1]),
        ],
        inits,
        description,
    )
    write_onnx(model, path)


def build_classifier(path: Path, description: str) -> None:
    _classifier_onnx(path, description, float16=False)


def build_classifier_fp16(path: Path, description: str) -> None:
    _classifier_onnx(path, description, float16=True)


def build_classifier_qdq(path: Path, description: str, weight_qmax: int = WEIGHT_QMAX) -> None:
    """The classifier quantized to int8 in QDQ form, float32 in and out (as a post-training
    static quantization with ``reduce_range`` writes it: 7-bit weights, int32 biases);
    onnxruntime runs the quantized conv as an int8 kernel, exact on every CPU
    (``classifier_qdq_params`` says why the weights have 7 bits; ``weight_qmax=127`` writes
    the 8-bit model whose kernels saturate on x86 without VNNI)."""
    from onnx import TensorProto, helper, numpy_helper

    q = classifier_qdq_params(weight_qmax)
    zero_u8, zero_i8 = np.uint8(0), np.int8(0)
    inits = [
        numpy_helper.from_array(np.float32(IMAGE_SCALE), "image.scale"),
        numpy_helper.from_array(zero_u8, "uint8.zero"),
        numpy_helper.from_array(q["conv_w_q"], "conv.weight_q"),
        numpy_helper.from_array(q["conv_scale"], "conv.weight_scale"),
        numpy_helper.from_array(np.zeros(8, np.int8), "conv.weight_zero"),
        numpy_helper.from_array(q["conv_b_q"], "conv.bias_q"),
        numpy_helper.from_array(q["conv_b_scale"], "conv.bias_scale"),
        numpy_helper.from_array(np.zeros(8, np.int32), "conv.bias_zero"),
        numpy_helper.from_array(q["act_scale"], "relu.scale"),
        numpy_helper.from_array(q["feature_scale"], "features.scale"),
        numpy_helper.from_array(q["head_w_q"], "head.weight_q"),
        numpy_helper.from_array(q["head_scale"], "head.weight_scale"),
        numpy_helper.from_array(zero_i8, "int8.zero"),
        numpy_helper.from_array(q["head_b_q"], "head.bias_q"),
        numpy_helper.from_array(q["head_b_scale"], "head.bias_scale"),
        numpy_helper.from_array(np.int32(0), "int32.zero"),
        numpy_helper.from_array(np.array([10, 1], dtype=np.int64), "head.split"),
    ]

    def qdq(name: str, scale: str) -> list:
        return [
            helper.make_node("QuantizeLinear", [name, scale, "uint8.zero"], [f"{name}_q"]),
            helper.make_node(
                "DequantizeLinear", [f"{name}_q", scale, "uint8.zero"], [f"{name}_dq"]
            ),
        ]

    nodes = [
        *qdq("image", "image.scale"),
        helper.make_node(
            "DequantizeLinear",
            ["conv.weight_q", "conv.weight_scale", "conv.weight_zero"],
            ["conv.weight"],
            axis=0,
        ),
        helper.make_node(
            "DequantizeLinear",
            ["conv.bias_q", "conv.bias_scale", "conv.bias_zero"],
            ["conv.bias"],
            axis=0,
        ),
        *_conv_relu_pool_nodes("features", "image_dq", qdq("relu", "relu.scale")),
        *qdq("features", "features.scale"),
        helper.make_node(
            "DequantizeLinear",
            ["head.weight_q", "head.weight_scale", "int8.zero"],
            ["head.weight"],
        ),
        helper.make_node(
            "DequantizeLinear", ["head.bias_q", "head.bias_scale", "int32.zero"], ["head.bias"]
        ),
        *_classifier_head_nodes("features_dq"),
    ]
    model = onnx_model(
        nodes,
        "classifier_qdq",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10]),
            helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1]),
        ],
        inits,
        description,
    )
    write_onnx(model, path)


def build_dynamic(path: Path, description: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = dynamic_weights()
    nodes = _conv_relu_pool_nodes("embedding")
    model = onnx_model(
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
        description,
    )
    write_onnx(model, path)


def build_multi_input(path: Path, description: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Cast", ["scale"], ["scale_f"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["features", "weight"], ["proj"]),
        helper.make_node("Mul", ["proj", "scale_f"], ["out"]),
    ]
    model = onnx_model(
        nodes,
        "multi_input",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16]),
            helper.make_tensor_value_info("scale", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(multi_input_weights(), "weight")],
        description,
    )
    write_onnx(model, path)


def build_mid(path: Path, description: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5001)
    nodes, inits = [], []
    prev, prev_ch = "image", 3
    for i, (ch, stride) in enumerate(MID_LAYERS):
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
    fc_w = rng.normal(0.0, 5.0 / np.sqrt(prev_ch), size=(prev_ch, MID_CLASSES)).astype(np.float32)
    fc_b = rng.normal(0.0, 0.01, size=MID_CLASSES).astype(np.float32)
    inits += [numpy_helper.from_array(fc_w, "fc.weight"), numpy_helper.from_array(fc_b, "fc.bias")]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    model = onnx_model(
        nodes,
        "mid",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 96, 96])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, MID_CLASSES])],
        inits,
        description,
    )
    write_onnx(model, path)


def build_micro(path: Path, description: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    model = onnx_model(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "micro",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(MICRO_CONSTANT, "bias")],
        description,
    )
    write_onnx(model, path)


def build_unsupported_op(path: Path, description: str) -> None:
    import onnx
    from onnx import TensorProto, helper

    model = onnx_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", gain=2.0)],
        "unsupported_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [],
        description,
        extra_opsets=[helper.make_opsetid("com.example", 1)],
    )
    # The checker accepts ops of unknown domains without a schema; full_check would
    # also run shape inference, which cannot know Frobnicate, so only the plain check.
    onnx.checker.check_model(model)
    write_onnx(model, path, check=False)


def build_nan_output(path: Path, description: str) -> None:
    from onnx import TensorProto, helper, numpy_helper

    model = onnx_model(
        [
            helper.make_node("Sub", ["x", "ten"], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["y"]),
        ],
        "nan_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(10.0, dtype=np.float32), "ten")],
        description,
    )
    write_onnx(model, path)
