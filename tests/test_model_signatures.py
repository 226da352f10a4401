"""Model signatures (OpenSSF Model Signing) verified on the device before the model is
loaded: a real local agent whose agent.toml trusts a producer's EC key, real signatures
made with the model-signing package, the report's verdict and the gate's requirement."""

from __future__ import annotations

import base64
import json

import pytest
from edgequal.agent.model_signature import SigningPolicy
from edgequal.contract.errors import BadInput

pytest.importorskip("model_signing", reason="the agent's signing extra")

PLAN = {"cold_runs": 1, "warmup_min_s": 0.1, "latency_min_s": 0.1, "sustain_s": 0.0}


def _key_pair(directory, name):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = directory / f"{name}.pem", directory / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def _sign(model, private, out):
    from model_signing import signing

    signing.Config().use_elliptic_key_signer(private_key=private).sign(model, out)
    bundle = json.loads(out.read_bytes())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    return statement["subject"][0]["digest"]["sha256"]


def _signature_subjects(report) -> list[dict]:
    return [s for s in report.subjects if s.get("role") == "model_signature"]


@pytest.mark.slow  # a real local agent, several short runs, the verifier's slow import
def test_the_device_verifies_the_model_signature_before_loading(chain_model, tmp_path):
    import edgequal
    from edgequal.contract.artifacts import file_sha256
    from edgequal.contract.state_dirs import local_agent_state_dir

    producer, producer_pub = _key_pair(tmp_path, "producer")
    stranger, _ = _key_pair(tmp_path, "stranger")
    model = chain_model(tmp_path / "chain.onnx", 2)
    signature = tmp_path / "chain.sig"
    manifest = _sign(model, producer, signature)
    state = local_agent_state_dir()
    state.mkdir(parents=True, exist_ok=True)
    (state / "keys").mkdir()
    (state / "keys" / "producer.pub").write_bytes(producer_pub.read_bytes())
    config = state / "agent.toml"
    config.write_text('[model_signing]\ntrusted_keys = ["keys/producer.pub"]\n')

    with edgequal.connect("local") as dev:
        signed = dev.qualify(model, model_signature=signature, **PLAN)
        sig = signed.predicate["results"]["model_signature"]
        assert sig["status"] == "verified" and sig["key"] == "producer.pub"
        assert sig["manifest_sha256"] == manifest
        assert sig["signature_sha256"] == file_sha256(signature)
        assert _signature_subjects(signed) == [
            {
                "name": "signature/chain.onnx.sig",
                "sha256": file_sha256(signature),
                "role": "model_signature",
            }
        ]
        assert signed.predicate["plan"]["model_signature_sha256"] == file_sha256(signature)
        assert signed.status != "failed"

        # The same signature over a model changed after signing: failed, nothing loaded.
        tampered = tmp_path / "tampered" / "chain.onnx"
        tampered.parent.mkdir()
        tampered.write_bytes(chain_model(tmp_path / "other.onnx", 3).read_bytes())
        bad = dev.qualify(tampered, model_signature=signature, **PLAN)
        assert bad.status == "failed"
        assert bad.predicate["results"]["model_signature"]["status"] == "failed"
        [finding] = bad.predicate["findings"]
        assert finding["kind"] == "model_signature" and finding["phase"] == "preflight"
        assert "does not match its signature" in finding["message"]
        assert "cold_load" not in bad.predicate["results"]  # nothing was loaded

        # Signed by a key the device does not trust.
        foreign = tmp_path / "foreign.sig"
        _sign(model, stranger, foreign)
        untrusted = dev.qualify(model, model_signature=foreign, **PLAN)
        assert untrusted.status == "failed"
        assert "not signed by a trusted key" in untrusted.predicate["reason"]

        # Unsigned: said so; refused once the owner requires signatures.
        plain = dev.qualify(model, **PLAN)
        assert plain.predicate["results"]["model_signature"] == {"status": "unsigned"}
        assert not _signature_subjects(plain)
        config.write_text('[model_signing]\ntrusted_keys = ["keys/producer.pub"]\nrequire = true\n')
        required = dev.qualify(model, **PLAN)
        assert required.status == "failed"
        assert "requires a model signature" in required.predicate["reason"]

    # The gate can require it, and the summary line says it.
    policy = tmp_path / "signed.toml"
    policy.write_text(
        'require_model_signature = true\n[status]\nallowed = ["passed", "degraded", "inconclusive"]\n'
    )
    assert edgequal.gate(signed.path, policy=policy, device="local").passed
    result = edgequal.gate(plain.path, policy=policy, device="local")
    failed = {c.name: c for c in result.failed_checks}
    assert failed["require_model_signature"].measured == "unsigned"
    assert set(failed) == {"require_model_signature"}, (
        plain.status,
        plain.predicate.get("reason"),
        plain.predicate.get("findings"),
        [vars(c) for c in failed.values()],
    )
    from edgequal.host.present.signature import signature_text

    assert signature_text(signed.predicate["results"]) == (
        f"model signature: verified by producer.pub (OMS manifest sha256:{manifest[:16]}…)"
    )


