"""Labelled detection, segmentation and voice-activity cases and small ONNX models that
solve them, for tests/test_task_accuracy.py. Built from code, the same bytes every time.

- ``squares``: 32x32 grey images, noise below 0.3, one bright square (0.6..1.0, 5..12
  pixels a side) at a random place; its box and its mask are the labels.
- detector: thresholds at 0.5 and reads the square's box off the bright rows' and columns'
  first and last indices (ArgMax, ``select_last_index``): outputs ``boxes`` [1, 4] xyxy,
  ``scores`` [1], ``classes`` [1]. The planted fault: boxes shifted ``shift`` pixels.
- segmenter: the same threshold as a class mask [1, 32, 32]; the planted fault a threshold
  of 0.85 (dim squares lost).
- vad: per case 200 frames of energy, speech where the label's intervals say (0.55..1.0)
  over noise below 0.4; the model a sigmoid of (energy - 0.5) * 20; the planted fault the
  frames read one window late (the score of frame t is frame t - 8's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SIDE, FRAMES, HOP = 32, 200, 0.01


def squares(n: int, seed: int = 1):
    """``(images [n, 1, 32, 32] float32, boxes [[x, y, w, h, 0]] per case, masks)``."""
    rng = np.random.default_rng(seed)
    images = (rng.random((n, 1, SIDE, SIDE)) * 0.3).astype(np.float32)
    boxes, masks = [], np.zeros((n, SIDE, SIDE), np.int64)
    for i in range(n):
        size = int(rng.integers(5, 13))
        x, y = (int(v) for v in rng.integers(0, SIDE - size, 2))
        images[i, 0, y : y + size, x : x + size] = rng.uniform(0.6, 1.0)
        boxes.append([[x, y, size, size, 0]])
        masks[i, y : y + size, x : x + size] = 1
    return images, boxes, masks


def speech(n: int, seed: int = 2):
    """``(energies [n, 1, 200] float32, intervals per case in seconds)``."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 1, FRAMES)) * 0.4).astype(np.float32)
    intervals = []
    for i in range(n):
        spans = []
        for start in (int(rng.integers(10, 60)), int(rng.integers(100, 150))):
            end = start + int(rng.integers(15, 45))
            x[i, 0, start:end] = rng.uniform(0.55, 1.0, end - start)
            spans.append([round(start * HOP, 4), round(end * HOP, 4)])
        intervals.append(spans)
    return x, intervals


def _save(path: Path, nodes, inputs, outputs, inits) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def detector(path: Path, shift: float = 0.0) -> Path:
    """``image`` [1, 1, 32, 32] -> ``boxes`` [1, 4] xyxy, ``scores`` [1], ``classes`` [1]."""
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array([shift, 0, shift, 0], np.float32), "shift"),
        numpy_helper.from_array(np.array([0, 0, 1, 1], np.float32), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "cls"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "shape"),
    ]
    n = helper.make_node
    nodes = [
        n("Greater", ["image", "half"], ["bright_b"]),
        n("Cast", ["bright_b"], ["bright"], to=f),
        n("ReduceMax", ["bright"], ["rows"], axes=[3], keepdims=0),  # [1, 1, H]
        n("ReduceMax", ["bright"], ["cols"], axes=[2], keepdims=0),  # [1, 1, W]
        n("ArgMax", ["cols"], ["x0"], axis=2, keepdims=0),
        n("ArgMax", ["rows"], ["y0"], axis=2, keepdims=0),
        n("ArgMax", ["cols"], ["x1"], axis=2, keepdims=0, select_last_index=1),
        n("ArgMax", ["rows"], ["y1"], axis=2, keepdims=0, select_last_index=1),
        n("Concat", ["x0", "y0", "x1", "y1"], ["corners_i"], axis=1),
        n("Cast", ["corners_i"], ["corners_f"], to=f),
        n("Reshape", ["corners_f", "shape"], ["corners"]),
        n("Add", ["corners", "one"], ["edges"]),
        n("Add", ["edges", "shift"], ["boxes"]),
        n("ReduceMax", ["image"], ["scores"], axes=[1, 2, 3], keepdims=0),
        n("Identity", ["cls"], ["classes"]),
    ]
    return _save(
        path,
        nodes,
        [helper.make_tensor_value_info("image", f, [1, 1, SIDE, SIDE])],
        [
            helper.make_tensor_value_info("boxes", f, [1, 4]),
            helper.make_tensor_value_info("scores", f, [1]),
            helper.make_tensor_value_info("classes", TensorProto.INT64, [1]),
        ],
        inits,
    )


