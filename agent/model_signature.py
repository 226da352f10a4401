"""Model signatures (OpenSSF Model Signing, OMS v1.0) verified on the device before the
model is loaded.

The device owner says which keys it trusts in ``agent.toml``::

    [model_signing]
    trusted_keys = ["keys/producer.pub"]   # PEM public keys (EC P-256/P-384); relative
                                           # paths are from agent.toml's directory
    require = true                          # refuse a model that comes without a signature
    # certificates (the second form, verified offline): a signing certificate that chains
    # to one of these CA certificates, naming one of these identities (SAN email or URI,
    # and the OIDC issuer in the Fulcio extension 1.3.6.1.4.1.57264.1.8 or .1.1)
    trusted_certificates = ["keys/lab-ca.pem"]
    certificate_identities = [{identity = "releases@example.com", issuer = "https://accounts.example.com"}]
    # sigstore bundles with their Rekor entry and SCT, verified against a trust config
    # (trusted_root) naming Fulcio, Rekor and the CT log (the third form):
    sigstore_trust_config = "keys/trust_config.json"
    sigstore_identities = [{identity = "releases@example.com", issuer = "https://accounts.example.com"}]

A host sends the signature file with the model (``qualify --model-signature``); it is an
artifact by digest like the model, named in the signed plan (``model_signature_sha256``)
and in the report's subjects (role ``model_signature``). The agent verifies it in a child
process (``python -m edgequal.agent.model_signature``: the ``model-signing`` package is an
optional extra, ``signing``, and its import costs seconds and memory the agent keeps out
of its own process) against the model as laid out for the run: the file, or its bundle
directory when the model has external-data files (verified as the OMS manifest lists
them). A tampered file, an untrusted key, or no signature where one is required makes a
signed ``failed`` report; nothing is loaded.

``results.model_signature`` then says ``verified`` (with the key's file name and the OMS
manifest digest: the signature statement's ``subject[0].digest.sha256``), ``unsigned``,
or ``failed`` with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgequal.contract.errors import BadInput
from edgequal.contract.model_signature_file import signature_problem

VERIFY_TIMEOUT_S = 120.0
"""Longest one verification may take (it hashes the model once; the import is slow)."""

_KEYS = (
    "trusted_keys",
    "require",
    "trusted_certificates",
    "certificate_identities",
    "sigstore_trust_config",
    "sigstore_identities",
)

OMS_KEY_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
"""The elliptic curves OMS's public-key form allows (``model_signing``'s own check)."""

FULCIO_ISSUER_OIDS = ("1.3.6.1.4.1.57264.1.8", "1.3.6.1.4.1.57264.1.1")
"""The signing certificate's OIDC issuer: Fulcio's DER UTF8String extension, then its
older raw-string one."""


@dataclass(frozen=True)
class SigningPolicy:
    """What the device owner trusts: public keys, sigstore identities, and whether a
    signature is required."""

    trusted_keys: tuple[Path, ...] = ()
    require: bool = False
    trusted_certificates: tuple[Path, ...] = ()
    certificate_identities: tuple[tuple[str, str], ...] = ()
    sigstore_trust_config: Path | None = None
    sigstore_identities: tuple[tuple[str, str], ...] = ()

    @property
    def trusts_anything(self) -> bool:
        return bool(self.trusted_keys or self.trusted_certificates or self.sigstore_identities)

    @classmethod
    def from_config(cls, config: dict, path: Path) -> SigningPolicy:
        """``[model_signing]`` of a configuration table; BadInput names a bad key."""
        table = config.get("model_signing", {})
        where = f"agent configuration {path}: [model_signing]"
        if not isinstance(table, dict):
            raise BadInput(f"{where} must be a table")
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            raise BadInput(f"{where} unknown key {unknown[0]}", hint=f"it takes {', '.join(_KEYS)}")
        base = Path(path).parent
        keys = table.get("trusted_keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise BadInput(f"{where} trusted_keys must be a list of public key file paths")
        require = table.get("require", False)
        if not isinstance(require, bool):
            raise BadInput(f"{where} require must be true or false")
        trust = table.get("sigstore_trust_config")
        if trust is not None and not (isinstance(trust, str) and trust):
            raise BadInput(f"{where} sigstore_trust_config must be a file path")
        identities = _identities(table, "sigstore_identities", where)
        certificates = table.get("trusted_certificates", [])
        if not isinstance(certificates, list) or not all(
            isinstance(c, str) and c for c in certificates
        ):
            raise BadInput(f"{where} trusted_certificates must be a list of CA certificate files")
        named = _identities(table, "certificate_identities", where)
        if named and not certificates:
            raise BadInput(
                f"{where} certificate_identities need trusted_certificates",
                hint="the CA certificates a signing certificate must chain to",
            )
        if identities and trust is None:
            raise BadInput(
                f"{where} sigstore_identities need sigstore_trust_config",
                hint="bundles are verified offline, against a trusted root file",
            )
        return cls(
            trusted_keys=tuple(base / k for k in keys),
            require=require,
            trusted_certificates=tuple(base / c for c in certificates),
            certificate_identities=named,
            sigstore_trust_config=base / trust if trust else None,
            sigstore_identities=identities,
        )


def _identities(table: dict, key: str, where: str) -> tuple[tuple[str, str], ...]:
    """``[{identity, issuer}]`` of ``table[key]`` as pairs; BadInput for any other shape."""
    identities = table.get(key, [])
    if not isinstance(identities, list) or not all(
        isinstance(i, dict)
        and set(i) == {"identity", "issuer"}
        and all(isinstance(v, str) and v for v in i.values())
        for i in identities
    ):
        raise BadInput(f"{where} {key} must be a list of {{identity, issuer}}")
    return tuple((i["identity"], i["issuer"]) for i in identities)


def unsigned(policy: SigningPolicy) -> dict:
    """``results.model_signature`` of a model sent without a signature."""
    if policy.require:
        return {
            "status": "failed",
            "reason": "this device requires a model signature ([model_signing] require = true) "
            "and the model came without one",
        }
    return {"status": "unsigned"}


def verify(target: Path, signature: Path, policy: SigningPolicy) -> dict:
    """Verify ``signature`` over ``target`` (a model file or its bundle directory) in a
    child process; ``results.model_signature``."""
    if not policy.trusts_anything:
        return {
            "status": "failed",
            "reason": "a model signature was sent, but this device trusts no model-signing key "
            "([model_signing] trusted_keys in agent.toml)",
        }
    problem = signature_problem(Path(signature))
    if problem is not None:
        return {"status": "failed", "reason": f"the model signature is {problem}"}
    argv = [sys.executable, "-m", "edgequal.agent.model_signature", str(target), str(signature)]
    argv += [f"--key={k}" for k in policy.trusted_keys]
    argv += [f"--ca={c}" for c in policy.trusted_certificates]
    argv += [f"--cert-identity={i}\n{o}" for i, o in policy.certificate_identities]
    if policy.sigstore_trust_config is not None:
        argv.append(f"--trust-config={policy.sigstore_trust_config}")
    argv += [f"--identity={i}\n{o}" for i, o in policy.sigstore_identities]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            timeout=VERIFY_TIMEOUT_S,
            start_new_session=True,
            close_fds=True,
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"not verified within {VERIFY_TIMEOUT_S:g} s"}
    try:
        return json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return {"status": "failed", "reason": f"the verifier failed: {tail[0][:300]}"}


def manifest_sha256(signature: Path) -> str | None:
    """The OMS manifest digest a signature names: its statement's ``subject[0]`` sha256."""
    import base64

    try:
        bundle = json.loads(signature.read_bytes())
        statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        return statement["subject"][0]["digest"]["sha256"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def key_problem(key: Path) -> str | None:
    """Why ``key`` is not a public key OMS's key form verifies with, or None: not a PEM
    public key, or a key type or curve the format does not allow (EC P-256, P-384, P-521)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        data = Path(key).read_bytes()[: 1 << 20]
        public = serialization.load_pem_public_key(data)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    except (ValueError, TypeError):
        return "not a PEM public key (-----BEGIN PUBLIC KEY-----)"
    if not isinstance(public, ec.EllipticCurvePublicKey):
        kind = type(public).__name__.removeprefix("_").replace("PublicKey", "") or "other"
        return (
            f"an {kind} key, a key type OMS's public-key form does not allow: it takes "
            "elliptic-curve keys (P-256, P-384, P-521)"
        )
    if public.curve.name not in OMS_KEY_CURVES:
        return (
            f"an elliptic-curve key on {public.curve.name}, a curve OMS's public-key form does "
            "not allow (P-256, P-384, P-521)"
        )
    return None


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:300]


def _refusal(error: Exception) -> str:
    """One verifier's refusal in a line: the files that changed since signing, by name (the
    package's own text of a hash mismatch prints both digests as Python bytes), else its
    first line."""
    import re

    text = str(error)
    names = re.findall(r"[Hh]ash mismatch for \\?'([^'\\]+)\\?'", text)
    if names:
        shown = ", ".join("the file" if n == "." else n for n in dict.fromkeys(names))
        return f"Signature mismatch: {shown} changed since signing"
    return _first_line(error)


def certificate_identity(signature: Path) -> tuple[str, str]:
    """The identity a signature's signing certificate names: its SAN (email, else URI) and
    its OIDC issuer (Fulcio's extension), ``""`` for either it lacks. ValueError for a
    signature that holds no certificate."""
    import base64

    from cryptography import x509

    bundle = json.loads(Path(signature).read_bytes())
    chain = bundle["verificationMaterial"]["x509CertificateChain"]["certificates"]
    cert = x509.load_der_x509_certificate(base64.b64decode(chain[0]["rawBytes"]))
    identity = ""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.RFC822Name) or san.get_values_for_type(
            x509.UniformResourceIdentifier
        )
        identity = names[0] if names else ""
    except x509.ExtensionNotFound:
        pass
    issuer = ""
    for dotted in FULCIO_ISSUER_OIDS:
        try:
            ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(dotted)).value
        except x509.ExtensionNotFound:
            continue
        raw = ext.value
        if dotted.endswith(".8"):  # a DER UTF8String: tag 0x0c, one length byte (short form)
            raw = raw[2:] if raw[:1] == b"\x0c" and len(raw) == raw[1] + 2 else b""
        issuer = raw.decode("utf-8", "replace")
        break
    return identity, issuer


def _verify_here(
    target: Path, signature: Path, keys, trust_config, identities, cas=(), cert_identities=()
) -> dict:
    """The child's work: the first trusted key, CA certificate or identity the signature
    verifies with."""
    try:
        from model_signing import verifying
    except ImportError as e:
        return {
            "status": "failed",
            "reason": f"model-signing is not installed on this device ({e.name}): install the "
            "agent's signing extra (edgequal agent install --extras signing)",
        }
    reasons = []
    for key in keys:
        problem = key_problem(Path(key))
        if problem is not None:
            reasons.append(f"{Path(key).name}: {problem}")
            continue
        try:
            verifying.Config().use_elliptic_key_verifier(public_key=key).verify(target, signature)
        except Exception as e:  # noqa: BLE001 - each key's refusal is a reason, not a crash
            reasons.append(f"{Path(key).name}: {_refusal(e)}")
            continue
        return {"status": "verified", "key": Path(key).name, "form": "public key"}
    if cas:
        names = ", ".join(Path(c).name for c in cas)
        try:
            verifying.Config().use_certificate_verifier(certificate_chain=cas).verify(
                target, signature
            )
            identity, issuer = certificate_identity(signature)
        except Exception as e:  # noqa: BLE001
            reasons.append(f"certificates of {names}: {_refusal(e)}")
        else:
            if not cert_identities or (identity, issuer) in set(map(tuple, cert_identities)):
                return {
                    "status": "verified",
                    "key": identity or names,
                    "form": "certificate",
                    "issuer": issuer,
                }
            reasons.append(
                f"a certificate of {names} for {identity or 'no identity'} "
                f"({issuer or 'no issuer'}): not an identity this device trusts"
            )
    for identity, issuer in identities:
        try:
            verifying.Config().use_sigstore_verifier(
                identity=identity, oidc_issuer=issuer, trust_config=Path(trust_config)
            ).verify(target, signature)
        except Exception as e:  # noqa: BLE001
            reasons.append(f"{identity}: {_refusal(e)}")
            continue
        return {"status": "verified", "key": identity, "form": "sigstore"}
    # A signature that matches a trusted key but not the files is a tampered model.
    tampered = [r for r in reasons if "Signature mismatch" in r or "mismatch for" in r]
    return {
        "status": "failed",
        "reason": ("the model does not match its signature: " + tampered[0])
        if tampered
        else "not signed by a trusted key: " + "; ".join(reasons),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m edgequal.agent.model_signature TARGET SIGNATURE --key=K... [--ca=CERT...
    --cert-identity=ID\\nISSUER...] [--trust-config=F --identity=ID\\nISSUER...]``: one
    JSON line."""
    args = list(sys.argv[1:] if argv is None else argv)
    plain = [a for a in args if not a.startswith("--")]
    if len(plain) != 2:
        print(json.dumps({"status": "failed", "reason": "usage: TARGET SIGNATURE --key=K..."}))
        return 2
    target, signature = map(Path, plain)

    def values(flag: str) -> list[str]:
        return [a.split("=", 1)[1] for a in args if a.startswith(f"--{flag}=")]

    trust = next(iter(values("trust-config")), None)
    result = _verify_here(
        target,
        signature,
        values("key"),
        trust,
        [tuple(v.split("\n", 1)) for v in values("identity")],
        cas=values("ca"),
        cert_identities=[tuple(v.split("\n", 1)) for v in values("cert-identity")],
    )
    if result["status"] == "verified":
        result["manifest_sha256"] = manifest_sha256(signature)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
