"""Tests for known_devices: format, pinning, changed keys, config dir."""

import os
from pathlib import Path

import pytest
from edgequal.contract.keys import DeviceKey, fingerprint_of
from edgequal.host.devices.trust import KnownDevices, known_devices_path, parse_line
from edgequal.host.errors import UntrustedDevice, UsageError
from edgequal.host.paths import config_dir

RAW = bytes(range(32))
# base64 of bytes 0..31, computed by hand from the 6-bit groups.
RAW_B64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_config_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EDGEQUAL_CONFIG_DIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert config_dir() == tmp_path / "home" / ".config" / "edgequal"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_dir() == tmp_path / "xdg" / "edgequal"
    monkeypatch.setenv("EDGEQUAL_CONFIG_DIR", str(tmp_path / "explicit"))
    assert config_dir() == tmp_path / "explicit"
    assert known_devices_path() == tmp_path / "explicit" / "known_devices"
    assert KnownDevices().path == tmp_path / "explicit" / "known_devices"


def test_trust_writes_one_readable_line(tmp_path):
    path = tmp_path / "cfg" / "known_devices"
    known = KnownDevices(path)
    entry = known.trust("pi5", "grpc://127.0.0.1:50051", RAW)
    assert path.read_text() == f"pi5 grpc://127.0.0.1:50051 ed25519 {RAW_B64}\n"
    assert entry.fingerprint == fingerprint_of(RAW)
    assert known.get("pi5") == entry
    assert known.find_by_key(RAW) == entry
    assert known.find_by_keyid(entry.keyid) == entry
    assert known.get("other") is None
    assert known.find_by_key(b"\x01" * 32) is None
    assert [p.name for p in path.parent.iterdir()] == ["known_devices"]  # no temp files


def test_parse_line_with_token_file_and_unknown_options():
    e = parse_line(f"  orin ssh://lab@127.0.0.1 ed25519 {RAW_B64} token_file=/t/orin.tok x=1 ")
    assert (e.name, e.address, e.public_key_raw, e.token_file) == (
        "orin",
        "ssh://lab@127.0.0.1",
        RAW,
        "/t/orin.tok",
    )
    assert e.options == {"x": "1"}
    assert e.to_line() == f"orin ssh://lab@127.0.0.1 ed25519 {RAW_B64} token_file=/t/orin.tok x=1"
    assert parse_line("   ") is None
    assert parse_line("# comment") is None


def test_url_safe_unpadded_key_is_accepted():
    key = DeviceKey.generate()
    b64 = key.public_key_b64().replace("+", "-").replace("/", "_").rstrip("=")
    assert parse_line(f"d local ed25519 {b64}").public_key_raw == key.public_key_raw()


@pytest.mark.parametrize(
    "line, message",
    [
        ("pi5 local ed25519", "expected 'NAME ADDRESS ed25519 PUBLICKEY'"),
        (f"pi5 local rsa {RAW_B64}", "not supported"),
        ("pi5 local ed25519 AAAA", "3 bytes"),
        ("pi5 local ed25519 !!!!", "not base64"),
        (f"-pi local ed25519 {RAW_B64}", "bad device name"),
        (f"pi5 local ed25519 {RAW_B64} token_file", "not key=value"),
    ],
)
def test_malformed_lines_are_usage_errors(line, message):
    with pytest.raises(UsageError, match=message):
        parse_line(line, where="kd:3")


def test_comments_survive_rewrites_and_duplicates_are_refused(tmp_path):
    path = tmp_path / "known_devices"
    path.write_text(f"# lab bench\npi5 local ed25519 {RAW_B64}\n")
    known = KnownDevices(path)
    other = DeviceKey.generate().public_key_raw()
    known.trust("orin", "grpc://127.0.0.1:1", other)
    lines = path.read_text().splitlines()
    assert lines[0] == "# lab bench"
    assert [e.name for e in known.list()] == ["pi5", "orin"]
    path.write_text(path.read_text() + f"pi5 local ed25519 {RAW_B64}\n")
    with pytest.raises(UsageError, match=r"known_devices:4: device pi5 is listed twice"):
        known.list()


def test_changed_key_for_pinned_device_is_hard_failure(tmp_path):
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("pi5", "local", RAW)
    before = (tmp_path / "known_devices").read_text()
    new = DeviceKey.generate()
    with pytest.raises(UntrustedDevice) as err:
        known.trust("pi5", "local", new.public_key_raw())
    assert fingerprint_of(RAW) in str(err.value)
    assert new.fingerprint() in str(err.value)
    assert "identity changed" in str(err.value)
    assert (tmp_path / "known_devices").read_text() == before  # nothing written
    replaced = known.trust("pi5", "local", new.public_key_raw(), replace=True)
    assert known.get("pi5") == replaced
    assert replaced.fingerprint == new.fingerprint()


def test_retrust_same_key_updates_address_and_keeps_token(tmp_path):
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("pi5", "grpc://127.0.0.1:1", RAW, token_file="/t/tok")
    e = known.trust("pi5", "grpc://127.0.0.1:2", RAW)
    assert (e.address, e.token_file) == ("grpc://127.0.0.1:2", "/t/tok")
    assert len(known.list()) == 1


def test_same_key_under_two_names_is_refused(tmp_path):
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("pi5", "local", RAW)
    with pytest.raises(UsageError, match="already pinned for device pi5"):
        known.trust("pi5b", "local", RAW)


def test_bad_name_or_address_is_refused(tmp_path):
    known = KnownDevices(tmp_path / "known_devices")
    with pytest.raises(UsageError, match="bad device name"):
        known.trust("has space", "local", RAW)
    with pytest.raises(UsageError, match="bad address"):
        known.trust("pi5", "a b", RAW)
    assert not Path(tmp_path / "known_devices").exists()


def test_forget(tmp_path):
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("pi5", "local", RAW)
    assert known.forget("pi5").public_key_raw == RAW
    assert known.list() == []
    assert (tmp_path / "known_devices").read_text() == ""
    with pytest.raises(UsageError, match="no device named pi5"):
        known.forget("pi5")


def test_missing_file_is_empty(tmp_path):
    assert KnownDevices(tmp_path / "nope").list() == []
    assert not os.path.exists(tmp_path / "nope")
