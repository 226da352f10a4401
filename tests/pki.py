"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1, a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def make_pki(d: Path) -> dict[str, Path]:
    """A CA, a server cert for 127.0.0.1, and a client cert, all PEM in ``d``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject_key, cn, issuer_key, issuer_cn, ca=False, san=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(issuer_cn))
            .public_key(subject_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def write(path, obj):
        if isinstance(obj, x509.Certificate):
            path.write_bytes(obj.public_bytes(serialization.Encoding.PEM))
        else:
            path.write_bytes(
                obj.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert(ca_key, "edgequal test CA", ca_key, "edgequal test CA", ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = cert(
        srv_key,
        "agent",
        ca_key,
        "edgequal test CA",
        san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = cert(cli_key, "host", ca_key, "edgequal test CA")
    return {
        "ca": write(d / "ca.pem", ca),
        "server_cert": write(d / "server.pem", srv),
        "server_key": write(d / "server.key", srv_key),
        "client_cert": write(d / "client.pem", cli),
        "client_key": write(d / "client.key", cli_key),
    }
