"""Tests for report verification: each check, in order, with the message it gives."""

import base64
import hashlib
import json
import shutil

import pytest
from edgequal.contract.artifacts import file_sha256
from edgequal.contract.keys import DeviceKey, load_or_create_device_key
from edgequal.contract.signing import (
    PAYLOAD_TYPE,
    build_statement,
    canonical_json,
    pae,
    sign_envelope,
)
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import UntrustedDevice, UsageError, VerificationFailed

MODEL_BYTES = b"\x08\x07fake-onnx-model"
GOLDEN_BYTES = b"golden set bytes"


@pytest.fixture
def artifacts(tmp_path):
    d = tmp_path / "artifacts"
    d.mkdir()
    (d / "model.onnx").write_bytes(MODEL_BYTES)
    (d / "golden.npz").write_bytes(GOLDEN_BYTES)
    return d


@pytest.fixture
def device_key(tmp_path):
    return load_or_create_device_key(tmp_path / "agent-state")


@pytest.fixture
def known(tmp_path, device_key):
    k = KnownDevices(tmp_path / "cfg" / "known_devices")
    k.trust("pi5", "grpc://127.0.0.1:50051", device_key.public_key_raw())
    return k


def _statement(**predicate_over):
    predicate = {
        "nonce": "c0ffee",
        "run_id": "run-7",
        "status": "passed",
        "reason": None,
        "results": {"latency": {"p50_ms": 1.5, "samples_ms": [1.5, 1.6]}},
    }
    predicate.update(predicate_over)
    return build_statement(
        [
            {
                "name": "model.onnx",
                "sha256": hashlib.sha256(MODEL_BYTES).hexdigest(),
                "role": "model",
            },
            {
                "name": "golden.npz",
                "sha256": hashlib.sha256(GOLDEN_BYTES).hexdigest(),
                "role": "golden",
            },
        ],
        predicate,
    )


def _resign(envelope: dict, payload: bytes, key: DeviceKey) -> bytes:
    """Build an envelope over ``payload`` signed by ``key`` (an attacker's tool)."""
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    envelope = dict(envelope)
    envelope["payload"] = base64.b64encode(payload).decode()
    envelope["signatures"] = [{"keyid": key.keyid(), "sig": base64.b64encode(sig).decode()}]
    return json.dumps(envelope).encode()


def test_round_trip_with_named_device_and_all_bindings(device_key, known, artifacts):
    env = sign_envelope(device_key, _statement())
    report = verify_envelope(
        env,
        known=known,
        device="pi5",
        expected_nonce="c0ffee",
        expected_run_id="run-7",
        artifacts=[artifacts / "model.onnx", artifacts / "golden.npz"],
        seen_nonces={"older-nonce"},
    )
    assert report.device_name == "pi5"
    assert report.fingerprint == device_key.fingerprint()
    assert (report.nonce, report.run_id, report.status) == ("c0ffee", "run-7", "passed")
    assert report.predicate["results"]["latency"]["samples_ms"] == [1.5, 1.6]
    assert report.subjects == [
        {"name": "model.onnx", "sha256": hashlib.sha256(MODEL_BYTES).hexdigest(), "role": "model"},
        {
            "name": "golden.npz",
            "sha256": hashlib.sha256(GOLDEN_BYTES).hexdigest(),
            "role": "golden",
        },
    ]
    assert report.statement == _statement()


def test_device_found_by_keyid_when_not_named(device_key, known):
    report = verify_envelope(sign_envelope(device_key, _statement()), known=known)
    assert report.device_name == "pi5"


def test_report_file_copied_elsewhere_still_verifies(tmp_path, device_key, known):
    src = tmp_path / "a" / "run-7.dsse.json"
    src.parent.mkdir()
    src.write_bytes(sign_envelope(device_key, _statement()))
    dst = tmp_path / "b" / "c" / "copy.dsse.json"
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    assert verify_envelope(dst.read_bytes(), known=known, device="pi5").run_id == "run-7"


