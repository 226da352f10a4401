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
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.artifacts import file_sha256
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices
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


def _deep_toml(path: Path, depth: int = 3000) -> Path:
    path.write_text("x = " + "[" * depth + "1" + "]" * depth + "\n")
    return path


def test_deeply_nested_policy_lab_and_models_files_are_bad_input_naming_the_file(
    example_models, tmp_path, capsys
):
    lab = tmp_path / "lab.toml"
    lab.write_text('[devices.a]\naddress = "grpc://127.0.0.1:7441"\n')
    models = tmp_path / "models.toml"
    models.write_text(f'[models.m]\npath = "{example_models["micro"]}"\n')
    report = tmp_path / "r.json"
    report.write_text("{}")
    for argv, bad in (
        (["gate", str(report), "--policy"], "policy.toml"),
        (["fleet", "run", "--models", str(models)], "lab2.toml"),
        (["fleet", "run", str(lab), "--models"], "models2.toml"),
        (["fleet", "health"], "lab3.toml"),
    ):
        deep = _deep_toml(tmp_path / bad)
        assert edgequal_main([*argv, str(deep)]) == UsageError.exit_code == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert str(deep) in line and "nested too deeply" in line, line
    # A depth the parser follows is still refused as a policy value, by name.
    shallow = _deep_toml(tmp_path / "shallow.toml", depth=50)
    assert edgequal_main(["gate", str(report), "--policy", str(shallow)]) == 2
    assert str(shallow) in _one_line(capsys.readouterr().err)


def test_a_golden_set_with_a_deeply_nested_manifest_is_bad_input_naming_the_file(tmp_path):
    deep = tmp_path / "deep.golden"
    manifest = '{"format": "edgequal.golden/v1", "model": ' + '{"a": ' * 100_000
    manifest += "1" + "}" * 100_001
    with zipfile.ZipFile(deep, "w") as zf:
        buf = io.BytesIO()
        np.save(buf, np.frombuffer(manifest.encode(), dtype=np.uint8))
        zf.writestr("__manifest__.npy", buf.getvalue())
    with pytest.raises(UsageError) as info:
        check_golden_for_model(deep, "ab" * 32, allow_mismatch=False)
    assert str(info.value) == f"{deep}: its manifest is nested too deeply to be a golden set"


PASSWORD = "hunter2-Sekr3t"


def test_a_password_in_an_address_is_refused_and_never_printed(example_models, tmp_path, capsys):
    micro = str(example_models["micro"])
    for address in (
        f"grpc://admin:{PASSWORD}@127.0.0.1:1",
        f"ssh://pi:{PASSWORD}@127.0.0.1:1",
        f"ssh://pi:p@{PASSWORD}@127.0.0.1",  # an '@' in the password too
    ):
        for argv in (
            ["qualify", micro, "--device", address],
            ["devices", "trust", "pw", address],
            ["agent", "status", address],
            ["runs", "list", "--device", address],
        ):
            assert edgequal_main(argv) == 2, argv
            out, err = capsys.readouterr()
            line = _one_line(err)
            assert "carries credentials" in line and ":***@127.0.0.1" in line, line
            assert PASSWORD not in out + err
    lab = tmp_path / "lab.toml"
    lab.write_text(f'[devices.a]\naddress = "grpc://admin:{PASSWORD}@10.0.0.7:50051"\n')
    models = tmp_path / "models.toml"
    models.write_text(f'[models.m]\npath = "{micro}"\n')
    assert edgequal_main(["fleet", "run", str(lab), "--models", str(models)]) == 2
    out, err = capsys.readouterr()
    assert "devices.a.address" in _one_line(err) and "admin:***@10.0.0.7" in err
    assert PASSWORD not in out + err
    assert KnownDevices().list() == []


def test_redact_hides_the_password_of_every_address_in_a_line():
    from edgequal.host.errors import TransportError, redact

    line = (
        f"device at admin:{PASSWORD}@127.0.0.1:1 does not answer (lookup failed for "
        f"grpc://u:{PASSWORD}@h:1); try `ssh -p 2 pi:{PASSWORD}@[::1]` or "
        f"postgresql+psycopg://eq:{PASSWORD}@db/lab"
    )
    assert redact(line) == (
        "device at admin:***@127.0.0.1:1 does not answer (lookup failed for "
        "grpc://u:***@h:1); try `ssh -p 2 pi:***@[::1]` or postgresql+psycopg://eq:***@db/lab"
    )
    assert (
        redact("ssh://pi@10.0.0.7 and grpc://[::1]:7441")
        == "ssh://pi@10.0.0.7 and grpc://[::1]:7441"
    )
    error = TransportError(line, hint=f"check grpc://a:{PASSWORD}@h:1")
    assert PASSWORD not in str(error) + error.hint
