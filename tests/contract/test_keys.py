"""Tests for the device key: creation mode, refusal of exposed keys, identifiers."""

import base64
import hashlib
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from edgequal.contract.errors import AgentError
from edgequal.contract.keys import (
    DeviceKey,
    UnsafeKeyFile,
    fingerprint_of,
    keyid_of,
    load_or_create_device_key,
)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_first_call_creates_0600_key_in_0700_dir(tmp_path):
    state = tmp_path / "state"
    key = load_or_create_device_key(state)
    assert _mode(state) == 0o700
    assert _mode(state / "device_key.pem") == 0o600
    assert (state / "device_key.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert (state / "device_key.pub").read_text() == key.public_key_b64() + "\n"
    # No temporary files are left behind.
    assert sorted(p.name for p in state.iterdir()) == ["device_key.pem", "device_key.pub"]


def test_mode_is_0600_even_with_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        load_or_create_device_key(tmp_path)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "device_key.pem") == 0o600


def test_second_call_loads_the_same_key(tmp_path):
    first = load_or_create_device_key(tmp_path)
    second = load_or_create_device_key(tmp_path)
    assert first.public_key_raw() == second.public_key_raw()
    assert second.path == tmp_path / "device_key.pem"


def test_stale_pub_file_is_rewritten(tmp_path):
    key = load_or_create_device_key(tmp_path)
    (tmp_path / "device_key.pub").write_text("garbage\n")
    load_or_create_device_key(tmp_path)
    assert (tmp_path / "device_key.pub").read_text() == key.public_key_b64() + "\n"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_refuses_key_readable_by_others(tmp_path, mode):
    load_or_create_device_key(tmp_path)
    os.chmod(tmp_path / "device_key.pem", mode)
    with pytest.raises(UnsafeKeyFile) as err:
        load_or_create_device_key(tmp_path)
    assert isinstance(err.value, AgentError)
    assert f"mode {mode:04o}" in str(err.value)
    assert err.value.hint.startswith("chmod 600 ")


def test_refuses_key_owned_by_another_user(tmp_path, monkeypatch):
    load_or_create_device_key(tmp_path)
    owner = os.stat(tmp_path / "device_key.pem").st_uid
    # Run the agent as a different uid than the key's owner (works without root).
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(UnsafeKeyFile, match=f"owned by uid {owner}, not by the agent's user"):
        load_or_create_device_key(tmp_path)


def test_refuses_symlinked_key(tmp_path):
    real = tmp_path / "real"
    load_or_create_device_key(real)
    linked = tmp_path / "linked"
    linked.mkdir(mode=0o700)
    (linked / "device_key.pem").symlink_to(real / "device_key.pem")
    with pytest.raises(UnsafeKeyFile, match="symbolic link"):
        load_or_create_device_key(linked)


def test_refuses_garbage_key_file(tmp_path):
    fd = os.open(tmp_path / "device_key.pem", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not a key")
    os.close(fd)
    with pytest.raises(UnsafeKeyFile, match="not an unencrypted PEM private key"):
        load_or_create_device_key(tmp_path)


def test_signature_verifies_with_public_key():
    key = DeviceKey.generate()
    sig = key.sign(b"report")
    assert len(sig) == 64
    Ed25519PublicKey.from_public_bytes(key.public_key_raw()).verify(sig, b"report")


def test_identifiers_match_hand_computation():
    raw = bytes(range(32))
    digest = hashlib.sha256(raw).digest()
    # sha256 is 32 bytes -> 44 base64 chars with one '=' of padding, which is dropped.
    expected_fp = "SHA256:" + base64.b64encode(digest).decode()[:43]
    assert fingerprint_of(raw) == expected_fp
    assert len(fingerprint_of(raw)) == len("SHA256:") + 43
    assert keyid_of(raw) == hashlib.sha256(raw).hexdigest()
    key = DeviceKey.generate()
    assert key.fingerprint() == fingerprint_of(key.public_key_raw())
    assert key.keyid() == hashlib.sha256(key.public_key_raw()).hexdigest()
    assert base64.b64decode(key.public_key_b64()) == key.public_key_raw()
    assert key.fingerprint() in repr(key)


def test_fingerprint_rejects_wrong_length():
    with pytest.raises(ValueError):
        fingerprint_of(b"\x00" * 31)
