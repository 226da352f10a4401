"""The device proves it holds its key before a host sends a token, model or golden set."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys

import grpc
import pytest
from edgequal.agent.service.server import build_server
from edgequal.contract.errors import BadInput
from edgequal.contract.identity import (
    IDENTITY_PROOF_TYPE,
    check_challenge,
    proof_message,
    prove_identity,
    verify_identity_proof,
)
from edgequal.contract.keys import DeviceKey, load_or_create_device_key
from edgequal.contract.signing import PAYLOAD_TYPE, pae
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

TOKEN = "prove-token-" + "c" * 24


@pytest.fixture
def agent(tmp_path):
    a = build_server(
        "127.0.0.1:0", tmp_path / "state", tmp_path, token=TOKEN, key=DeviceKey.generate()
    ).start()
    yield a
    a.stop(0)


def test_a_proof_verifies_only_for_its_key_and_challenge():
    key, other = DeviceKey.generate(), DeviceKey.generate()
    challenge = secrets.token_bytes(32)
    signature = prove_identity(key, challenge)
    assert verify_identity_proof(key.public_key_raw(), challenge, signature)
    assert not verify_identity_proof(other.public_key_raw(), challenge, signature)  # re-keyed
    assert not verify_identity_proof(key.public_key_raw(), secrets.token_bytes(32), signature)
    tampered = signature[:-1] + bytes([signature[-1] ^ 1])  # one bit of the last byte
    assert not verify_identity_proof(key.public_key_raw(), challenge, tampered)


def test_a_proof_is_never_a_report_signature_nor_the_reverse():
    key = DeviceKey.generate()
    challenge = b'{"_type": "https://in-toto.io/Statement/v1"}'
    assert proof_message(challenge) == pae(IDENTITY_PROOF_TYPE, challenge)
    assert proof_message(challenge) != pae(PAYLOAD_TYPE, challenge)
    report_signature = key.sign(pae(PAYLOAD_TYPE, challenge))
    assert not verify_identity_proof(key.public_key_raw(), challenge, report_signature)


@pytest.mark.parametrize("size", [0, 15, 1025])
def test_challenge_size_is_bounded(size):
    with pytest.raises(BadInput, match=f"16 to 1024 bytes, not {size}"):
        check_challenge(b"x" * size)


def test_prove_over_grpc_needs_no_token_and_nothing_else_is_opened(agent):
    challenge = secrets.token_bytes(32)
    with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
        stub = pb_grpc.AgentStub(channel)
        r = stub.Prove(pb.ProveRequest(challenge=challenge), timeout=5)
        key = agent.service.key
        assert r.public_key_raw == key.public_key_raw()
        assert r.key_fingerprint == key.fingerprint()
        assert verify_identity_proof(r.public_key_raw, challenge, r.signature)
        with pytest.raises(grpc.RpcError) as e:
            stub.Prove(pb.ProveRequest(challenge=b"short"), timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "16 to 1024 bytes, not 5" in e.value.details()
        # Without the token every other RPC is still refused.
        with pytest.raises(grpc.RpcError) as e:
            stub.Info(pb.InfoRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        auth = (("authorization", f"Bearer {TOKEN}"),)
        assert stub.Info(pb.InfoRequest(), metadata=auth, timeout=5).protocol == "edgequal.v1"


def test_key_prove_on_the_command_line(tmp_path):
    state = tmp_path / "state"
    challenge = secrets.token_bytes(32)
    cmd = [sys.executable, "-m", "edgequal.agent.cli", "--state-dir", str(state), "key", "prove"]
    proc = subprocess.run(
        [*cmd, "--challenge", challenge.hex()], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    key = load_or_create_device_key(state)
    assert out["fingerprint"] == key.fingerprint()
    assert verify_identity_proof(
        base64.b64decode(out["public_key_b64"]), challenge, base64.b64decode(out["signature_b64"])
    )
    bad = subprocess.run([*cmd, "--challenge", "zz"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "edgequal-agent: error: key prove: --challenge must be hex"
