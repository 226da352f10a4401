"""Labelled real data and small models trained on it, for the accuracy tests.

- ``digits``: scikit-learn's handwritten digits (1,797 labelled 8x8 images shipped inside
  the package); a softmax regression trained here with numpy on the first 1,000 and
  exported to ONNX with ``onnx.helper``; the other 797 are the labelled golden cases.
  The planted fault: the same weights behind an int8 QuantizeLinear/DequantizeLinear of
  the input calibrated on 0..8 while pixels reach 16 (bright strokes saturate).
- ``photos``: 8x8 RGB patches of four of scikit-image's photographs (``data.chelsea``,
  ``coffee``, ``astronaut``, ``rocket``), labelled with the photograph each came from;
  a softmax regression trained here on half of them. The planted fault: the same weights
  behind a channel Gather (2, 1, 0): the model fed BGR.

Everything is built from code, the same bytes every time (fixed seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")
DIGITS_TRAIN = 1000


@dataclass(frozen=True)
class Labelled:
    """Labelled cases (inputs by case name, class index by case name) and trained weights."""

    inputs: dict[str, dict[str, np.ndarray]]
    classes: dict[str, int]
    weights: np.ndarray
    bias: np.ndarray
    class_names: tuple[str, ...]


def _softmax_regression(x: np.ndarray, y: np.ndarray, classes: int, steps: int = 300):
    """Full-batch gradient descent on the cross-entropy (L2 1e-3): deterministic, cheap."""
    w = np.zeros((x.shape[1], classes))
    b = np.zeros(classes)
    onehot = np.eye(classes)[y]
    for _ in range(steps):
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) / len(x)
        w -= 2.0 * (x.T @ g + 1e-3 * w)
        b -= 2.0 * g.sum(axis=0)
    return w.astype(np.float32), b.astype(np.float32)


def digits() -> Labelled:
    """sklearn's digits: 797 held-out cases ``d1000``.., input ``x`` [1, 64] of 0..16."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = data.data.astype(np.float64)
    y = data.target.astype(int)
    w, b = _softmax_regression(x[:DIGITS_TRAIN] / 16.0, y[:DIGITS_TRAIN], 10)
    inputs, classes = {}, {}
    for i in range(DIGITS_TRAIN, len(x)):
        inputs[f"d{i:04d}"] = {"x": x[i : i + 1].astype(np.float32)}
        classes[f"d{i:04d}"] = int(y[i])
    names = tuple(str(c) for c in range(10))
    return Labelled(inputs, classes, w / 16.0, b, names)


def photo_patches() -> tuple[np.ndarray, np.ndarray]:
    """8x8 RGB patches (0..1) of the photographs downsampled 4x, and each one's photograph."""
    import skimage.data

    patches, labels = [], []
    for label, name in enumerate(PHOTOS):
        image = getattr(skimage.data, name)().astype(np.float64)
        h, w = image.shape[0] // 4 * 4, image.shape[1] // 4 * 4
        small = image[:h, :w].reshape(h // 4, 4, w // 4, 4, 3).mean(axis=(1, 3)) / 255.0
        for r in range(0, small.shape[0] - 8, 8):
            for c in range(0, small.shape[1] - 8, 8):
                patches.append(small[r : r + 8, c : c + 8])
                labels.append(label)
    order = np.random.default_rng(0).permutation(len(patches))
    return np.asarray(patches)[order], np.asarray(labels)[order]


def photos() -> Labelled:
    """Held-out photo patches ``p0000``..: input ``image`` [1, 8, 8, 3] float32 RGB."""
    x, y = photo_patches()
    half = len(x) // 2
    w, b = _softmax_regression(x[:half].reshape(half, -1), y[:half], len(PHOTOS), steps=400)
    inputs, classes = {}, {}
    for i in range(half, len(x)):
        inputs[f"p{i:04d}"] = {"image": x[i : i + 1].astype(np.float32)}
        classes[f"p{i:04d}"] = int(y[i])
    return Labelled(inputs, classes, w, b, PHOTOS)


def classifier_model(
    path: Path, data: Labelled, *, saturate_at: float | None = None, swap_channels=False
) -> Path:
    """The softmax regression as ONNX: input (``x`` [1, F] or ``image`` [1, 8, 8, 3]) ->
    MatMul -> Add -> Softmax -> ``probs``. ``saturate_at``: an int8 Q/DQ of the input with
    scale ``saturate_at / 127`` first; ``swap_channels``: the image's channels reversed."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    image = "image" in next(iter(data.inputs.values()))
    features, classes = data.weights.shape
    nodes, inits = (
        [],
        [
            numpy_helper.from_array(data.weights, "w"),
            numpy_helper.from_array(data.bias, "b"),
        ],
    )
    prev = "image" if image else "x"
    if swap_channels:
        inits.append(numpy_helper.from_array(np.array([2, 1, 0], np.int64), "bgr"))
        nodes.append(helper.make_node("Gather", [prev, "bgr"], ["swapped"], axis=3))
        prev = "swapped"
    if saturate_at is not None:
        inits.append(numpy_helper.from_array(np.array(saturate_at / 127, np.float32), "scale"))
        inits.append(numpy_helper.from_array(np.array(0, np.int8), "zero"))
        nodes.append(helper.make_node("QuantizeLinear", [prev, "scale", "zero"], ["q"]))
        nodes.append(helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"]))
        prev = "dq"
    if image:
        inits.append(numpy_helper.from_array(np.array([1, features], np.int64), "flat"))
        nodes.append(helper.make_node("Reshape", [prev, "flat"], ["flattened"]))
        prev = "flattened"
    nodes += [
        helper.make_node("MatMul", [prev, "w"], ["logits0"]),
        helper.make_node("Add", ["logits0", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    shape = [1, 8, 8, 3] if image else [1, features]
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("image" if image else "x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def write_labels_csv(path: Path, classes: dict[str, int]) -> Path:
    """``case,class`` rows."""
    path.write_text("case,class\n" + "".join(f"{c},{k}\n" for c, k in classes.items()))
    return path


def qualify_locally(runs, base: Path, plan_fields: dict) -> tuple[dict[str, Path], bytes]:
    """Each ``(name, model, golden)`` of ``runs`` qualified on one local agent with a short
    ``quick`` plan, its signed report at ``base/NAME.report.json``; returns the report paths
    by name and the agent's public key (tests/test_accuracy_end_to_end.py and
    tests/test_task_accuracy.py)."""
    import base64

    from edgequal.contract.plan import make_plan
    from edgequal.host.devices.qualify import pin_device_key, qualify
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.transport.local import LocalTransport

    known, reports = KnownDevices(), {}
    with LocalTransport() as transport:
        pin_device_key(transport, known, "local", "local")
        raw = base64.b64decode(transport.info()["public_key_b64"])
        for name, model, golden in runs:
            reports[name] = base / f"{name}.report.json"
            qualify(
                transport,
                model,
                golden,
                make_plan("quick", **plan_fields),
                known=known,
                device_name="local",
                out=reports[name],
                allow_golden_mismatch=True,
            )
    return reports, raw