def test_url_safe_unpadded_base64_is_accepted(device_key, known):
    env = json.loads(sign_envelope(device_key, _statement()))

    def urlsafe(s):
        return s.replace("+", "-").replace("/", "_").rstrip("=")

    env["payload"] = urlsafe(env["payload"])
    env["signatures"][0]["sig"] = urlsafe(env["signatures"][0]["sig"])
    assert verify_envelope(json.dumps(env).encode(), known=known, device="pi5").nonce == "c0ffee"


@pytest.mark.parametrize("device", ["pi5", None])
def test_one_changed_payload_byte_fails_signature(device_key, known, device):
    env = json.loads(sign_envelope(device_key, _statement()))
    payload = bytearray(base64.b64decode(env["payload"]))
    i = payload.index(b"passed")
    payload[i] = ord("P")  # one byte
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(VerificationFailed) as err:
        verify_envelope(json.dumps(env).encode(), known=known, device=device)
    assert not isinstance(err.value, UntrustedDevice)
    assert str(err.value).startswith("signature does not verify with the pinned key of device pi5")


def test_changed_payload_type_fails_before_signature(device_key, known):
    env = json.loads(sign_envelope(device_key, _statement()))
    env["payloadType"] = "application/json"
    with pytest.raises(VerificationFailed, match="^envelope: payloadType is 'application/json'"):
        verify_envelope(json.dumps(env).encode(), known=known, device="pi5")


def test_signature_by_another_key_fails(device_key, known):
    attacker = DeviceKey.generate()
    env = json.loads(sign_envelope(device_key, _statement()))
    forged = _resign(env, base64.b64decode(env["payload"]), attacker)
    with pytest.raises(UntrustedDevice) as err:
        verify_envelope(forged, known=known, device="pi5")
    msg = str(err.value)
    assert msg.startswith("signature does not verify with the pinned key of device pi5")
    assert device_key.fingerprint() in msg
    assert attacker.keyid() in msg


def test_forged_keyid_with_wrong_signature_fails(device_key, known):
    # An attacker copies the device's keyid hint; the pinned key still decides.
    attacker = DeviceKey.generate()
    env = json.loads(sign_envelope(device_key, _statement()))
    forged = json.loads(_resign(env, base64.b64decode(env["payload"]), attacker))
    forged["signatures"][0]["keyid"] = device_key.keyid()
    with pytest.raises(VerificationFailed, match="pinned key of device pi5"):
        verify_envelope(json.dumps(forged).encode(), known=known)


def test_unknown_device_fails(tmp_path, known):
    stranger = DeviceKey.generate()
    env = sign_envelope(stranger, _statement())
    with pytest.raises(UntrustedDevice, match=f"no known device has \\(key id {stranger.keyid()}"):
        verify_envelope(env, known=known)
    with pytest.raises(UntrustedDevice, match="device orin is not in"):
        verify_envelope(env, known=known, device="orin")
    with pytest.raises(UntrustedDevice, match="no known device"):
        verify_envelope(env, known=KnownDevices(tmp_path / "empty"))


def test_device_rekeyed_after_pinning_is_rejected(tmp_path, device_key, known):
    # The device lost its key and made a new one: its reports must not verify.
    state = tmp_path / "agent-state"
    (state / "device_key.pem").unlink()
    new_key = load_or_create_device_key(state)
    assert new_key.public_key_raw() != device_key.public_key_raw()
    with pytest.raises(UntrustedDevice, match="pinned key of device pi5"):
        verify_envelope(sign_envelope(new_key, _statement()), known=known, device="pi5")
    with pytest.raises(UntrustedDevice, match="identity changed"):
        known.trust("pi5", "grpc://127.0.0.1:50051", new_key.public_key_raw())


def test_replayed_nonce_fails(device_key, known):
    env = sign_envelope(device_key, _statement())
    seen = set()
    first = verify_envelope(env, known=known, seen_nonces=seen)
    seen.add(first.nonce)
    with pytest.raises(VerificationFailed, match="^nonce: c0ffee was already used .*replay"):
        verify_envelope(env, known=known, seen_nonces=seen)


def test_wrong_nonce_fails(device_key, known):
    env = sign_envelope(device_key, _statement())
    with pytest.raises(
        VerificationFailed,
        match="^nonce: the report answers nonce c0ffee, but the host issued 1234",
    ):
        verify_envelope(env, known=known, expected_nonce="1234")


