"""Raw files for the pipeline tests, made here from code: images Pillow encodes, WAV files
written with the standard library, a tokenizer.json built with ``tokenizers`` (nothing is
downloaded), the hostile ones (a truncated JPEG, a decompression bomb, a WAV whose header
lies, text that is not UTF-8), and a four-input model that takes one of each decoder.

Loaded with ``load_test_helper("raw_files")``.
"""

from __future__ import annotations

import io
import struct
import wave
import zlib
from pathlib import Path

import numpy as np

WORDS = ("[PAD]", "[UNK]", "the", "board", "runs", "a", "model", "fast", "slow", "edge")
SEQ = 8
FRAME = 160
RATE = 16000


def encode_image(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    """An HxWx3 (or HxW) uint8 array as PNG or JPEG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def gradient(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    return base


def truncated_jpeg() -> bytes:
    """A real JPEG cut off halfway through its scan data."""
    data = encode_image(gradient(64, 64, 3), "JPEG")
    return data[: len(data) // 2]


def bomb_png(side: int = 20000) -> bytes:
    """A valid PNG header declaring ``side``×``side`` grey pixels (400 megapixels), with a
    few compressed rows of zeros after it: tiny on disk, 400 MB if anyone decoded it."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (side + 1) * 16, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def wav_bytes(samples: np.ndarray, rate: int = RATE) -> bytes:
    """16-bit PCM WAV bytes (``wave`` module) of int16 samples, (frames,) or (frames, channels)."""
    samples = np.asarray(samples, dtype="<i2")
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


def tone(n: int = FRAME, amplitude: int = 8000) -> np.ndarray:
    return (amplitude * np.sin(np.arange(n) / 5.0)).astype(np.int16)


def lying_wav() -> bytes:
    """A real WAV whose data chunk claims a million bytes more than the file holds."""
    data = bytearray(wav_bytes(tone()))
    pos = data.index(b"data")
    claimed = struct.unpack_from("<I", data, pos + 4)[0] + 1_000_000
    struct.pack_into("<I", data, pos + 4, claimed)
    struct.pack_into("<I", data, 4, len(data) - 8 + 1_000_000)  # and the RIFF size agrees
    return bytes(data[: len(data)])


def invalid_utf8() -> bytes:
    return b"the board runs " + b"\xff\xfe fast"


def tokenizer_json() -> str:
    """A WordLevel tokenizer over :data:`WORDS` with a whitespace pre-tokenizer, as JSON."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok.to_str()


def backtracking_tokenizer_json() -> str:
    """:func:`tokenizer_json` with a ``Split`` pre-tokenizer on ``(a+)+$`` after the whitespace
    split: a word of thirty ``a`` and a ``b`` exhausts Oniguruma's retry limit, and
    ``tokenizers`` panics (``pyo3_runtime.PanicException``, a BaseException)."""
    from tokenizers import Regex, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Sequence, Split, Whitespace

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Sequence([Whitespace(), Split(Regex("(a+)+$"), "isolated")])
    return tok.to_str()


BACKTRACKING_TEXT = "the board runs " + "a" * 40 + "b"
"""A text :func:`backtracking_tokenizer_json` panics on."""


def build_four_input_model(path: Path) -> Path:
    """score [1,1] = mean(image) + mean(audio) + mean(float(ids)) + mean(float(mask)):
    image float32 [1,3,16,16] NCHW, audio float32 [1,1,160], input_ids and attention_mask
    int64 [1,8]."""
    import onnx
    from onnx import TensorProto, helper

    def mean(x, out):
        return [
            helper.make_node("ReduceMean", [x], [out + "_r"], keepdims=1),
            helper.make_node("Flatten", [out + "_r"], [out], axis=0),
        ]

    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        *mean("image", "m1"),
        *mean("audio", "m2"),
        *mean("ids_f", "m3"),
        *mean("mask_f", "m4"),
        helper.make_node("Sum", ["m1", "m2", "m3", "m4"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "four_inputs",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16]),
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, FRAME]),
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, SEQ]),
        ],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    Path(path).write_bytes(model.SerializeToString())
    return Path(path)


def build_one_input_model(path: Path, dtype: str, shape: list) -> Path:
    """y [1,1] = mean(float(x)): one input of ``dtype`` (float32 or int64) and ``shape``
    (names for dynamic dims), for a pipeline of one decoder."""
    import onnx
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}[dtype]
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["xf"], ["r"], keepdims=1),
        helper.make_node("Flatten", ["r"], ["y"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "one_input",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    Path(path).write_bytes(model.SerializeToString())
    return Path(path)


FOUR_INPUT_PIPELINE = f"""
[inputs.image]
decode = "image"
interpolation = "bicubic"
crop = "center"
scale = 0.00392156862745098

[inputs.audio]
decode = "audio"
sample_rate = {RATE}
channels = 1

[inputs.input_ids]
decode = "text"
tokenizer = "tokenizer.json"
max_length = {SEQ}

[inputs.attention_mask]
decode = "text"
tokenizer = "tokenizer.json"
"""


def write_four_input_cases(out: Path, n: int = 3) -> Path:
    """Model, pipeline.toml, tokenizer.json and ``raw/cases.csv`` with ``n`` good cases."""
    out = Path(out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    build_four_input_model(out / "four.onnx")
    (out / "tokenizer.json").write_text(tokenizer_json())
    (out / "pipeline.toml").write_text(FOUR_INPUT_PIPELINE)
    texts = ["the board runs a model", "edge model fast", "the slow board runs the model fast ok"]
    lines = ["case,image,audio,input_ids,attention_mask"]
    for i in range(n):
        (raw / f"img{i}.png").write_bytes(encode_image(gradient(20 + 4 * i, 24, i)))
        (raw / f"clip{i}.wav").write_bytes(wav_bytes(tone(FRAME - 40 + 30 * i, 4000 + 1000 * i)))
        (raw / f"text{i}.txt").write_text(texts[i % len(texts)], encoding="utf-8")
        lines.append(f"c{i},img{i}.png,clip{i}.wav,text{i}.txt,text{i}.txt")
    (raw / "cases.csv").write_text("\n".join(lines) + "\n")
    return out
