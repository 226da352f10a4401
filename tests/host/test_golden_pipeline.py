"""``edgequal golden make --raw DIR --pipeline P``: golden sets of raw files, made through the
CLI with real models, real encoded files and a tokenizer built here; every bad input is
one line and exit 2."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from edgequal.contract.golden import read_golden
from edgequal.host.cli.main import main


@pytest.fixture(scope="module")
def raw(test_helper):
    return test_helper("raw_files")


@pytest.fixture(scope="module")
def four(raw, tmp_path_factory):
    return raw.write_four_input_cases(tmp_path_factory.mktemp("four"))


def _make(d, *extra, raw_dir="raw", pipeline="pipeline.toml"):
    return main(
        ["golden", "make", str(d / "four.onnx"), "--raw", str(d / raw_dir),
         "--pipeline", str(d / pipeline), "-o", str(d / "g.npz"), *extra]
    )  # fmt: skip


def test_raw_cases_from_a_manifest_feed_every_decoder(four, capsys):
    assert _make(four, "--decision", "threshold:score>1") == 0
    out = capsys.readouterr().out
    assert "no --outputs: the references come from the declared pipeline" in out
    g = read_golden(four / "g.npz")
    assert [c.name for c in g.cases] == ["c0", "c1", "c2"]
    assert set(g.cases[0].raw) == {"image", "audio", "input_ids", "attention_mask"}
    assert g.cases[0].raw["audio"] == (four / "raw" / "clip0.wav").read_bytes()
    p = g.pipeline
    assert p.inputs["image"].interpolation == "bicubic" and p.inputs["image"].crop == "center"
    assert (
        p.inputs["attention_mask"].field == "attention_mask"
        and p.inputs["input_ids"].field == "ids"
    )
    assert set(p.libraries) == {"numpy", "pillow", "tokenizers"}
    # The tokenizer travels in the golden set, by its digest.
    assert [g.assets[d] for d in p.tokenizers] == [(four / "tokenizer.json").read_bytes()]
    # The tensors are what the declared pipeline made here: "edge model fast" is 3 tokens.
    np.testing.assert_array_equal(g.cases[1].inputs["attention_mask"], [[1, 1, 1, 0, 0, 0, 0, 0]])
    assert g.manifest["reference"]["preprocessing"] == "the declared pipeline, on the host"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[inputs.audio]", "[inputs.audio]\nsample_rat = 16000"), "unknown key 'sample_rat' at [inputs.audio]; did you mean 'sample_rate'?"),
        (('decode = "audio"', 'decode = "audio"\nframe = 99'), "'frame' is 99 samples, the model's last axis is 160"),
        (("[inputs.attention_mask]", "[inputs.mask]"), "names input 'mask', which the model does not have"),
    ],
)  # fmt: skip
def test_a_bad_pipeline_is_one_line_and_exit_2(four, capsys, edit, message):
    text = (four / "pipeline.toml").read_text().replace(*edit)
    (four / "bad.toml").write_text(text)
    assert _make(four, pipeline="bad.toml") == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("column", "make", "message"),
    [
        ("image", "truncated_jpeg", "raw case 'c0' input 'image': the JPEG cannot be decoded"),
        ("image", "bomb_png", "raw case 'c0' input 'image': the image declares more than"),
        ("audio", "lying_wav", "raw case 'c0' input 'audio': the WAV header says"),
        ("input_ids", "invalid_utf8", "raw case 'c0' input 'input_ids': the text is not UTF-8"),
    ],
)
def test_a_hostile_raw_file_is_refused_at_make_in_one_line(
    four, raw, capsys, tmp_path, column, make, message
):
    bad = tmp_path / "raw"
    shutil.copytree(four / "raw", bad)
    (bad / "hostile.bin").write_bytes(getattr(raw, make)())
    rows = (bad / "cases.csv").read_text().splitlines()
    header = rows[0].split(",")
    first = rows[1].split(",")
    first[header.index(column)] = "hostile.bin"
    if column == "input_ids":
        first[header.index("attention_mask")] = "hostile.bin"
    (bad / "cases.csv").write_text("\n".join([rows[0], ",".join(first), *rows[2:]]) + "\n")
    for name in ("four.onnx", "pipeline.toml", "tokenizer.json"):
        shutil.copy(four / name, tmp_path / name)
    assert _make(tmp_path) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g.npz").exists()


def test_raw_without_a_pipeline_and_preprocessing_beside_raw_are_refused(four, capsys):
    assert (
        main(
            [
                "golden",
                "make",
                str(four / "four.onnx"),
                "--raw",
                str(four / "raw"),
                "-o",
                str(four / "x.npz"),
            ]
        )
        == 2
    )
    assert "--raw needs --pipeline" in capsys.readouterr().err
    assert _make(four, "--preprocessing", str(four / "pipeline.toml")) == 2
    assert "with --raw the keys go in --pipeline" in capsys.readouterr().err
