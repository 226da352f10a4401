"""A small TFLite flatbuffer writer and the TFLite example models built with it.

The writer uses the LiteRT schema's object API (``ai_edge_litert``'s generated
schema and ``flatbuffers``, imported only when a model is built).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .weights import (
    INT8_CLASSES,
    INT8_IN_FEATURES,
    INT8_IN_SCALE,
    INT8_IN_ZERO_POINT,
    INT8_SOFTMAX_SCALE,
    INT8_SOFTMAX_ZERO_POINT,
    classifier_weights,
    int8_classifier_params,
)

# --------------------------------------------------------------------------------------
# TFLite writer


class TfliteGraph:
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


def build_classifier_tflite(path: Path, description: str) -> None:
    g = TfliteGraph()
    s = g.schema
    f32, i32 = s.TensorType.FLOAT32, s.TensorType.INT32
    w = classifier_weights()
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
    Path(path).write_bytes(g.finish([image], [probs, score], description))


def build_classifier_int8(path: Path, description: str) -> None:
    g = TfliteGraph()
    s = g.schema
    p = int8_classifier_params()
    i8, i32 = s.TensorType.INT8, s.TensorType.INT32
    features = g.tensor(
        "features", [1, INT8_IN_FEATURES], i8, scale=INT8_IN_SCALE, zero_point=INT8_IN_ZERO_POINT
    )
    weight = g.tensor(
        "head/weight", [INT8_CLASSES, INT8_IN_FEATURES], i8, p["w_q"], scale=p["w_scale"]
    )
    bias = g.tensor("head/bias", [INT8_CLASSES], i32, p["b_q"].astype("<i4"), scale=p["bias_scale"])
    logits = g.tensor(
        "logits", [1, INT8_CLASSES], i8, scale=p["logit_scale"], zero_point=p["logit_zero_point"]
    )
    probs = g.tensor(
        "probs",
        [1, INT8_CLASSES],
        i8,
        scale=INT8_SOFTMAX_SCALE,
        zero_point=INT8_SOFTMAX_ZERO_POINT,
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
    Path(path).write_bytes(g.finish([features], [probs], description))
