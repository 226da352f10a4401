"""``edgequal golden make --raw DIR --pipeline P``: golden sets of raw files, made through the
CLI with real models, real encoded files and a tokenizer built here; every bad input is
one line and exit 2."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from edgequal.cli.main import main
from edgequal.contract.golden import read_golden


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


def _capped_golden_make(d, cap_bytes: int):
    """``edgequal golden make`` in a child process whose address space is capped: what
    today's host would allocate for a hostile size fails there, not on the test machine.
    The child caps itself before it imports edgequal: a ``preexec_fn`` would run between
    fork and exec in a copy of this worker, whose gRPC threads (an earlier test's agent
    connection) then aborted the child ("epoll_wait error: Bad file descriptor", SIGABRT)."""
    import subprocess
    import sys

    capped = (
        "import resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({cap_bytes}, {cap_bytes})); "
        "sys.argv = ['edgequal', *sys.argv[1:]]; "
        "runpy.run_module('edgequal.cli', run_name='__main__', alter_sys=True)"
    )
    return subprocess.run(
        [sys.executable, "-c", capped, "golden", "make", str(d / "m.onnx"),
         "--raw", str(d / "raw"), "--pipeline", str(d / "pipeline.toml"), "-o", str(d / "g.npz")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("crop", "raw case 'strip' input 'x': crop = \"center\" would resize the 100000x1 image to 22400000x224"),
        ("resize", "'resize' [100000, 100000] is 10000000000 pixels, more than the limit of 50000000"),
        ("resize_overflow", "'resize' [1099511627776, 1] is 1099511627776 pixels, more than the limit"),
        ("frame", "'frame' of 1000000000000 samples × 1 channel(s) is more than the limit of 33554432"),
        ("max_length", "'max_length' 1000000000 is more than the limit of 131072 tokens"),
    ],
)  # fmt: skip
def test_pipeline_sizes_are_bounded_on_the_host(raw, tmp_path, case, message):
    """Under a 3 GiB address-space cap each hostile size is one line and exit 2, naming the
    key and the limit, before the host allocates it (was MemoryError, OverflowError, SIGABRT)."""
    d = tmp_path
    (d / "raw").mkdir()
    if case == "crop":
        raw.build_one_input_model(d / "m.onnx", "float32", [1, 3, 224, 224])
        (d / "raw" / "strip.png").write_bytes(raw.encode_image(np.zeros((1, 100000, 3), np.uint8)))
        pipeline = 'decode = "image"\ncrop = "center"\n'
    elif case.startswith("resize"):
        raw.build_one_input_model(d / "m.onnx", "float32", [1, 3, "h", "w"])
        (d / "raw" / "img.png").write_bytes(raw.encode_image(raw.gradient(8, 8)))
        size = "[100000, 100000]" if case == "resize" else f"[{2**40}, 1]"
        pipeline = f'decode = "image"\nresize = {size}\n'
    elif case == "frame":
        raw.build_one_input_model(d / "m.onnx", "float32", [1, "n"])
        (d / "raw" / "clip.wav").write_bytes(raw.wav_bytes(raw.tone(100)))
        pipeline = f'decode = "audio"\nframe = {10**12}\n'
    else:
        raw.build_one_input_model(d / "m.onnx", "int64", [1, "s"])
        (d / "raw" / "t.txt").write_text("the board runs")
        (d / "tokenizer.json").write_text(raw.tokenizer_json())
        pipeline = f'decode = "text"\ntokenizer = "tokenizer.json"\nmax_length = {10**9}\n'
    (d / "pipeline.toml").write_text("[inputs.x]\n" + pipeline)
    # 6 GiB of address space, as the issue measured: room for the runtime's threads and
    # arenas, and still far below what each hostile size would allocate (8 GB and more).
    done = _capped_golden_make(d, 6 << 30)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (d / "g.npz").exists()


def test_a_tokenizer_regex_panic_is_one_line_and_exit_2(raw, tmp_path, capfd):
    """A ``Split`` pre-tokenizer on ``(a+)+$`` panics inside ``tokenizers`` on a long run of
    ``a``: one line naming the case, exit 2 (was exit 1 and a PanicException traceback);
    the panic's own report on file descriptor 2 is not left on the terminal."""
    raw.build_one_input_model(tmp_path / "m.onnx", "int64", [1, 8])
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "long.txt").write_text(raw.BACKTRACKING_TEXT)
    (tmp_path / "tokenizer.json").write_text(raw.backtracking_tokenizer_json())
    (tmp_path / "pipeline.toml").write_text(
        '[inputs.x]\ndecode = "text"\ntokenizer = "tokenizer.json"\n'
    )
    capfd.readouterr()
    rc = main(
        ["golden", "make", str(tmp_path / "m.onnx"), "--raw", str(tmp_path / "raw"),
         "--pipeline", str(tmp_path / "pipeline.toml"), "-o", str(tmp_path / "g.npz")]
    )  # fmt: skip
    err = capfd.readouterr().err
    assert rc == 2, err
    assert "raw case 'long' input 'x': the tokenizer failed on the text (" in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "g.npz").exists()