def test_agent_toml_refuses_what_it_would_otherwise_ignore(tmp_path):
    from edgequal.agent.config import AgentSettings

    path = tmp_path / "agent.toml"
    with pytest.raises(
        BadInput, match=r"unknown table \[model_signin\] \(did you mean \[model_signing\]\?\)"
    ):
        AgentSettings.from_config({"model_signin": {"require": True}}, path)
    with pytest.raises(BadInput, match=r"\[model_signing\] unknown key requires"):
        SigningPolicy.from_config({"model_signing": {"requires": True}}, path)
    with pytest.raises(BadInput, match="require must be true or false"):
        SigningPolicy.from_config({"model_signing": {"require": "yes"}}, path)
    with pytest.raises(BadInput, match="need sigstore_trust_config"):
        SigningPolicy.from_config(
            {"model_signing": {"sigstore_identities": [{"identity": "a", "issuer": "b"}]}}, path
        )
    with pytest.raises(BadInput, match="certificate_identities need trusted_certificates"):
        SigningPolicy.from_config(
            {"model_signing": {"certificate_identities": [{"identity": "a", "issuer": "b"}]}}, path
        )
    with pytest.raises(BadInput, match=r"certificate_identities must be a list of \{identity"):
        SigningPolicy.from_config(
            {
                "model_signing": {
                    "trusted_certificates": ["ca.pem"],
                    "certificate_identities": ["a"],
                }
            },
            path,
        )
    policy = SigningPolicy.from_config(
        {"model_signing": {"trusted_keys": ["keys/a.pub"], "require": True}}, path
    )
    assert policy.trusted_keys == (tmp_path / "keys" / "a.pub",) and policy.require
    AgentSettings.from_config({"store": {}, "worker": {}, "coload": {}, "model_signing": {}}, path)


def _approve_signed_run(chain_model, tmp_path):
    """A signed model qualified on a local agent that trusts its producer; its report path."""
    import edgequal
    from edgequal.contract.state_dirs import local_agent_state_dir

    producer, producer_pub = _key_pair(tmp_path, "producer")
    model = chain_model(tmp_path / "chain.onnx", 2)
    signature = tmp_path / "chain.sig"
    _sign(model, producer, signature)
    state = local_agent_state_dir()
    state.mkdir(parents=True, exist_ok=True)
    (state / "producer.pub").write_bytes(producer_pub.read_bytes())
    (state / "agent.toml").write_text('[model_signing]\ntrusted_keys = ["producer.pub"]\n')
    policy = tmp_path / "committed.toml"
    policy.write_text('name = "committed"\n')
    with edgequal.connect("local") as dev:
        report = dev.qualify(model, model_signature=signature, policy=policy, **PLAN)
    return model, signature, policy, report


@pytest.mark.slow  # a real local agent
def test_an_approved_set_keeps_the_signature_and_refuses_a_changed_model(chain_model, tmp_path):
    from edgequal.contract.artifacts import file_sha256
    from edgequal.host.errors import UsageError
    from edgequal.host.lab.requalify import approve, load_approved

    model, signature, policy, report = _approve_signed_run(chain_model, tmp_path)
    approved = tmp_path / "approved"
    with pytest.raises(UsageError, match="measured with a model signature"):
        approve(report.path, model, None, approved)
    name, device = approve(report.path, model, None, approved, model_signature=signature)
    entry = load_approved(approved)[name]
    assert entry.signature == f"{name}/chain.sig"
    assert entry.signature_sha256 == file_sha256(signature)
    assert (
        entry.oms_manifest_sha256
        == report.predicate["results"]["model_signature"]["manifest_sha256"]
    )
    kept = entry.devices[device]
    assert kept.committed_policy_sha256 == file_sha256(policy)
    assert kept.model_signature["status"] == "verified"
    entry.check_files(approved)  # as approved: nothing to refuse

    # A model swapped in the approved set is refused before any device is contacted.
    (approved / entry.model).write_bytes(chain_model(tmp_path / "swap.onnx", 3).read_bytes())
    with pytest.raises(UsageError, match="changed since it was approved"):
        entry.check_files(approved)


