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
