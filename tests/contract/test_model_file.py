"""A model file's framing, checked without a runtime (contract/model_file.py)."""

from __future__ import annotations

import pytest
from edgequal.contract.runtimes import model_file_problem


def test_every_example_model_passes(example_models):
    for path in example_models.values():
        runtime = "litert" if path.suffix == ".tflite" else "onnxruntime"
        assert model_file_problem(path, runtime) is None, path


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"these are my notes\n", "is no protobuf field"),
        (b"", "the file is empty"),
        (b"\x08\x07", "it has no graph (ModelProto field 7)"),  # ir_version alone
        (b"\x08\x07\x3a\x10abc", "field 7 claims more bytes than the file holds"),
        (b"\x3a\x00", "it has no ir_version (ModelProto field 1)"),
        (b"\x08", "the file ends inside a field"),
    ],
)
def test_what_is_not_an_onnx_model_says_why(tmp_path, content, problem):
    path = tmp_path / "m.onnx"
    path.write_bytes(content)
    assert problem in model_file_problem(path, "onnxruntime")


def test_a_truncated_model_and_a_tflite_without_its_identifier(example_models, tmp_path):
    data = example_models["classifier"].read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    assert "claims more bytes than the file holds" in model_file_problem(cut, "onnxruntime")
    fake = tmp_path / "m.tflite"
    fake.write_bytes(b"\x1c\x00\x00\x00ONNX" + bytes(32))
    assert model_file_problem(fake, "litert") == "it lacks the TFL3 file identifier at byte 4"
