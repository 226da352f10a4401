"""The pipeline example: raw images through a declared pipeline, against a reference made
with another colour order.

:func:`build_pipeline_example` writes, from code and with nothing downloaded:

- ``colour.onnx``: a small classifier of the dominant colour (image float32
  [1,3,16,16], NCHW, normalized ``(x/255 − 0.5) / 0.25`` → global average pool →
  3×3 linear → logits [1,3]: red, green, blue);
- ``raw/``: PNG and JPEG images it encodes itself (Pillow), of several sizes, each with
  one dominant colour;
- ``pipeline.toml``: the device's declared pipeline (decode, bilinear resize, RGB,
  scale, mean/std, NCHW);
- ``reference_outputs.npz`` and ``reference_inputs.npz``: what a "training pipeline"
  (written here in numpy with Pillow's resize, independent of ``agent/pipeline/``)
  produced from the same files, but in BGR order, so red and blue swap and decisions
  flip; the device names the cause ("channels swapped: color_order?").

``golden make colour.onnx --raw raw --pipeline pipeline.toml --outputs
reference_outputs.npz --reference-inputs reference_inputs.npz --decision argmax``
makes the golden set (:func:`make_pipeline_golden`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SIZE = 16
MEAN, STD = 0.5, 0.25
COLOURS = ("red", "green", "blue")
PIPELINE_TOML = f"""# The device's pipeline for colour.onnx: one table per model input.
[inputs.image]
decode = "image"
resize = [{SIZE}, {SIZE}]
interpolation = "bilinear"
crop = "none"
color_order = "RGB"
layout = "NCHW"
scale = {1 / 255!r}
mean = [{MEAN}, {MEAN}, {MEAN}]
std = [{STD}, {STD}, {STD}]
"""
# (case, dominant colour, width, height, format)
CASES = (
    ("red_wide", 0, 40, 24, "PNG"),
    ("green_square", 1, 32, 32, "PNG"),
    ("blue_tall", 2, 20, 36, "JPEG"),
    ("red_small", 0, 12, 12, "JPEG"),
    ("green_wide", 1, 48, 20, "JPEG"),
    ("blue_square", 2, 24, 24, "PNG"),
)


@dataclass(frozen=True)
class PipelineExample:
    """The files :func:`build_pipeline_example` wrote."""

    model: Path
    raw: Path
    pipeline: Path
    outputs: Path
    reference_inputs: Path
    decision: str = "argmax"


def build_colour_model(path: Path) -> Path:
    """``colour.onnx``: logits = W · mean colour + b, W favouring each class's own channel."""
    from onnx import TensorProto, helper, numpy_helper

    from .onnx_models import onnx_model, write_onnx

    w = (np.eye(3, dtype=np.float32) * 4.0 - 1.0).T
    inits = [
        numpy_helper.from_array(w, "head.weight"),
        numpy_helper.from_array(np.zeros(3, np.float32), "head.bias"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "head.weight", "head.bias"], ["logits"]),
    ]
    model = onnx_model(
        nodes,
        "colour",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])],
        inits,
        "Dominant colour: image float32 [1,3,16,16] (NCHW, RGB, (x/255-0.5)/0.25) -> global "
        "average pool -> Gemm -> logits [1,3] (red, green, blue).",
    )
    write_onnx(model, path)
    return path


def encode_image(pixels: np.ndarray, fmt: str) -> bytes:
    """An HxWx3 uint8 array encoded as PNG or JPEG (quality 92) with Pillow."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(
        buf, format=fmt, **({"quality": 92} if fmt == "JPEG" else {})
    )
    return buf.getvalue()


def colour_image(rng: np.random.Generator, dominant: int, width: int, height: int) -> np.ndarray:
    """An image whose ``dominant`` channel is bright, the others dim, with a gradient and noise."""
    ramp = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    base = rng.uniform(20, 70, size=(height, width, 3)).astype(np.float32) + 30 * ramp
    base[:, :, dominant] += 150
    return np.clip(base, 0, 255).astype(np.uint8)


def training_pipeline(data: bytes) -> np.ndarray:
    """The "training framework's" preprocessing of one file, in BGR order (its own mistake,
    or the device's): Pillow bilinear resize, ÷255, mean/std, NCHW."""
    from PIL import Image

    img = (
        Image.open(io.BytesIO(data)).convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    )
    x = np.asarray(img, dtype=np.float32)[:, :, ::-1] / 255.0
    x = (x - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def build_pipeline_example(out: Path, seed: int = 0) -> PipelineExample:
    """Write the model, raw images, pipeline and the BGR reference into ``out``."""
    import onnxruntime as ort

    out = Path(out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    model = build_colour_model(out / "colour.onnx")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    outputs, inputs = {}, {}
    for i, (case, dominant, width, height, fmt) in enumerate(CASES):
        data = encode_image(
            colour_image(np.random.default_rng([seed, i]), dominant, width, height), fmt
        )
        (raw / f"{case}.{'png' if fmt == 'PNG' else 'jpg'}").write_bytes(data)
        x = training_pipeline(data)
        inputs[f"{case}/image"] = x
        outputs[f"{case}/logits"] = session.run(None, {"image": x})[0]
    (out / "pipeline.toml").write_text(PIPELINE_TOML)
    np.savez(out / "reference_outputs.npz", **outputs)
    np.savez(out / "reference_inputs.npz", **inputs)
    return PipelineExample(
        model,
        raw,
        out / "pipeline.toml",
        out / "reference_outputs.npz",
        out / "reference_inputs.npz",
    )


def make_pipeline_golden(example: PipelineExample, golden: Path, on_warning=None) -> str:
    """The example's golden set of raw files (``golden make --raw ... --reference-inputs``)."""
    from ..golden import make_golden

    return make_golden(
        example.model,
        None,
        golden,
        raw=example.raw,
        pipeline=example.pipeline,
        outputs=example.outputs,
        reference_inputs=example.reference_inputs,
        decision=example.decision,
        on_warning=on_warning,
    )
