"""``gate --attest``: the decision as an in-toto Test Result statement in DSSE, signed by
the host key ``key show`` prints; checked with securesystemslib's DSSE and parsed by
in-toto-attestation."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.artifacts import file_sha256
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
    assert data["predicate"]["configuration"][0] == {
        "name": "gate.toml",
        "digest": {"sha256": file_sha256(policy)},
        "annotations": {"commitment": "chosen after the run"},
    }
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


@pytest.mark.slow  # a real run on a local agent
def test_a_policy_committed_before_the_run_is_signed_in_the_plan_and_claimed(
    reports, short_plan, tmp_path, capsys
):
    # No `known` fixture: qualify starts its own local agent (its own key) and pins it.
    policy = tmp_path / "gate.toml"
    policy.write_text(
        'name = "committed"\nrequire_committed = true\n'
        '[status]\nallowed = ["passed", "degraded", "failed", "inconclusive"]\n'
        "[cold_load]\nmax_total_ms = 1e6\n"
    )
    report = tmp_path / "r.json"
    argv = ["qualify", str(reports.models["chain"]), "--threads", "1", *short_plan]
    assert edgequal_main([*argv, "--sustain", "0", "--policy", str(policy), "-o", str(report)]) in (
        0,
        1,  # inconclusive on a busy machine: still a signed report
    )
    envelope = json.loads(report.read_bytes())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["plan"]["policy_sha256"] == file_sha256(policy)
    assert predicate["plan"]["sources"]["policy_sha256"] == "flag"
    capsys.readouterr()

    key = _host_key(capsys)
    out = tmp_path / "committed.intoto.json"
    gate = ["gate", str(report), "--policy", str(policy), "--attest", str(out)]
    assert edgequal_main(gate) == 0
    assert "policy committed before the run" in capsys.readouterr().out
    data, result = _statement(out, key)
    assert result == {"result": "PASSED", "failed": []}
    policy_ref, claims_ref = data["predicate"]["configuration"]
    assert policy_ref["digest"] == {"sha256": file_sha256(policy)}
    assert policy_ref["annotations"] == {"commitment": "committed before the run"}
    claims = {c["metric"]: c for c in claims_ref["annotations"]["claims"]}
    assert claims["cold_load.max_total_ms"] == {
        "metric": "cold_load.max_total_ms",
        "comparator": "<=",
        "threshold": 1e6,
        "measured": claims["cold_load.max_total_ms"]["measured"],
        "sampleSize": len(predicate["results"]["cold_load"]["runs"]),
        "passed": True,
        "judged": True,
    }
    assert claims["cold_load.max_total_ms"]["measured"].endswith(" ms")
    assert claims["plan.require_committed"]["passed"] is True
    canonical = json.dumps(
        claims_ref["annotations"]["claims"], sort_keys=True, separators=(",", ":")
    ).encode()
    assert claims_ref["digest"] == {"sha256": hashlib.sha256(canonical).hexdigest()}

    # The same limits loosened after the run: another policy, chosen after the run.
    later = tmp_path / "later.toml"
    later.write_text(policy.read_text().replace("1e6", "2e6"))
    assert edgequal_main(["gate", str(report), "--policy", str(later), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["policy_commitment"].startswith("chosen after the run (the run committed to")
    [failed] = [c for c in verdict["checks"] if not c["passed"]]
    assert failed["name"] == "require_committed" and "chosen after the run" in failed["message"]


@pytest.mark.slow  # the session's signed reports
def test_a_report_without_a_committed_policy_says_it_was_chosen_after(
    reports, known, tmp_path, capsys
):
    policy = tmp_path / "gate.toml"
    policy.write_text('name = "after"\n[status]\nallowed = ["passed", "degraded", "failed"]\n')
    key = _host_key(capsys)
    out = tmp_path / "after.intoto.json"
    argv = ["gate", str(reports.chain_a), "--policy", str(policy), "--device", "local"]
    assert edgequal_main([*argv, "--attest", str(out)]) == 0
    data, _ = _statement(out, key)
    policy_ref, claims_ref = data["predicate"]["configuration"]
    assert policy_ref["annotations"] == {"commitment": "chosen after the run"}
    [status] = [c for c in claims_ref["annotations"]["claims"] if c["metric"] == "status"]
    assert status["threshold"] == ["passed", "degraded", "failed"] and status["passed"] is True


def test_a_plan_carries_only_a_well_formed_policy_digest():
    from edgequal.contract.errors import BadInput
    from edgequal.contract.plan import Plan, make_plan

    digest = hashlib.sha256(b"policy").hexdigest()
    plan = make_plan("quick", None, policy_sha256=digest)
    assert Plan.from_json(plan.to_json()).policy_sha256 == digest
    assert make_plan("quick").policy_sha256 is None
    for bad in ("ABC", digest.upper(), 7, digest[:-1] + "g"):
        with pytest.raises(BadInput, match="policy_sha256"):
            Plan.from_json({**plan.to_json(), "policy_sha256": bad})