@pytest.fixture
def one_image(raw, tmp_path):
    """A one-input image model [1,3,8,8], its pipeline.toml, a raw/ with one good PNG, and a
    PNG outside raw/ standing for a host file that must never enter the golden set."""
    raw.build_one_input_model(tmp_path / "m.onnx", "float32", [1, 3, 8, 8])
    (tmp_path / "pipeline.toml").write_text('[inputs.x]\ndecode = "image"\n')
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "good.png").write_bytes(raw.encode_image(raw.gradient(8, 8, 1)))
    secret = tmp_path / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(raw.encode_image(raw.gradient(8, 8, 7)))
    return tmp_path


def _make_one(d, raw_arg):
    return main(
        ["golden", "make", str(d / "m.onnx"), "--raw", str(raw_arg),
         "--pipeline", str(d / "pipeline.toml"), "-o", str(d / "g.npz")]
    )  # fmt: skip


@pytest.mark.parametrize("how", ["symlink", "csv_relative", "csv_absolute", "csv_symlink"])
def test_raw_files_from_outside_the_raw_directory_are_refused(one_image, capsys, how):
    """A symlink out of ``--raw DIR`` and a cases.csv row that climbs out of it or is absolute
    are refused in one line, exit 2: the host file's bytes never enter the golden set."""
    d = one_image
    secret = d / "elsewhere" / "secret.png"
    if how == "symlink":
        (d / "raw" / "leak.png").symlink_to(secret)
    elif how == "csv_symlink":
        (d / "raw" / "leak.png").symlink_to(secret)
        (d / "raw" / "cases.csv").write_text("case,x\ngood,good.png\nleak,leak.png\n")
    else:
        row = "../elsewhere/secret.png" if how == "csv_relative" else str(secret)
        (d / "raw" / "cases.csv").write_text(f"case,x\ngood,good.png\nleak,{row}\n")
    capsys.readouterr()
    assert _make_one(d, d / "raw") == 2
    err = capsys.readouterr().err
    assert "outside --raw" in err and len(err.strip().splitlines()) == 1, err
    assert not (d / "g.npz").exists()


def test_a_nul_byte_in_a_cases_csv_path_is_one_line(one_image, capsys):
    """Found by tests/test_fuzz_inputs.py: a row naming a file with a NUL byte ended in an
    internal error (``ValueError: embedded null byte``, exit 3)."""
    d = one_image
    (d / "raw" / "cases.csv").write_text("case,x\ngood,good.png\nnul,a\x00b.png\n")
    capsys.readouterr()
    assert _make_one(d, d / "raw") == 2
    err = capsys.readouterr().err
    assert "line 3 column x" in err and "holds a NUL byte" in err, err
    assert len(err.strip().splitlines()) == 1 and not (d / "g.npz").exists()


def test_a_symlink_within_the_raw_directory_is_read(one_image):
    d = one_image
    (d / "raw" / "again.png").symlink_to(d / "raw" / "good.png")
    assert _make_one(d, d / "raw") == 0
    g = read_golden(d / "g.npz")
    assert [c.name for c in g.cases] == ["again", "good"]
    assert g.cases[0].raw["x"] == g.cases[1].raw["x"]


def test_a_raw_file_name_that_is_not_utf8_is_one_line_naming_its_bytes(one_image, capsys):
    d = one_image
    name = b"caf\xe9.png"
    with open(os.path.join(os.fsencode(d / "raw"), name), "wb") as f:
        f.write((d / "raw" / "good.png").read_bytes())
    capsys.readouterr()
    assert _make_one(d, d / "raw") == 2
    err = capsys.readouterr().err
    assert "caf\\xe9.png" in err and "not UTF-8" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (d / "g.npz").exists()