def _external_data_model(directory):
    """y = x @ W with W in weights.bin beside the model (real ONNX external data)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import convert_model_to_external_data

    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        initializer=[numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0
    )
    directory.mkdir(parents=True)
    onnx.save_model(model, str(directory / "net.onnx"))
    return directory / "net.onnx"


@pytest.mark.slow  # a real local agent
def test_a_model_with_external_data_is_verified_as_its_manifest_lists_it(tmp_path):
    import edgequal
    from edgequal.contract.state_dirs import local_agent_state_dir

    producer, producer_pub = _key_pair(tmp_path, "producer")
    model = _external_data_model(tmp_path / "net")
    signature = tmp_path / "net.sig"
    _sign(model.parent, producer, signature)  # the model's directory: model and weights
    state = local_agent_state_dir()
    state.mkdir(parents=True, exist_ok=True)
    (state / "producer.pub").write_bytes(producer_pub.read_bytes())
    (state / "agent.toml").write_text('[model_signing]\ntrusted_keys = ["producer.pub"]\n')
    with edgequal.connect("local") as dev:
        good = dev.qualify(model, model_signature=signature, **PLAN)
        assert good.predicate["results"]["model_signature"]["status"] == "verified"
        assert {s["role"] for s in good.subjects} == {"model", "external_data", "model_signature"}
        weights = model.parent / "weights.bin"
        data = bytearray(weights.read_bytes())
        data[0] ^= 0x01  # one bit of one weight
        weights.write_bytes(bytes(data))
        bad = dev.qualify(model, model_signature=signature, **PLAN)
    assert bad.status == "failed"
    assert "does not match its signature" in bad.predicate["reason"]
    assert "weights.bin" in bad.predicate["reason"]


@pytest.mark.slow  # the verifier's child process and its slow import, twice
def test_golden_make_verifies_the_signature_before_running_the_model(chain_model, tmp_path, capsys):
    """golden make runs the model on the host: the signature is verified here first, by the
    agent's verifier, and the golden set records it beside the model's digest."""
    import numpy as np
    from edgequal.cli.main import main
    from edgequal.contract.artifacts import file_sha256
    from edgequal.contract.golden import read_golden

    producer, producer_pub = _key_pair(tmp_path, "producer")
    _, stranger_pub = _key_pair(tmp_path, "stranger")
    model = chain_model(tmp_path / "chain.onnx", 2)
    signature = tmp_path / "chain.sig"
    manifest = _sign(model, producer, signature)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 256), np.float32))
    golden = tmp_path / "g.npz"
    base = ["golden", "make", str(inputs.with_suffix("")), "--inputs", str(inputs)]
    base[2] = str(model)
    assert main([*base, "-o", str(golden), "--model-signature", str(signature),
                 "--trusted-key", str(producer_pub)]) == 0  # fmt: skip
    assert "model signature verified by producer.pub" in capsys.readouterr().out
    recorded = read_golden(golden).manifest["model"]
    assert recorded["sha256"] == file_sha256(model)
    assert recorded["signature"] == {
        "sha256": file_sha256(signature),
        "oms_manifest_sha256": manifest,
        "key": "producer.pub",
    }

    # A model changed after signing: one line, exit 1, no golden set.
    tampered = tmp_path / "tampered" / "chain.onnx"
    tampered.parent.mkdir()
    tampered.write_bytes(chain_model(tmp_path / "other.onnx", 3).read_bytes())
    base[2] = str(tampered)
    out = tmp_path / "bad.npz"
    code = main([*base, "-o", str(out), "--model-signature", str(signature),
                 "--trusted-key", str(producer_pub)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not out.exists()
    assert (
        len(err) == 1
        and "model signature chain.sig: the model does not match its signature: " in err[0]
    )
    assert "producer.pub: Signature mismatch: the file changed since signing" in err[0]
    # Signed, but by a key not given: the same refusal, naming the key it tried.
    base[2] = str(model)
    code = main([*base, "-o", str(out), "--model-signature", str(signature),
                 "--trusted-key", str(stranger_pub)])  # fmt: skip
    assert code == 1 and not out.exists()
    assert "not signed by a trusted key: stranger.pub" in capsys.readouterr().err
    # A signature without a key to check it by is bad usage.
    assert main([*base, "-o", str(out), "--model-signature", str(signature)]) == 2
    assert "--trusted-key" in capsys.readouterr().err


def _certificate_authority(directory, name):
    """A CA (EC P-256) as a lab or a Fulcio instance keeps one: its key and PEM certificate."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=10))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def _signing_certificate(directory, ca, email, issuer):
    """A short-lived code-signing certificate as Fulcio issues one: SAN email, the OIDC
    issuer in extension 1.3.6.1.4.1.57264.1.8 (a DER UTF8String); its key and PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key, ca_cert, _ = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    encoded = issuer.encode()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(minutes=10))
        .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .add_extension(
            x509.UnrecognizedExtension(
                x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"),
                b"\x0c" + bytes([len(encoded)]) + encoded,
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    stem = directory / email.split("@")[0]
    private = stem.with_suffix(".key")
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = stem.with_suffix(".crt")
    public.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return private, public


def _sign_with_certificate(model, private, certificate, chain, out):
    from model_signing import signing

    signing.Config().use_certificate_signer(
        private_key=private, signing_certificate=certificate, certificate_chain=chain
    ).sign(model, out)


ISSUER = "https://accounts.example.com"


@pytest.mark.slow  # a real local agent, three short runs, the verifier's slow import
def test_the_device_verifies_a_certificate_signature_offline_by_identity(chain_model, tmp_path):
    """The second form: a signing certificate (Fulcio-style: SAN email, OIDC issuer extension)
    chaining to a CA the device trusts, and naming an identity it trusts; no network."""
    import edgequal
    from edgequal.contract.state_dirs import local_agent_state_dir

    ca = _certificate_authority(tmp_path, "lab-ca")
    other_ca = _certificate_authority(tmp_path, "other-ca")
    model = chain_model(tmp_path / "chain.onnx", 2)
    release, release_crt = _signing_certificate(tmp_path, ca, "releases@example.com", ISSUER)
    signed = tmp_path / "releases.sig"
    _sign_with_certificate(model, release, release_crt, [ca[2]], signed)
    intern, intern_crt = _signing_certificate(tmp_path, ca, "intern@example.com", ISSUER)
    by_intern = tmp_path / "intern.sig"
    _sign_with_certificate(model, intern, intern_crt, [ca[2]], by_intern)
    (tmp_path / "rogue").mkdir()
    rogue, rogue_crt = _signing_certificate(
        tmp_path / "rogue", other_ca, "releases@example.com", ISSUER
    )
    by_rogue_ca = tmp_path / "rogue.sig"
    _sign_with_certificate(model, rogue, rogue_crt, [other_ca[2]], by_rogue_ca)

    state = local_agent_state_dir()
    state.mkdir(parents=True, exist_ok=True)
    (state / "lab-ca.pem").write_bytes(ca[2].read_bytes())
    (state / "agent.toml").write_text(
        '[model_signing]\ntrusted_certificates = ["lab-ca.pem"]\n'
        f'certificate_identities = [{{identity = "releases@example.com", issuer = "{ISSUER}"}}]\n'
    )
    with edgequal.connect("local") as dev:
        good = dev.qualify(model, model_signature=signed, **PLAN)
        sig = good.predicate["results"]["model_signature"]
        assert sig["status"] == "verified" and sig["form"] == "certificate"
        assert sig["key"] == "releases@example.com" and sig["issuer"] == ISSUER
        assert good.status != "failed"
        # Same CA, another identity: refused by name.
        other = dev.qualify(model, model_signature=by_intern, **PLAN)
        assert other.status == "failed"
        assert (
            f"a certificate of lab-ca.pem for intern@example.com ({ISSUER}): "
            "not an identity this device trusts"
        ) in other.predicate["reason"]
        # The trusted identity, but certified by a CA the device does not trust.
        rogue_run = dev.qualify(model, model_signature=by_rogue_ca, **PLAN)
        assert rogue_run.status == "failed"
        assert "certificates of lab-ca.pem: " in rogue_run.predicate["reason"]
        assert "cold_load" not in rogue_run.predicate["results"]


def _trust_config(path, ca):
    """A sigstore ClientTrustConfig (``trusted_root`` and signing config) naming ``ca`` as its
    certificate authority and one key as both transparency log and CT log."""
    import hashlib

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    since = {"start": "2020-01-01T00:00:00Z"}
    der = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    log = {
        "baseUrl": "https://log.lab.example",
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": b64(der),
            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": since,
        },
        "logId": {"keyId": b64(hashlib.sha256(der).digest())},
    }
    ca_der = ca[1].public_bytes(serialization.Encoding.DER)
    url = {"majorApiVersion": 1, "operator": "lab", "validFor": since}
    path.write_text(
        json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
                "trustedRoot": {
                    "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
                    "tlogs": [log],
                    "ctlogs": [log],
                    "certificateAuthorities": [
                        {
                            "subject": {"organization": "lab", "commonName": "lab-ca"},
                            "uri": "https://ca.lab.example",
                            "certChain": {"certificates": [{"rawBytes": b64(ca_der)}]},
                            "validFor": since,
                        }
                    ],
                    "timestampAuthorities": [],
                },
                "signingConfig": {
                    "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                    "caUrls": [{"url": "https://ca.lab.example", **url}],
                    "oidcUrls": [],
                    "rekorTlogUrls": [{"url": "https://log.lab.example", **url}],
                    "tsaUrls": [],
                    "rekorTlogConfig": {"selector": "ANY"},
                    "tsaConfig": {"selector": "ANY"},
                },
            }
        )
    )
    return path


@pytest.mark.slow  # the verifier's child process and its slow import
def test_the_sigstore_form_needs_what_only_a_sigstore_instance_makes(chain_model, tmp_path):
    """sigstore_identities against a trust config naming the same CA: the certificate-signed
    bundle the certificate form accepts is refused, because a sigstore bundle carries its
    one signing certificate, a transparency-log entry and an SCT that no offline signer
    makes (docs/security.md "The forms a device trusts")."""
    from edgequal.agent.model_signature import SigningPolicy, verify

    ca = _certificate_authority(tmp_path, "lab-ca")
    key, crt = _signing_certificate(tmp_path, ca, "releases@example.com", ISSUER)
    model = chain_model(tmp_path / "chain.onnx", 2)
    signature = tmp_path / "chain.sig"
    _sign_with_certificate(model, key, crt, [ca[2]], signature)
    sigstore = SigningPolicy(
        sigstore_trust_config=_trust_config(tmp_path / "trust_config.json", ca),
        sigstore_identities=(("releases@example.com", ISSUER),),
    )
    refused = verify(model, signature, sigstore)
    assert refused["status"] == "failed"
    assert "releases@example.com: expected certificate in bundle" in refused["reason"]
    certificate = SigningPolicy(trusted_certificates=(ca[2],))
    assert verify(model, signature, certificate)["status"] == "verified"


def _ed25519_pub(directory):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    public = directory / "ed.pub"
    public.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return public


@pytest.fixture
def signed_chain(chain_model, tmp_path):
    """``(golden make argv without -o, model, signature, producer.pub)``: a model signed by
    a producer's P-256 key, and inputs for it."""
    import numpy as np

    producer, producer_pub = _key_pair(tmp_path, "producer")
    model = chain_model(tmp_path / "chain.onnx", 2)
    signature = tmp_path / "chain.sig"
    _sign(model, producer, signature)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 256), np.float32))
    argv = ["golden", "make", str(model), "--inputs", str(inputs), "-o", str(tmp_path / "g.npz")]
    return argv, model, signature, producer_pub


