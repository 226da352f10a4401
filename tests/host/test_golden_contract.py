"""`edgequal golden make` records the input contract: from the data, a TOML beside the inputs, flags."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.golden import read_golden
from edgequal.host.examples.catalog import example_inputs


def _make(example_models, tmp_path, *flags, inputs=None):
    if inputs is None:
        inputs = tmp_path / "in.npz"
        np.savez(inputs, **example_inputs("classifier", 1)[0])
    out = tmp_path / "g.npz"
    argv = ["golden", "make", str(example_models["classifier"]), "--inputs", str(inputs)]
    rc = edgequal_main([*argv, *flags, "-o", str(out)])
    return rc, out


def test_the_contract_reads_the_data_and_the_flags(example_models, tmp_path, capsys):
    rc, out = _make(
        example_models,
        tmp_path,
        "--range",
        "0,1",
        "--mean",
        "0.485,0.456,0.406",
        "--std",
        "0.229,0.224,0.225",
        "--color-order",
        "rgb",
        "--resize",
        "32x32",
    )
    assert rc == 0
    pre = read_golden(out).manifest["preprocessing"]
    assert pre["format"] == "edgequal.input-contract/v1"
    image = pre["inputs"]["image"]
    data = example_inputs("classifier", 1)[0]["image"]
    assert image["dtype"] == "float32" and image["layout"] == "NCHW"
    assert image["range_seen"] == [float(data.min()), float(data.max())]
    assert image["model_range"] == [0.0, 1.0]
    assert image["mean"] == [0.485, 0.456, 0.406] and image["std"] == [0.229, 0.224, 0.225]
    assert image["color_order"] == "RGB" and image["resize"] == [32, 32]
    assert "warning" not in capsys.readouterr().out


def test_a_toml_beside_the_inputs_is_read_and_flags_win(example_models, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("classifier", 1)[0])
    (tmp_path / "in.toml").write_text(
        'color_order = "BGR"\n[inputs.image]\nscale = 0.00392156862745098\nresize = [64, 64]\n'
    )
    rc, out = _make(example_models, tmp_path, "--resize", "32x32", inputs=inputs)
    assert rc == 0
    image = read_golden(out).manifest["preprocessing"]["inputs"]["image"]
    assert image["color_order"] == "BGR" and image["scale"] == pytest.approx(1 / 255)
    assert image["resize"] == [32, 32]


def test_pixels_declared_as_trained_on_0_to_1_warn_at_make_time(example_models, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, image=(example_inputs("classifier", 1)[0]["image"] * 255).round())
    rc, out = _make(example_models, tmp_path, "--range", "0,1", inputs=inputs)
    assert rc == 0  # recorded as it is; the qualification flags it
    text = " ".join(capsys.readouterr().out.split())
    assert "warning: input 'image': the golden inputs span 0–" in text
    assert "trained on 0–1" in text


def test_an_unknown_toml_key_is_refused_with_the_closest_one(example_models, tmp_path, capsys):
    toml = tmp_path / "p.toml"
    toml.write_text("[inputs.image]\nlayot = 'NCHW'\n")
    rc, _ = _make(example_models, tmp_path, "--preprocessing", str(toml))
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown key 'layot' at [inputs.image]; did you mean 'layout'?" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--range", "0,x"], "--range takes numbers"),
        (["--resize", "32"], "--resize takes HEIGHTxWIDTH"),
        (["--mean", "0.5"], "give mean and std together"),
    ],
)
def test_bad_contract_flags_are_one_line_exit_2(example_models, tmp_path, capsys, flags, message):
    rc, _ = _make(example_models, tmp_path, *flags)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_a_range_that_starts_with_a_minus_is_taken_and_the_cases_are_counted(
    example_models, tmp_path, capsys
):
    """``--range -1,1`` (MediaPipe, Paddle) as a separate word, as ``--range=-1,1`` always was."""
    inputs = tmp_path / "in.npz"
    cases = example_inputs("classifier", 3)
    np.savez(inputs, **{f"c{i}/{k}": v for i, feeds in enumerate(cases) for k, v in feeds.items()})
    rc, out = _make(
        example_models,
        tmp_path,
        "--range",
        "-1,1",
        "--mean",
        "-0.5,-0.5,-0.5",
        "--std",
        "2,2,2",
        inputs=inputs,
    )
    assert rc == 0
    image = read_golden(out).manifest["preprocessing"]["inputs"]["image"]
    assert image["model_range"] == [-1.0, 1.0] and image["mean"] == [-0.5, -0.5, -0.5]
    assert f"golden set {out}: 3 cases, sha256 " in capsys.readouterr().out
