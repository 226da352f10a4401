"""`--edge-shape` on `edgequal qualify` and `edgequal golden make`: parsing, one-line
errors with exit 2, and golden make checking each shape against the model's inputs."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.errors import BadInput
from edgequal.host.examples.catalog import example_inputs


def _golden_make(model, tmp_path, *flags) -> tuple[int, object]:
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("dynamic", 1)[0])
    out = tmp_path / "g.npz"
    argv = ["golden", "make", str(model), "--inputs", str(inputs), *flags, "-o", str(out)]
    return edgequal_main(argv), out


def test_golden_make_refuses_an_edge_shape_the_model_cannot_take(example_models, tmp_path, capsys):
    rc, golden = _golden_make(example_models["dynamic"], tmp_path, "--edge-shape", "x:img=1x3x8x8")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--edge-shape 'x': the model has no input 'img' (inputs: image)" in err
    assert not golden.exists()
    rc, golden = _golden_make(
        example_models["dynamic"], tmp_path, "--edge-shape", "x:image=1x4x8x8"
    )
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2
    assert (
        "input 'image' is declared float32 [batch,3,height,width]; 1x4x8x8 does not fit it" in err
    )


@pytest.mark.parametrize(
    "value, message",
    [
        ("largest", "cannot read --edge-shape 'largest'"),
        ("largest:", "cannot read --edge-shape 'largest:'"),
        (":image=1x3", "cannot read --edge-shape ':image=1x3'"),
        ("big:image=1xtwo", "cannot read --edge-shape 'big:image=1xtwo'"),
        ("big:image=1x-3", "cannot read --edge-shape 'big:image=1x-3'"),
        ("big:image=1x3,image=1x4", "cannot read --edge-shape 'big:image=1x3,image=1x4'"),
        ("big one:image=1x3", "the label must be a short name"),
        ("big:image=65536x65536x2", "asks for an input of over 1,073,741,824 elements"),
    ],
)
@pytest.mark.parametrize("command", ["qualify", "golden"])
def test_edge_shape_flag_errors_are_one_line_exit_2(command, value, message, tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not read: the flag is refused first")
    if command == "qualify":
        argv = ["qualify", str(model), "--device", "nowhere", "--edge-shape", value]
    else:
        argv = ["golden", "make", str(model), "--inputs", "i.npz", "-o", str(tmp_path / "g.npz")]
        argv += ["--edge-shape", value]
    assert edgequal_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert message in err


def test_edge_shape_flags_become_the_plans_edge_shapes(tmp_path):
    from edgequal.cli.qualify import parse_edge_shape_args

    assert parse_edge_shape_args([]) is None
    assert parse_edge_shape_args(["largest:image=1x3x1024x1024,mask=1X0", "empty:tokens=1x0"]) == [
        {"label": "largest", "shapes": {"image": [1, 3, 1024, 1024], "mask": [1, 0]}},
        {"label": "empty", "shapes": {"tokens": [1, 0]}},
    ]
    with pytest.raises(BadInput, match="names the label 'a' twice"):
        parse_edge_shape_args(["a:x=1", "a:x=2"])