def segmenter(path: Path, threshold: float = 0.5) -> Path:
    """``image`` [1, 1, 32, 32] -> ``mask`` [1, 32, 32] int64 (1 where brighter)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array(threshold, np.float32), "cut"),
        numpy_helper.from_array(np.array([1, SIDE, SIDE], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Greater", ["image", "cut"], ["b"]),
        helper.make_node("Cast", ["b"], ["m"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["m", "shape"], ["mask"]),
    ]
    return _save(
        path,
        nodes,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, SIDE, SIDE])],
        [helper.make_tensor_value_info("mask", TensorProto.INT64, [1, SIDE, SIDE])],
        inits,
    )


def vad(path: Path, late: int = 0) -> Path:
    """``energy`` [1, 1, 200] -> ``speech`` [1, 200] = sigmoid((energy - 0.5) * 20), read
    ``late`` frames late (the first ``late`` frames padded with silence)."""
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "mid"),
        numpy_helper.from_array(np.array(20.0, np.float32), "gain"),
        numpy_helper.from_array(np.array([1, FRAMES], np.int64), "shape"),
        numpy_helper.from_array(np.array([0, 0, late, 0, 0, -late], np.int64), "pads"),
    ]
    n = helper.make_node
    nodes = [
        n("Pad", ["energy", "pads"], ["shifted"]),
        n("Sub", ["shifted", "mid"], ["centred"]),
        n("Mul", ["centred", "gain"], ["z"]),
        n("Sigmoid", ["z"], ["p"]),
        n("Reshape", ["p", "shape"], ["speech"]),
    ]
    return _save(
        path,
        nodes,
        [helper.make_tensor_value_info("energy", f, [1, 1, FRAMES])],
        [helper.make_tensor_value_info("speech", f, [1, FRAMES])],
        inits,
    )


def text_lines(seed: int = 3):
    """Text-direction cases: 16x64 strips of scikit-image's scanned text (``data.text``,
    ``data.page``) with ink in them, pooled 2x to 8x32 (0..1, ink high), upright (class 0)
    or rotated 180° (class 1). Half train a logistic regression (scikit-learn); the held-out
    half are the labelled cases. ``(weights [256, 2], bias [2], inputs {case: x [1, 256]},
    classes {case: 0|1})``."""
    import skimage.data
    from sklearn.linear_model import LogisticRegression

    strips = []
    for image in (skimage.data.text(), skimage.data.page()):
        ink = 1.0 - image.astype(np.float64) / 255.0
        for r in range(0, ink.shape[0] - 16, 6):
            for c in range(0, ink.shape[1] - 64, 24):
                s = ink[r : r + 16, c : c + 64]
                if s.mean() > 0.12:
                    strips.append(s.reshape(8, 2, 32, 2).mean(axis=(1, 3)))
    rng = np.random.default_rng(seed)
    strips = np.asarray(strips)[rng.permutation(len(strips))]
    flipped = rng.random(len(strips)) < 0.5
    x = np.where(flipped[:, None, None], strips[:, ::-1, ::-1], strips).reshape(len(strips), -1)
    y = flipped.astype(int)
    half = len(x) // 2
    fit = LogisticRegression(C=0.1, max_iter=200).fit(x[:half], y[:half])
    w = np.column_stack([-fit.coef_[0], fit.coef_[0]]).astype(np.float32) / 2
    b = np.array([-fit.intercept_[0], fit.intercept_[0]], np.float32) / 2
    held = range(half, min(len(x), half + 200))
    inputs = {f"t{i:04d}": {"x": x[i : i + 1].astype(np.float32)} for i in held}
    classes = {f"t{i:04d}": int(y[i]) for i in held}
    return w, b, inputs, classes


def direction_model(path: Path, w: np.ndarray, b: np.ndarray, rotated: bool = False) -> Path:
    """``x`` [1, 256] -> MatMul -> Add -> Softmax -> ``probs`` [1, 2]. ``rotated``: the
    planted fault, the strip turned 180° before it is read (its pixels reversed: a Gather)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes, prev = [], "x"
    if rotated:
        order = np.arange(w.shape[0] - 1, -1, -1, dtype=np.int64)
        inits.append(numpy_helper.from_array(order, "turn"))
        nodes.append(helper.make_node("Gather", ["x", "turn"], ["turned"], axis=1))
        prev = "turned"
    nodes += [
        helper.make_node("MatMul", [prev, "w"], ["l0"]),
        helper.make_node("Add", ["l0", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    f = TensorProto.FLOAT
    return _save(
        path,
        nodes,
        [helper.make_tensor_value_info("x", f, [1, w.shape[0]])],
        [helper.make_tensor_value_info("probs", f, [1, 2])],
        inits,
    )
