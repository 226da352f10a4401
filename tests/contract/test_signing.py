"""Tests for canonical JSON, DSSE PAE, statements and envelope signing."""

import base64
import json
import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from edgequal.contract.keys import DeviceKey
from edgequal.contract.signing import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    build_statement,
    canonical_json,
    json_clean,
    pae,
    sign_envelope,
    validate_statement,
)

SHA_A = "a" * 64
SHA_B = "0123456789abcdef" * 4


def _predicate(**over):
    p = {"nonce": "n-1", "run_id": "run-1", "status": "passed", "reason": None}
    p.update(over)
    return p


def test_pae_matches_dsse_spec_test_vector():
    # DSSE protocol.md v1.0.0 test vector.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters():
    # "é" is 2 bytes in UTF-8; the body is 3 bytes.
    assert pae("é", b"\x00 \xff") == b"DSSEv1 2 \xc3\xa9 3 \x00 \xff"
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_canonical_json_is_sorted_compact_utf8():
    assert canonical_json({"b": 1, "a": [1.5, None, "µ"]}) == '{"a":[1.5,null,"µ"],"b":1}'.encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_rejects_non_finite_and_names_the_path(bad):
    with pytest.raises(ValueError, match=r"\$\.results\[1\]"):
        canonical_json({"results": [1.0, bad]})


def test_json_clean_replaces_non_finite_and_tuples():
    cleaned = json_clean({"x": (1.0, math.nan), "y": np.float32(2.5), "z": np.array([1, 2])})
    assert cleaned == {"x": [1.0, None], "y": 2.5, "z": [1, 2]}
    assert canonical_json(cleaned) == b'{"x":[1.0,null],"y":2.5,"z":[1,2]}'


def test_build_statement_shape():
    st = build_statement(
        [{"name": "model.onnx", "sha256": SHA_A}, {"name": "golden.npz", "sha256": SHA_B}],
        _predicate(),
    )
    assert st == {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": "model.onnx", "digest": {"sha256": SHA_A}},
            {"name": "golden.npz", "digest": {"sha256": SHA_B}},
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": _predicate(),
    }


@pytest.mark.parametrize(
    "subjects, predicate, message",
    [
        ([], _predicate(), "non-empty"),
        ([{"name": "m", "sha256": "A" * 64}], _predicate(), "sha256"),
        ([{"name": "m", "sha256": "a" * 63}], _predicate(), "sha256"),
        ([{"name": "", "sha256": SHA_A}], _predicate(), "no name"),
        ([{"name": "m", "sha256": SHA_A}, {"name": "m", "sha256": SHA_B}], _predicate(), "twice"),
        ([{"name": "m", "sha256": SHA_A}], {"run_id": "r", "status": "passed"}, "'nonce'"),
        ([{"name": "m", "sha256": SHA_A}], {"nonce": "n", "status": "passed"}, "'run_id'"),
        ([{"name": "m", "sha256": SHA_A}], {"nonce": "n", "run_id": "r"}, "'status'"),
        ([{"name": "m", "sha256": SHA_A}], _predicate(status="ok"), "status"),
        ([{"name": "m", "sha256": SHA_A}], _predicate(nonce=""), "non-empty string"),
        ([{"name": "m", "sha256": SHA_A}], _predicate(status="incomplete"), "must say why"),
    ],
)
def test_build_statement_rejects(subjects, predicate, message):
    with pytest.raises(ValueError, match=message):
        build_statement(subjects, predicate)


def test_statuses_accepted():
    for status in ("passed", "degraded", "failed", "incomplete"):
        st = build_statement(
            [{"name": "m", "sha256": SHA_A}], _predicate(status=status, reason="why")
        )
        validate_statement(st)


def test_envelope_round_trip_and_determinism():
    key = DeviceKey.generate()
    st = build_statement([{"name": "model.onnx", "sha256": SHA_A}], _predicate(lat_ms=[1.25]))
    env_bytes = sign_envelope(key, st)
    assert sign_envelope(key, st) == env_bytes  # Ed25519 + canonical JSON: same bytes
    env = json.loads(env_bytes)
    assert env_bytes == canonical_json(env)
    assert env["payloadType"] == PAYLOAD_TYPE
    payload = base64.b64decode(env["payload"])
    assert payload == canonical_json(st)
    assert json.loads(payload) == st
    [sig] = env["signatures"]
    assert sig["keyid"] == key.keyid()
    Ed25519PublicKey.from_public_bytes(key.public_key_raw()).verify(
        base64.b64decode(sig["sig"]), pae(PAYLOAD_TYPE, payload)
    )


def test_sign_refuses_nan_in_predicate():
    key = DeviceKey.generate()
    st = build_statement([{"name": "m", "sha256": SHA_A}], _predicate(p99_ms=math.nan))
    with pytest.raises(ValueError, match=r"\$\.predicate\.p99_ms"):
        sign_envelope(key, st)


def test_every_documented_status_can_be_signed_and_no_other():
    from edgequal.contract.signing import STATUSES, build_statement

    assert STATUSES == ("passed", "degraded", "failed", "inconclusive", "incomplete")
    subjects = [{"name": "m.onnx", "sha256": "ab" * 32}]
    for status in STATUSES:
        predicate = {"nonce": "n", "run_id": "r", "status": status, "reason": "why"}
        statement = build_statement(subjects, predicate)
        assert statement["predicate"]["status"] == status
    with pytest.raises(ValueError, match="'unsteady'"):
        build_statement(subjects, {**predicate, "status": "unsteady"})