def test_wrong_run_id_fails(device_key, known):
    env = sign_envelope(device_key, _statement())
    with pytest.raises(
        VerificationFailed, match="^run_id: the report is for run run-7, expected run-8"
    ):
        verify_envelope(env, known=known, expected_nonce="c0ffee", expected_run_id="run-8")


def test_artifact_digest_mismatch_names_file_and_both_digests(device_key, known, artifacts):
    env = sign_envelope(device_key, _statement())
    swapped = artifacts / "model.onnx"
    swapped.write_bytes(MODEL_BYTES + b"\x00")
    actual = hashlib.sha256(MODEL_BYTES + b"\x00").hexdigest()
    signed = hashlib.sha256(MODEL_BYTES).hexdigest()
    with pytest.raises(VerificationFailed) as err:
        verify_envelope(env, known=known, artifacts=[artifacts / "golden.npz", swapped])
    assert str(err.value) == (
        f"artifact {swapped}: sha256 {actual} does not match subject model.onnx sha256 {signed}"
    )


def test_artifact_with_unrelated_name_lists_subjects(device_key, known, tmp_path):
    other = tmp_path / "firmware.img"
    other.write_bytes(b"fw")
    with pytest.raises(
        VerificationFailed, match=r"^artifact .*firmware.img: sha256 \w+ matches no subject"
    ):
        verify_envelope(sign_envelope(device_key, _statement()), known=known, artifacts=[other])


def test_missing_artifact_is_usage_error(device_key, known, tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        verify_envelope(
            sign_envelope(device_key, _statement()), known=known, artifacts=[tmp_path / "nope"]
        )


def test_checks_run_in_order(device_key, known, artifacts):
    # Bad artifact, wrong nonce and wrong run id at once: the artifact check comes first.
    (artifacts / "model.onnx").write_bytes(b"other")
    env = sign_envelope(device_key, _statement())
    with pytest.raises(VerificationFailed, match="^artifact "):
        verify_envelope(
            env,
            known=known,
            expected_nonce="x",
            expected_run_id="y",
            artifacts=[artifacts / "model.onnx"],
        )
    with pytest.raises(VerificationFailed, match="^nonce: "):
        verify_envelope(env, known=known, expected_nonce="x", expected_run_id="y")


def test_signed_but_invalid_statement_fails_statement_check(device_key, known):
    bad = _statement()
    bad["predicate"] = dict(bad["predicate"], status="great")
    payload = canonical_json(bad)
    env = {"payloadType": PAYLOAD_TYPE}
    with pytest.raises(VerificationFailed, match="^statement: predicate status is 'great'"):
        verify_envelope(_resign(env, payload, device_key), known=known, device="pi5")


def test_signed_payload_with_duplicate_keys_is_refused(device_key, known):
    payload = canonical_json(_statement())[:-1] + b',"_type":"x"}'
    with pytest.raises(VerificationFailed, match="^statement: .*duplicate key '_type'"):
        verify_envelope(_resign({"payloadType": PAYLOAD_TYPE}, payload, device_key), known=known)


@pytest.mark.parametrize(
    "envelope, message",
    [
        (b"not json", "^envelope: not JSON"),
        (b"[]", "^envelope: not a JSON object"),
        (
            b'{"payloadType": "application/vnd.in-toto+json", "payload": "%%%"}',
            "payload is not valid base64",
        ),
        (
            b'{"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}',
            "^envelope: no signatures",
        ),
        (
            b'{"payloadType": "application/vnd.in-toto+json", "payload": "e30=",'
            b' "signatures": [{"sig": 5}]}',
            "sig is not a base64 string",
        ),
    ],
)
def test_malformed_envelopes(known, envelope, message):
    with pytest.raises(VerificationFailed, match=message):
        verify_envelope(envelope, known=known)


def test_file_sha256_streams_large_file(tmp_path):
    data = bytes(range(256)) * 8192 + b"tail"  # 2 MiB + 4 bytes: several chunks
    p = tmp_path / "big"
    p.write_bytes(data)
    assert file_sha256(p) == hashlib.sha256(data).hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_sha256(empty) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
