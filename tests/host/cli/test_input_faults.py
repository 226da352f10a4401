"""Hostile or odd inputs on the host: each one line with the right exit code, never a traceback."""

from __future__ import annotations

import base64
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from edgequal.agent.golden import file_sha256
from edgequal.agent.phases.qualification import exit_code_for
from edgequal.agent.report.signing import MEASURED_STATUSES
from edgequal.host.cli.main import main as edgequal_main
from edgequal.host.errors import UsageError
from edgequal.host.golden import check_golden_for_model

# These tests qualify through the CLI, whose quick preset warms up until the latency is
# steady (at most 10 s): a model with a golden set that gets there in about a second.
STEADY = "multi_input"


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


def test_a_port_above_65535_is_refused_not_wrapped(example_models, capsys):
    for argv in (
        ["qualify", str(example_models["micro"]), "--device", "grpc://127.0.0.1:101055"],
        ["devices", "trust", "wrap", "grpc://127.0.0.1:101055"],
        ["qualify", str(example_models["micro"]), "--device", "grpc://127.0.0.1:0"],
    ):
        assert edgequal_main(argv) == 2
        line = _one_line(capsys.readouterr().err)
        assert "outside 1-65535" in line


@pytest.mark.slow
def test_a_file_name_that_is_not_utf8_is_qualified_and_printed(
    example_models, golden_sets, short_plan, tmp_path, capsys
):
    model = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"mod\xff\xfe.onnx")))
    golden = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"gold\xe9.npz")))
    # multi_input: a model with a golden set whose warm-up settles within the preset's
    # minimum (the classifier's microsecond calls run out the 10 s cap on a busy machine).
    model.write_bytes(example_models[STEADY].read_bytes())
    golden.write_bytes(golden_sets[STEADY].read_bytes())
    report = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"r\xff.json")))
    for extra in ([], ["-o", str(report), "--json"]):
        rc = edgequal_main(
            ["qualify", str(model), "--golden", str(golden), "--sustain", "0", *extra]
            + [*short_plan]
        )
        out, err = capsys.readouterr()
        assert "internal error" not in err
    predicate = json.loads(out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert "r\\xff.json" in err  # the path as printed
    statement = json.loads(base64.b64decode(json.loads(report.read_bytes())["payload"]))
    assert {s["name"] for s in statement["subject"]} == {"mod\\xff\\xfe.onnx", "gold\\xe9.npz"}
    assert edgequal_main(["verify", str(report), "--artifact", str(model)]) == 0


def _npz_declaring(path: Path, shape: tuple[int, ...]) -> Path:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", header.getvalue() + b"\0" * 64)
    return path


def test_golden_make_on_an_npz_declaring_terabytes_is_exit_2(example_models, tmp_path, capsys):
    huge = _npz_declaring(tmp_path / "huge.npz", (1 << 20, 1 << 20))  # 4 TiB of float32
    rc = edgequal_main(
        ["golden", "make", str(example_models["micro"]), "--inputs", str(huge)]
        + ["-o", str(tmp_path / "g.npz")]
    )
    assert rc == 2
    line = _one_line(capsys.readouterr().err)
    assert "declares 4398046511104 bytes but holds" in line
    assert not (tmp_path / "g.npz").exists()
    # The same file given as --golden: refused before anything is sent (exit 2).
    rc = edgequal_main(["qualify", str(example_models["micro"]), "--golden", str(huge)])
    assert rc == 2
    _one_line(capsys.readouterr().err)


def test_verify_of_deeply_nested_json_is_a_failed_verification(tmp_path, capsys):
    nested = tmp_path / "nested.json"
    nested.write_text('{"payloadType": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert edgequal_main(["verify", str(nested)]) == 1
    assert "nested too deeply" in _one_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_golden_set_made_for_another_model_is_refused_before_anything_is_sent(
    example_models, golden_sets, short_plan, tmp_path, capsys
):
    other = tmp_path / f"{STEADY}-v2.onnx"
    proto = onnx.load(str(example_models[STEADY]))
    proto.doc_string = "re-exported"  # same graph, another file
    onnx.save(proto, str(other))
    golden = golden_sets[STEADY]
    with np.load(golden) as z:
        recorded = json.loads(z["__manifest__"].tobytes())["model"]["sha256"]
    assert recorded == file_sha256(example_models[STEADY]) != file_sha256(other)

    rc = edgequal_main(["qualify", str(other), "--golden", str(golden), "--sustain", "0"])
    assert rc == UsageError.exit_code == 2
    line = _one_line(capsys.readouterr().err)
    assert f"was made for {STEADY}.onnx (sha256 {recorded}), not for this model" in line
    assert "--allow-golden-mismatch" in line
    store = Path(os.environ["EDGEQUAL_LOCAL_STATE"]) / "artifacts" / "sha256"
    assert not store.exists() or not any(store.iterdir())  # nothing was pushed

    rc = edgequal_main(
        ["qualify", str(other), "--golden", str(golden), "--sustain", "0", "--json"]
        + ["--allow-golden-mismatch", *short_plan]
    )
    out, err = capsys.readouterr()
    predicate = json.loads(out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert "compared anyway" in err
    assert check_golden_for_model(golden, recorded, allow_mismatch=False) is None
