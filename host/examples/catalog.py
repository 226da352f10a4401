"""Example models for edgequal's tests, demo and benchmarks, built locally with no download.

This is the catalogue: each model's name, file, description and decision rule,
and realistic inputs for it. Every model is generated from code: ONNX graphs in
:mod:`.onnx_models`, TFLite flatbuffers in :mod:`.tflite_models`, from the
deterministic weights of :mod:`.weights`, so a build writes
byte-identical files every time.

``onnx``, ``flatbuffers`` and ``ai_edge_litert`` (for its flatbuffer schema) are
imported only when a model of that kind is built, so importing this module is cheap.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..errors import UsageError
from .onnx_models import (
    build_classifier,
    build_classifier_fp16,
    build_classifier_qdq,
    build_dynamic,
    build_micro,
    build_mid,
    build_multi_input,
    build_nan_output,
    build_unsupported_op,
)
from .tflite_models import build_classifier_int8, build_classifier_tflite
from .weights import (
    INT8_IN_SCALE,
    INT8_IN_ZERO_POINT,
    classifier_score,
    classifier_weights,
    int8_features,
    natural_images,
    quantize,
)

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
    build: Callable[[Path, str], None]
    """Writes the model to a path; the second argument is the description it embeds."""


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
    "classifier_qdq": "The classifier quantized to int8 (QDQ: QuantizeLinear/DequantizeLinear "
    "around the image, the ReLU and the pooled features; int8 weights, int32 biases), float32 in and out: "
    "image float32 [1,3,32,32] -> probs float32 [1,10], score float32 [1,1]. Its score sits "
    "about 0.02 below the float model's, so cases just above the threshold flip. 7-bit weights "
    "(reduce_range) keep its int8 kernels exact on x86 without VNNI too.",
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
    ("classifier", "classifier.onnx", "onnx", "threshold:score>0.5", build_classifier),
    ("dynamic", "dynamic.onnx", "onnx", None, build_dynamic),
    ("multi_input", "multi_input.onnx", "onnx", "argmax", build_multi_input),
    (
        "classifier_fp16",
        "classifier_fp16.onnx",
        "onnx",
        "threshold:score>0.5",
        build_classifier_fp16,
    ),
    (
        "classifier_qdq",
        "classifier_qdq.onnx",
        "onnx",
        "threshold:score>0.5",
        build_classifier_qdq,
    ),
    ("mid", "mid.onnx", "onnx", None, build_mid),
    ("micro", "micro.onnx", "onnx", None, build_micro),
    (
        "classifier_tflite",
        "classifier.tflite",
        "tflite",
        "threshold:score>0.5",
        build_classifier_tflite,
    ),
    ("classifier_int8", "classifier_int8.tflite", "tflite", "argmax", build_classifier_int8),
    ("unsupported_op", "unsupported_op.onnx", "onnx", None, build_unsupported_op),
    ("nan_output", "nan_output.onnx", "onnx", None, build_nan_output),
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
    example.build(path, example.description)
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
    """NCHW float32 images for the classifiers (a copy: the four classifiers, float, fp16,
    int8 and TFLite, share one computation of :func:`_placed_classifier_images`)."""
    return _placed_classifier_images(n_cases, seed).copy()


@functools.lru_cache(maxsize=8)
def _placed_classifier_images(n_cases: int, seed: int) -> np.ndarray:
    """NCHW float32 images for the classifiers; cases 1, 5, 9, ... sit near the threshold.

    Near-threshold case i has a reference score of 0.5 ± d with d in [2e-4, 2e-3],
    above the threshold for i = 1, 9, 17, ... and below for i = 5, 13, ..., so a small
    numeric drift can flip the decision. Each is a blend of two ordinary images on
    opposite sides of the threshold, with the blend weight found by bisection.
    """
    images = np.empty((n_cases, 3, 32, 32), dtype=np.float32)
    if n_cases > 1:
        w = classifier_weights()
        # Blend endpoints come from a pool outside the case numbering.
        pool = natural_images(_case_rng(seed, 2**31), 32, 32, 32)
        scores = classifier_score(pool, w)
        above, below = pool[scores > 0.6], pool[scores < 0.4]
    for i in range(n_cases):
        rng = _case_rng(seed, i)
        if i % 4 != 1:
            images[i] = natural_images(rng, 1, 32, 32)[0]
            continue
        a = above[rng.integers(len(above))].astype(np.float64)
        b = below[rng.integers(len(below))].astype(np.float64)
        d = rng.uniform(_NEAR_MIN, _NEAR_MAX)
        target = _SCORE_THRESHOLD + (d if (i // 4) % 2 == 0 else -d)
        lo, hi = 0.0, 1.0  # score(blend(lo)) > target > score(blend(hi))
        for _ in range(40):
            mid = (lo + hi) / 2
            s = classifier_score(((1 - mid) * a + mid * b)[None].astype(np.float32), w)[0]
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
    if name in ("classifier", "classifier_fp16", "classifier_qdq", "classifier_tflite"):
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
            cases.append({"image": natural_images(rng, batch, h, w)})
        elif name == "multi_input":
            features = rng.normal(0.0, 1.0, size=(1, 16)).astype(np.float32)
            cases.append(
                {"features": features, "scale": np.array(rng.integers(1, 5), dtype=np.int64)}
            )
        elif name == "mid":
            cases.append({"image": natural_images(rng, 1, 96, 96)})
        elif name == "classifier_int8":
            features = int8_features(rng, 1)
            cases.append({"features": quantize(features, INT8_IN_SCALE, INT8_IN_ZERO_POINT)})
        else:  # micro, unsupported_op, nan_output: x float32 [1,4] in [0, 1)
            cases.append({"x": rng.random((1, 4), dtype=np.float32)})
    return cases
