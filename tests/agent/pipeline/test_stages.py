"""The declared pipeline's stages on real encoded files: Pillow decodes the PNGs and JPEGs
the tests encode, the WAV parser reads files the standard library wrote, ``tokenizers``
runs a tokenizer built here; hostile raw files are refused with one line naming why."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from edgequal.agent.pipeline.stages import PipelineStages
from edgequal.contract.errors import BadInput, BadRawInput
from edgequal.contract.input_contract import parse_declared
from edgequal.contract.pipeline_spec import Pipeline, resolve_pipeline
from edgequal.contract.tensors import TensorSpec


@pytest.fixture(scope="module")
def raw(test_helper):
    return test_helper("raw_files")


IMAGE = TensorSpec("image", "float32", [1, 3, 6, 6])


def _pipeline(keys: dict, specs=(IMAGE,), assets=None) -> PipelineStages:
    declared = parse_declared({"inputs": keys}, "p.toml", stages=True)
    digests = {}

    def digest(path: str) -> str:
        data = assets[path]
        digests[hashlib.sha256(data).hexdigest()] = data
        return hashlib.sha256(data).hexdigest()

    pipeline = resolve_pipeline(declared, list(specs), digest)
    # What the device reads back from the golden manifest is the same pipeline.
    assert Pipeline.from_json(pipeline.to_json()) == pipeline
    return PipelineStages(pipeline, digests)


def test_image_stages_match_a_hand_computed_tensor(raw):
    pixels = raw.gradient(6, 6, 1)
    stages = _pipeline(
        {"image": {"decode": "image", "color_order": "BGR", "mean": [0.5] * 3, "std": [0.25] * 3}}
    )
    x = stages.preprocess(stages.decode({"image": raw.encode_image(pixels)}))["image"]
    # PNG is lossless, no resize: BGR order, /255 (a mean in 0-1 units), (x-0.5)/0.25, NCHW.
    expected = ((pixels[:, :, ::-1] / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)[None]
    assert x.dtype == np.float32 and x.shape == (1, 3, 6, 6)
    np.testing.assert_allclose(x, expected, atol=1e-6)


def test_center_crop_keeps_the_middle_of_a_wide_image(raw):
    pixels = np.zeros((6, 18, 3), np.uint8)
    pixels[:, 6:12] = 200  # the middle third is bright
    stages = _pipeline({"image": {"decode": "image", "crop": "center", "interpolation": "nearest"}})
    x = stages.preprocess(stages.decode({"image": raw.encode_image(pixels)}))["image"]
    assert x.min() == 200.0  # without a crop the dark sides would be in it
    plain = _pipeline({"image": {"decode": "image", "interpolation": "nearest"}})
    assert plain.preprocess(plain.decode({"image": raw.encode_image(pixels)}))["image"].min() == 0


def test_quantized_input_takes_the_models_scale_and_zero_point(raw):
    spec = TensorSpec("image", "int8", [1, 2, 2, 3], {"scale": 1 / 255, "zero_point": -128})
    stages = _pipeline({"image": {"decode": "image", "scale": 1 / 255}}, specs=(spec,))
    pixels = np.array([[[0, 128, 255], [10, 20, 30]], [[1, 2, 3], [4, 5, 6]]], np.uint8)
    x = stages.preprocess(stages.decode({"image": raw.encode_image(pixels)}))["image"]
    assert x.dtype == np.int8
    np.testing.assert_array_equal(x[0], pixels.astype(np.int16) - 128)


def test_audio_is_mixed_down_framed_and_scaled(raw):
    spec = TensorSpec("audio", "float32", [1, 1, 100])
    stereo = np.stack([raw.tone(60), -raw.tone(60) // 2], axis=1)
    stages = _pipeline({"audio": {"decode": "audio", "sample_rate": 16000}}, specs=(spec,))
    x = stages.preprocess(stages.decode({"audio": raw.wav_bytes(stereo)}))["audio"]
    assert x.shape == (1, 1, 100)
    expected = stereo.astype(np.float32).mean(axis=1) / 32768.0
    np.testing.assert_allclose(x[0, 0, :60], expected, atol=1e-7)
    assert not x[0, 0, 60:].any()  # zero-padded to the frame
    wrong_rate = stages.decode({"audio": raw.wav_bytes(raw.tone(), rate=8000)})
    with pytest.raises(BadRawInput, match="the clip is 8000 Hz, the pipeline takes 16000 Hz"):
        stages.preprocess(wrong_rate)


def test_text_is_tokenized_truncated_padded_and_mapped_to_each_input(raw):
    tok = raw.tokenizer_json().encode()
    specs = (
        TensorSpec("input_ids", "int64", [1, 4]),
        TensorSpec("attention_mask", "int64", [1, 4]),
    )
    keys = {"decode": "text", "tokenizer": "tok.json"}
    stages = _pipeline({"input_ids": keys, "attention_mask": keys}, specs, {"tok.json": tok})
    text = b"the board runs"
    feeds = stages.preprocess(stages.decode({"input_ids": text, "attention_mask": text}))
    np.testing.assert_array_equal(feeds["input_ids"], [[2, 3, 4, 0]])  # [PAD] is 0
    np.testing.assert_array_equal(feeds["attention_mask"], [[1, 1, 1, 0]])
    long = b"the board runs a model fast"
    feeds = stages.preprocess(stages.decode({"input_ids": long, "attention_mask": long}))
    np.testing.assert_array_equal(feeds["input_ids"], [[2, 3, 4, 5]])
    strict = _pipeline(
        {n: {**keys, "truncation": False} for n in ("input_ids", "attention_mask")},
        specs,
        {"tok.json": tok},
    )
    with pytest.raises(BadRawInput, match="6 tokens, max_length 4 and truncation is off"):
        strict.preprocess(strict.decode({"input_ids": long, "attention_mask": long}))


@pytest.mark.parametrize(
    ("make", "decode", "message"),
    [
        (
            "truncated_jpeg",
            "image",
            "input 'x': the JPEG cannot be decoded (image file is truncated",
        ),
        (
            "bomb_png",
            "image",
            "input 'x': the image declares more than 50000000 pixels (a decompression bomb",
        ),
        ("lying_wav", "audio", "input 'x': the WAV header says"),
        ("invalid_utf8", "text", "input 'x': the text is not UTF-8 (byte 0xff at offset 15)"),
    ],
)
def test_hostile_raw_files_are_refused_in_one_line(raw, make, decode, message):
    specs = {
        "image": TensorSpec("x", "float32", [1, 3, 8, 8]),
        "audio": TensorSpec("x", "float32", [1, 160]),
        "text": TensorSpec("x", "int64", [1, 8]),
    }
    keys = {"decode": decode, **({"tokenizer": "t.json"} if decode == "text" else {})}
    stages = _pipeline({"x": keys}, (specs[decode],), {"t.json": raw.tokenizer_json().encode()})
    with pytest.raises(BadRawInput) as info:
        stages.decode({"x": getattr(raw, make)()})
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value) and info.value.stage == "decode"


def test_an_image_over_the_limit_is_refused_before_it_is_decoded(raw):
    stages = _pipeline({"image": {"decode": "image"}})
    with pytest.raises(BadRawInput, match="the PNG declares 8000x8000 pixels, more than 50000000"):
        stages.decode({"image": raw.bomb_png(8000)})


def test_not_an_image_and_a_wav_without_data_are_refused(raw):
    stages = _pipeline({"image": {"decode": "image"}})
    with pytest.raises(BadRawInput, match="not a PNG or JPEG image"):
        stages.decode({"image": b"GIF89a" + bytes(40)})
    audio = _pipeline({"a": {"decode": "audio"}}, (TensorSpec("a", "float32", [1, 10]),))
    good = raw.wav_bytes(raw.tone(10))
    header_only = good[: good.index(b"data")]
    header_only = header_only[:4] + (len(header_only) - 8).to_bytes(4, "little") + header_only[8:]
    with pytest.raises(BadRawInput, match="the WAV has no 'data' chunk"):
        audio.decode({"a": header_only})


@pytest.mark.parametrize(
    ("table", "specs", "message"),
    [
        ({"x": {"decode": "image", "heigth": 4}}, (IMAGE,), "unknown key 'heigth' at [inputs.x]"),
        ({"image": {"decode": "image", "height": 4}}, (IMAGE,), "did you mean 'resize'?"),
        ({"image": {"decode": "image", "resize": [8, 8]}}, (IMAGE,), "'resize' height is 8, the model takes 6"),
        ({"image": {"decode": "image", "color_order": "GRAY"}}, (IMAGE,), "'color_order' is GRAY, the model takes 3 channel(s)"),
        ({"image": {"decode": "image", "layout": "NHWC"}}, (IMAGE,), "'layout' is NHWC, the model takes NCHW"),
        ({"image": {"decode": "image", "dtype": "uint8"}}, (IMAGE,), "'dtype' is 'uint8', the model takes float32"),
        ({"image": {"decode": "image", "sample_rate": 16000}}, (IMAGE,), "'sample_rate' applies to decode = \"audio\", not \"image\""),
        ({"image": {"decode": "video"}}, (IMAGE,), "'decode' must be one of image, audio, text"),
        ({"image": {"resize": [4, 4]}}, (IMAGE,), "input 'image': no 'decode' stage"),
        ({"other": {"decode": "image"}}, (IMAGE,), "names input 'other', which the model does not have"),
        ({"a": {"decode": "audio", "frame": 100}}, (TensorSpec("a", "float32", [1, 160]),), "'frame' is 100 samples, the model's last axis is 160"),
        ({"t": {"decode": "text"}}, (TensorSpec("t", "int64", [1, 8]),), "needs tokenizer = \"tokenizer.json\""),
    ],
)  # fmt: skip
def test_every_key_and_value_is_checked_against_the_model(table, specs, message):
    with pytest.raises(BadInput) as info:
        _pipeline(table, specs)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_input_contract_refuses_stage_keys_with_the_command_that_runs_them():
    with pytest.raises(BadInput, match="'decode' at \\[inputs.x\\] is a pipeline stage") as info:
        parse_declared({"inputs": {"x": {"decode": "image"}}}, "pre.toml", stages=False)
    assert "--raw DIR --pipeline" in info.value.hint


def test_a_hostile_manifest_pipeline_is_refused():
    good = resolve_pipeline(
        parse_declared({"inputs": {"image": {"decode": "image"}}}, "p", stages=True), [IMAGE], str
    ).to_json()
    for bad, message in (
        ({**good, "format": "x"}, "pipeline must be an edgequal.pipeline/v1 object"),
        ({**good, "inputs": {"image": {**good["inputs"]["image"], "exec": "rm"}}}, "unknown field 'exec'"),
        ({**good, "inputs": {"image": {**good["inputs"]["image"], "interpolation": "magic"}}}, "'interpolation' must be one of"),
    ):  # fmt: skip
        with pytest.raises(BadInput, match=message):
            Pipeline.from_json(bad)


DYNAMIC = {
    "image": TensorSpec("x", "float32", [1, 3, "h", "w"]),
    "audio": TensorSpec("x", "float32", [1, "n"]),
    "text": TensorSpec("x", "int64", [1, "s"]),
}


@pytest.mark.parametrize(
    ("decode", "keys", "message"),
    [
        ("image", {"resize": [100000, 100000]}, "'resize' [100000, 100000] is 10000000000 pixels, more than the limit of 50000000"),
        ("image", {"resize": [2**40, 1]}, "'resize' [1099511627776, 1] is 1099511627776 pixels, more than the limit of 50000000"),
        ("audio", {"frame": 10**12}, "'frame' of 1000000000000 samples × 1 channel(s) is more than the limit of 33554432 samples"),
        ("text", {"max_length": 10**9, "tokenizer": "t.json"}, "'max_length' 1000000000 is more than the limit of 131072 tokens"),
    ],
)  # fmt: skip
def test_sizes_past_the_pipeline_limits_are_refused_by_the_one_parser_both_sides_use(
    decode, keys, message
):
    """The host (resolve_pipeline) and the device (Pipeline.from_json of a golden manifest)
    refuse a size past spec.py's limits before anything is allocated."""
    with pytest.raises(BadInput) as info:
        _pipeline({"x": {"decode": decode, **keys}}, (DYNAMIC[decode],))
    assert message in str(info.value) and "\n" not in str(info.value)
    small = {
        "image": {"resize": [4, 4]},
        "audio": {"frame": 4},
        "text": {"max_length": 4, "tokenizer": "t.json"},
    }
    declared = parse_declared(
        {"inputs": {"x": {"decode": decode, **small[decode]}}}, "p", stages=True
    )
    good = resolve_pipeline(declared, [DYNAMIC[decode]], lambda _: "ab" * 32).to_json()
    hostile = dict(good["inputs"]["x"])
    if decode == "image":
        hostile["height"], hostile["width"] = keys["resize"]
    else:
        hostile.update({k: v for k, v in keys.items() if k != "tokenizer"})
    with pytest.raises(BadInput) as info:
        Pipeline.from_json({**good, "inputs": {"x": hostile}})
    assert message in str(info.value)