@pytest.mark.parametrize(
    ("content", "says", "leaked"),
    [
        (b"\xff\xfe{}", "is not UTF-8 JSON (byte 0 is 0xff)", "codec can't decode"),
        (b"{oops", "is not JSON: an OMS signature is the JSON Sigstore bundle", "Expecting"),
        (
            b'{"mediaType": "x"}',
            "is JSON, but not an OMS signature (a Sigstore bundle): it has no "
            "verificationMaterial or dsseEnvelope",
            "'verificationMaterial'",
        ),
    ],
)
def test_a_file_that_is_no_signature_is_said_so_in_one_line(
    signed_chain, tmp_path, capsys, content, says, leaked
):
    """Found by hand: these leaked the library's internals ("'utf-8' codec can't decode
    byte 0xff", "'verificationMaterial'"); now one line in the user's words, exit 2, both at
    golden make and in the agent's verdict."""
    from edgequal.agent.model_signature import SigningPolicy, verify
    from edgequal.cli.main import main

    argv, model, _, producer_pub = signed_chain
    bad = tmp_path / "bad.sig"
    bad.write_bytes(content)
    code = main([*argv, "--model-signature", str(bad), "--trusted-key", str(producer_pub)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"model signature bad.sig {says}" in err and leaked not in err
    result = verify(model, bad, SigningPolicy(trusted_keys=(producer_pub,)))
    assert result["status"] == "failed" and says.removeprefix("is ") in result["reason"]
    assert leaked not in result["reason"]


def test_a_signature_larger_than_the_bound_is_refused_unread(signed_chain, tmp_path, capsys):
    """A 300 MiB "signature" was read whole (6 s): now refused by its size, one line, exit 2,
    at golden make, at qualify (before anything is sent) and by the agent's verifier."""
    import os

    from edgequal.agent.model_signature import SigningPolicy, verify
    from edgequal.cli.main import main
    from edgequal.contract.model_signature_file import MAX_SIGNATURE_BYTES

    argv, model, _, producer_pub = signed_chain
    huge = tmp_path / "huge.sig"
    with open(huge, "wb") as f:
        os.truncate(f.fileno(), 300 * 2**20)  # sparse: no disk, and never read
    assert MAX_SIGNATURE_BYTES == 4 * 2**20
    says = "is 300 MiB, more than the 4 MiB a model signature may hold"
    code = main([*argv, "--model-signature", str(huge), "--trusted-key", str(producer_pub)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"model signature huge.sig {says}" in err
    code = main(["qualify", str(model), "--model-signature", str(huge), "--device", "local"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    result = verify(model, huge, SigningPolicy(trusted_keys=(producer_pub,)))
    assert result == {
        "status": "failed",
        "reason": f"the model signature {says} (an OMS bundle is a few KiB): not a model signature",
    }


def test_a_key_of_a_type_the_format_does_not_allow_is_said_so(signed_chain, tmp_path, capsys):
    """An Ed25519 key leaked "'…Ed25519PublicKey' object has no attribute 'curve'"; now
    the key type OMS does not allow, and which it does."""
    from edgequal.agent.model_signature import key_problem
    from edgequal.cli.main import main

    argv, _, signature, producer_pub = signed_chain
    ed = _ed25519_pub(tmp_path)
    code = main([*argv, "--model-signature", str(signature), "--trusted-key", str(ed)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert (
        "trusted key ed.pub is an Ed25519 key, a key type OMS's public-key form does not "
        "allow: it takes elliptic-curve keys (P-256, P-384, P-521)"
    ) in err
    assert "has no attribute" not in err
    assert key_problem(producer_pub) is None
    (tmp_path / "text.pub").write_text("not a key")
    assert key_problem(tmp_path / "text.pub") == "not a PEM public key (-----BEGIN PUBLIC KEY-----)"


@pytest.mark.slow  # the verifier's own work in this process: model-signing's slow import
def test_the_device_verifier_names_a_key_type_it_cannot_use(signed_chain, tmp_path, capsys):
    """The agent's verifier, given an Ed25519 key among its trusted keys, says what is wrong
    with that key and still verifies with the one that signed."""
    import json

    from edgequal.agent.model_signature import main as verifier

    _, model, signature, producer_pub = signed_chain
    ed = _ed25519_pub(tmp_path)
    assert verifier([str(model), str(signature), f"--key={ed}"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "failed"
    assert result["reason"] == (
        "not signed by a trusted key: ed.pub: an Ed25519 key, a key type OMS's public-key "
        "form does not allow: it takes elliptic-curve keys (P-256, P-384, P-521)"
    )
    assert verifier([str(model), str(signature), f"--key={ed}", f"--key={producer_pub}"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "verified" and result["key"] == "producer.pub"
