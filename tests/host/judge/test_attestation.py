"""``gate --attest``: the decision as an in-toto Test Result statement in DSSE, signed by
the host key ``key show`` prints; checked with securesystemslib's DSSE and parsed by
in-toto-attestation."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from edgequal.contract.artifacts import file_sha256
from edgequal.host.cli.main import main as edgequal_main
from google.protobuf.json_format import ParseDict
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1.statement import Statement
from in_toto_attestation.v1.statement_pb2 import Statement as StatementPb
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey


def _host_key(capsys) -> SSlibKey:
    """The key ``edgequal key show`` prints, as a pipeline would pin it."""
    assert edgequal_main(["key", "show"]) == 0
    out = capsys.readouterr().out
    keyid = out.split("(keyid ")[1].split(")")[0]
    raw = base64.b64decode(out.split("public key (raw, base64): ")[1].split()[0])
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})


def _statement(path, key: SSlibKey) -> tuple[dict, dict]:
    """Verify the envelope with securesystemslib; parse it with in-toto-attestation."""
    envelope = Envelope.from_dict(json.loads(path.read_bytes()))
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert list(envelope.verify([key], 1)) == [key.keyid]
    data = json.loads(envelope.payload)
    statement = Statement.copy_from_pb(ParseDict(data, StatementPb()))
    statement.validate()
    assert statement.pb.predicate_type == "https://in-toto.io/attestation/test-result/v0.1"
    result = ParseDict(data["predicate"], test_result_pb2.TestResult())  # no unknown field
    return data, {"result": result.result, "failed": list(result.failed_tests)}


@pytest.mark.slow  # the session's signed reports: several real runs
def test_gate_attest_writes_a_host_signed_test_result(reports, known, tmp_path, capsys):
    policy = tmp_path / "gate.toml"
    policy.write_text('name = "loose"\n[status]\nallowed = ["passed", "degraded", "failed"]\n')
    strict = tmp_path / "strict.toml"
    strict.write_text('name = "strict"\n[drift]\nmax_flip_count = 0\n')
    key = _host_key(capsys)  # created on first use, the same key after
    from edgequal.host.judge.attestation import host_key_dir

    assert (host_key_dir() / "device_key.pem").stat().st_mode & 0o777 == 0o600
    report_digest = hashlib.sha256(reports.classifier.read_bytes()).hexdigest()
    model_digest = file_sha256(reports.models["classifier"])

    out = tmp_path / "pass.intoto.json"
    argv = ["gate", str(reports.classifier), "--device", "local", "--attest", str(out)]
    assert edgequal_main([*argv[:2], "--policy", str(policy), *argv[2:]]) == 0
    assert "signed gate decision (PASSED)" in capsys.readouterr().err
    data, result = _statement(out, key)
    assert result == {"result": "PASSED", "failed": []}
    assert data["subject"] == [
        {"name": reports.classifier.name, "digest": {"sha256": report_digest}},
        {"name": "classifier.onnx", "digest": {"sha256": model_digest}},
    ]
    assert data["predicate"]["configuration"] == [
        {"name": "gate.toml", "digest": {"sha256": file_sha256(policy)}}
    ]
    assert "verify" in data["predicate"]["passedTests"]

    failed = tmp_path / "fail.intoto.json"
    argv[-1] = str(failed)
    assert edgequal_main([*argv[:2], "--policy", str(strict), *argv[2:]]) == 1
    _, result = _statement(failed, key)
    assert result["result"] == "FAILED" and "drift.max_flip_count" in result["failed"]
    assert _host_key(capsys).keyid == key.keyid  # one host key, made once

    # The library's gate and attest on the envelope's bytes: the same decision, signed.
    import edgequal

    envelope = reports.classifier.read_bytes()
    result = edgequal.gate(envelope, policy=policy, device="local")
    signed = tmp_path / "lib.intoto.json"
    edgequal.attest(result, policy=policy, report=envelope, out=signed)
    lib_data, lib_result = _statement(signed, key)
    assert lib_result == {"result": "PASSED", "failed": []}
    assert [s["digest"] for s in lib_data["subject"]] == [s["digest"] for s in data["subject"]]
    assert lib_data["subject"][0]["name"] == f"{result.run_id}.report.json"
    assert lib_data["predicate"] == data["predicate"]

    # A changed decision no longer verifies with the pinned host key.
    forged = json.loads(failed.read_bytes())
    statement = json.loads(base64.b64decode(forged["payload"]))
    statement["predicate"]["result"] = "PASSED"
    forged["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    from securesystemslib.exceptions import VerificationError

    with pytest.raises(VerificationError):
        Envelope.from_dict(forged).verify([key], 1)


@pytest.mark.slow
def test_no_decision_is_signed_for_a_report_that_does_not_verify(reports, known, tmp_path, capsys):
    tampered = tmp_path / "tampered.json"
    envelope = json.loads(reports.classifier.read_bytes())
    envelope["payload"] = base64.b64encode(b'{"changed": true}').decode()
    tampered.write_text(json.dumps(envelope))
    policy = tmp_path / "gate.toml"
    policy.write_text('name = "any"\n')
    out = tmp_path / "decision.json"
    assert (
        edgequal_main(["gate", str(tampered), "--policy", str(policy), "--attest", str(out)]) == 1
    )
    assert "the report did not verify" in capsys.readouterr().err
    assert not out.exists()