def test_a_model_whose_fixed_sizes_pass_the_limits_is_refused_too():
    huge = TensorSpec("x", "float32", [1, 3, 100000, 100000])
    with pytest.raises(BadInput, match="'resize' \\[100000, 100000\\] is 10000000000 pixels"):
        _pipeline({"x": {"decode": "image"}}, (huge,))


def test_a_tokenizer_regex_panic_is_a_refused_raw_file_not_a_base_exception(raw):
    """``tokenizers`` panics (PanicException, a BaseException ``except Exception`` misses) when
    a Split pattern like ``(a+)+$`` exhausts the regex engine: the case is refused in one line
    at the preprocess stage, and the tokenizer still serves the next text."""
    spec = TensorSpec("x", "int64", [1, 8])
    tok = {"t.json": raw.backtracking_tokenizer_json().encode()}
    stages = _pipeline({"x": {"decode": "text", "tokenizer": "t.json"}}, (spec,), tok)
    decoded = stages.decode({"x": raw.BACKTRACKING_TEXT.encode()})
    with pytest.raises(BadRawInput) as info:
        stages.preprocess(decoded)
    message = str(info.value)
    assert message.startswith("input 'x': the tokenizer failed on the text (")
    assert "retry-limit-in-match over" in message and "\n" not in message
    assert info.value.stage == "preprocess"
    ok = stages.preprocess(stages.decode({"x": b"the board runs"}))["x"]
    np.testing.assert_array_equal(ok, [[2, 3, 4, 0, 0, 0, 0, 0]])
