"""The numbers behind the example models: deterministic weights and synthetic inputs.

Weights come from ``numpy.random.default_rng`` with a fixed seed per model and
calibration constants are rounded to a few decimals, so every build writes the
same bytes. The numpy reference maths places near-threshold example inputs.
"""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------------------
# Synthetic inputs


def natural_images(rng: np.random.Generator, n: int, height: int, width: int) -> np.ndarray:
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


def conv3x3_same(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
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


def pooled_features(images: np.ndarray, conv_w: np.ndarray, conv_b: np.ndarray) -> np.ndarray:
    """Conv3x3 -> ReLU -> global average pool, as float64 [n, C]."""
    act = np.maximum(conv3x3_same(images.astype(np.float64), conv_w, conv_b), 0.0)
    return act.mean(axis=(2, 3))


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function."""
    return 1.0 / (1.0 + np.exp(-z))


# --------------------------------------------------------------------------------------
# Weights (deterministic; calibrated against a fixed set of synthetic images)


def classifier_weights() -> dict[str, np.ndarray]:
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
    calib = natural_images(np.random.default_rng(1002), 64, 32, 32)
    feats = pooled_features(calib, conv_w.astype(np.float64), conv_b.astype(np.float64))
    feats_c = feats - feats.mean(axis=0)
    cls_gain = round(1.5 / float(np.std(feats_c @ cls_w)), 3)
    score_logit = (feats @ score_w)[:, 0]
    score_gain = round(2.0 / float(np.std(score_logit)), 3)
    score_b = round(-float(np.median(score_logit)) * score_gain, 4)
    gemm_w = np.concatenate([cls_w * cls_gain, score_w * score_gain], axis=1).astype(np.float32)
    gemm_b = np.concatenate([cls_b, [score_b]]).astype(np.float32)
    return {"conv_w": conv_w, "conv_b": conv_b, "gemm_w": gemm_w, "gemm_b": gemm_b}


def classifier_score(images: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """Reference score (sigmoid of the last Gemm column) for NCHW images, float64 [n]."""
    feats = pooled_features(images, w["conv_w"].astype(np.float64), w["conv_b"].astype(np.float64))
    logit = feats @ w["gemm_w"][:, 10].astype(np.float64) + float(w["gemm_b"][10])
    return sigmoid(logit)


def dynamic_weights() -> dict[str, np.ndarray]:
    """Conv weights of the dynamic-shape embedding net."""
    rng = np.random.default_rng(2001)
    return {
        "conv_w": rng.normal(0.0, np.sqrt(2.0 / 27.0), size=(8, 3, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0.0, 0.05, size=8).astype(np.float32),
    }


def multi_input_weights() -> np.ndarray:
    """The [16,4] matrix of the two-input model."""
    return np.random.default_rng(3001).normal(0.0, 0.5, size=(16, 4)).astype(np.float32)


MICRO_CONSTANT = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
# (out_channels, stride) per Conv 3x3 + ReLU: ~175 MFLOP, about 2 ms on one x86 core.
MID_LAYERS = ((32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1))
MID_CLASSES = 100

# classifier_int8: input [1,64] post-ReLU-like features in [0, 6], quantized to int8.
INT8_IN_FEATURES = 64
INT8_CLASSES = 10
INT8_IN_SCALE = 6.0 / 255.0
INT8_IN_ZERO_POINT = -128
# TFLite's int8 SOFTMAX kernel only accepts this output quantization.
INT8_SOFTMAX_SCALE = 1.0 / 256.0
INT8_SOFTMAX_ZERO_POINT = -128


def int8_features(rng: np.random.Generator, n: int) -> np.ndarray:
    """Float32 [n,64] feature vectors in [0, 6], like a ReLU6 embedding."""
    return np.clip(rng.normal(0.6, 1.2, size=(n, INT8_IN_FEATURES)), 0.0, 6.0).astype(np.float32)


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Affine int8 quantization: clip(round(x / scale) + zero_point, -128, 127)."""
    q = np.round(x.astype(np.float64) / scale) + zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def int8_classifier_params() -> dict[str, object]:
    """Quantized weights and the calibrated logit quantization of the int8 classifier."""
    rng = np.random.default_rng(8001)
    w = rng.normal(0.0, 0.12, size=(INT8_CLASSES, INT8_IN_FEATURES))
    b = rng.normal(0.0, 0.2, size=INT8_CLASSES)
    w_scale = float(np.float32(round(float(np.abs(w).max()) / 127.0, 6)))
    w_q = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    bias_scale = INT8_IN_SCALE * w_scale
    b_q = np.round(b / bias_scale).astype(np.int32)
    # Logit range over calibration features, widened 10 % so real inputs rarely clip.
    calib = int8_features(np.random.default_rng(8002), 256)
    x_q = quantize(calib, INT8_IN_SCALE, INT8_IN_ZERO_POINT).astype(np.float64)
    x_deq = (x_q - INT8_IN_ZERO_POINT) * INT8_IN_SCALE
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


# The QDQ classifier: uint8 images at scale 1/255, weights in 7 bits (see classifier_qdq_params).
IMAGE_SCALE = 1.0 / 255.0
WEIGHT_QMAX = 63


def classifier_qdq_params(weight_qmax: int = WEIGHT_QMAX) -> dict[str, np.ndarray]:
    """The classifier's weights quantized to int8 and its activation scales, for the QDQ model.

    Weights: symmetric int8 in 7 bits (``reduce_range``: within ±63), per output channel for
    the conv, per tensor for the head. Activations: uint8 with zero point 0, the scale the
    maximum over the calibration images (the classifier's own, ``classifier_weights``) / 255,
    rounded to 5 decimals. Biases: int32 at the scale input scale × weight scale, as a
    post-training quantizer writes them (so every onnxruntime fuses the same int8 kernels).

    Why 7-bit weights: onnxruntime's u8×s8 kernels on x86 without VNNI (AVX2, AVX-512BW)
    multiply with ``vpmaddubsw``, which adds two adjacent products into a saturating int16.
    With u8 activations up to 255 and weights within ±63 a pair stays within
    2 × 255 × 63 = 32130 ≤ 32767, so the int8 kernels are exact on every x86 CPU and on
    arm64 alike; with full 8-bit weights (±127) a pair reaches 64770 and saturates.
    ``weight_qmax=127`` builds that model on purpose (the tests' saturating example).
    """
    w = classifier_weights()
    conv_w = w["conv_w"].astype(np.float64)
    calib = natural_images(np.random.default_rng(1002), 64, 32, 32)
    act = np.maximum(conv3x3_same(calib.astype(np.float64), conv_w, w["conv_b"]), 0.0)
    conv_scale = (np.abs(conv_w).reshape(8, -1).max(axis=1) / weight_qmax).astype(np.float32)
    head_scale = np.float32(float(np.abs(w["gemm_w"]).max()) / weight_qmax)
    feature_scale = np.float32(round(float(act.mean(axis=(2, 3)).max()) / 255.0, 5))
    return {
        "conv_w_q": np.clip(
            np.round(conv_w / conv_scale[:, None, None, None]), -weight_qmax, weight_qmax
        ).astype(np.int8),
        "conv_scale": conv_scale,
        "conv_b_q": np.round(w["conv_b"] / (np.float32(IMAGE_SCALE) * conv_scale)).astype(np.int32),
        "conv_b_scale": (np.float32(IMAGE_SCALE) * conv_scale).astype(np.float32),
        "act_scale": np.float32(round(float(act.max()) / 255.0, 5)),
        "feature_scale": feature_scale,
        "head_w_q": np.clip(np.round(w["gemm_w"] / head_scale), -weight_qmax, weight_qmax).astype(
            np.int8
        ),
        "head_scale": head_scale,
        "head_b_q": np.round(w["gemm_b"] / (feature_scale * head_scale)).astype(np.int32),
        "head_b_scale": np.float32(feature_scale * head_scale),
    }
