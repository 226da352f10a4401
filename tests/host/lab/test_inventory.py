"""Lab and models files: what loads, and the precise error (file, line, key) for what does not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from edgequal.host.lab.inventory import (
    InventoryError,
    SecretRef,
    load_lab,
    load_models,
    parse_tags,
)

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str, name: str = "lab.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_the_example_lab_loads():
    lab = load_lab(REPO / "docs" / "lab.example.toml")
    names = [d.name for d in lab.devices]
    assert names == ["pi5-a", "pi5-b", "orin-1", "bench-x86"]
    pi = lab.device("pi5-a")
    assert pi.address == "grpc://10.0.0.21:7441"
    assert pi.profile == "raspberry-pi/5"
    assert pi.tags == ("pi", "arm64")
    assert pi.token == SecretRef(env="LAB_PI5A_TOKEN")
    assert [d.name for d in lab.select({"pi"})] == ["pi5-a", "pi5-b"]
    assert lab.device("orin-1").transport_kind == "ssh"
    assert lab.history_url == SecretRef(env="EDGEQUAL_HISTORY_URL")


def test_relative_paths_are_relative_to_the_lab_file(tmp_path):
    path = write(
        tmp_path,
        """
        [devices.a]
        address = "grpc://127.0.0.1:7441"
        token_file = "tokens/a.token"
        """,
    )
    assert load_lab(path).device("a").token == SecretRef(file=tmp_path / "tokens" / "a.token")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            """
            [devices.a]
            address = "grpc://127.0.0.1:7441"
            token = "s3cret"
            """,
            "lab.toml:3: devices.a.token: credentials are never written in the lab file",
        ),
        (
            """
            [lab]
            name = "x"

            [devices.a]
            adress = "grpc://127.0.0.1:7441"
            """,
            "lab.toml:5: devices.a.adress: unknown key (did you mean 'address'?)",
        ),
        (
            """
            [devices.a]
            address = "http://127.0.0.1:7441"
            """,
            "lab.toml:2: devices.a.address: 'http://127.0.0.1:7441': use grpc://",
        ),
        (
            """
            [devices.a]
            address = "grpc://127.0.0.1"
            """,
            "lab.toml:2: devices.a.address: 'grpc://127.0.0.1' is not grpc://HOST:PORT",
        ),
        (
            """
            [devices.a]
            address = "grpc://127.0.0.1:1"

            [devices.b]
            address = "grpc://127.0.0.1:2"
            tags = ["ok", 3]
            """,
            "lab.toml:6: devices.b.tags: must be a list of strings",
        ),
        (
            """
            [devices.a]
            address = "grpc://127.0.0.1:1"
            profile = "raspberry-pi/99"
            """,
            "lab.toml:3: devices.a.profile: unknown device profile 'raspberry-pi/99'",
        ),
        (
            """
            [devices.a]
            tags = ["x"]
            """,
            "lab.toml:1: devices.a: needs an address",
        ),
        (
            """
            [devices.a]
            address = "ssh://pi@h"
            token_env = "T"
            """,
            "lab.toml:3: devices.a.token_env: an ssh:// device is reached with an SSH key",
        ),
        (
            """
            [devices.a]
            address = "grpc://h:1"
            token_env = "not a name"
            """,
            "lab.toml:3: devices.a.token_env: 'not a name' is not an environment variable name",
        ),
        (
            """
            [lab]
            history_url = "postgresql://u:pw@db/lab"
            [devices.a]
            address = "grpc://h:1"
            """,
            "lab.toml:2: lab.history_url: credentials are never written in the lab file",
        ),
        ("[lab]\nname = 'x'\n", "lab.toml: has no devices"),
        ("[devices.a\naddress = 1\n", "lab.toml: not valid TOML: "),
    ],
)
def test_invalid_lab_files_name_file_line_and_key(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(InventoryError) as e:
        load_lab(path)
    assert str(e.value).startswith(f"{path.parent}/{message}"), str(e.value)
    assert e.value.exit_code == 2


def test_a_token_is_read_only_when_used(tmp_path, monkeypatch):
    ref = SecretRef(env="LAB_TEST_TOKEN")
    monkeypatch.delenv("LAB_TEST_TOKEN", raising=False)
    with pytest.raises(InventoryError, match="environment variable LAB_TEST_TOKEN is not set"):
        ref.read("device a")
    monkeypatch.setenv("LAB_TEST_TOKEN", " tok \n")
    assert ref.read("device a") == "tok"
    f = tmp_path / "t.token"
    f.write_text("filetok\n")
    f.chmod(0o644)
    with pytest.raises(InventoryError, match="device b: "):  # others may read it: refused
        SecretRef(file=f).read("device b")
    f.chmod(0o600)
    assert SecretRef(file=f).read("device b") == "filetok"


def test_models_file(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "g.npz").write_bytes(b"x")
    path = write(
        tmp_path,
        """
        [models.micro]
        path = "m.onnx"
        golden = "g.npz"
        plan = "quick"
        tags = ["pi"]

        [models.other]
        path = "m.onnx"
        """,
        "models.toml",
    )
    micro, other = load_models(path)
    assert micro.path == tmp_path / "m.onnx"
    assert micro.golden == tmp_path / "g.npz"
    assert micro.tags == ("pi",)
    assert other.golden is None and other.plan is None
    bad = write(tmp_path, '[models.x]\npath = "m.onnx"\nplan = "fast"\n', "bad.toml")
    with pytest.raises(InventoryError, match=r"bad.toml:3: models.x.plan: 'fast' is not one of"):
        load_models(bad)
    missing = write(tmp_path, '[models.x]\npath = "nope.onnx"\n', "missing.toml")
    with pytest.raises(
        InventoryError, match=r"missing.toml:2: models.x.path: model file not found"
    ):
        load_models(missing)


def test_parse_tags():
    assert parse_tags(None) == frozenset()
    assert parse_tags("pi, arm64,") == {"pi", "arm64"}
