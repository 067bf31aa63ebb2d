"""Check a deployment's TLS material before it goes into the stack: the
server certificate must name ``ServerName`` (what the Lambdas and drivers
dial) and ``127.0.0.1`` (what the daemon dials the metadata server at on
the host), be issued by the CA, be valid now, and match the key. Each
problem is one line naming the file's flag and the fix (``funcsion certs
DIR --name <ServerName> --name 127.0.0.1``).

Pure (PEM bytes and a clock in, an error out); uses ``cryptography`` (the
aws extra). Not here: making certificates (``funcsion certs``), serving TLS.
"""

from __future__ import annotations

import datetime
import ipaddress

__all__ = ["LOOPBACK", "tls_problem"]

#: The daemon reaches the metadata server on the host at this address.
LOOPBACK = "127.0.0.1"


def _names(cert: object) -> set[str]:
    from cryptography import x509

    assert isinstance(cert, x509.Certificate)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}


def tls_problem(ca_pem: bytes, cert_pem: bytes, key_pem: bytes, server_name: str,
                now: datetime.datetime | None = None) -> str | None:
    """What is wrong with the material, or ``None``."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    fix = f"make them with `funcsion certs DIR --name {server_name} --name {LOOPBACK}` and pass --tls-dir DIR"
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError:
        return f"--tls-ca is not a PEM certificate: {fix}"
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return f"--tls-cert is not a PEM certificate: {fix}"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return f"--tls-key is not an unencrypted PEM private key: {fix}"
    names = _names(cert)
    missing = [n for n in (server_name, LOOPBACK) if n not in names and str(_ip(n)) not in names]
    if missing:
        return (f"--tls-cert names {', '.join(sorted(names)) or 'nothing'} but not {', '.join(missing)} (the "
                f"servers are dialled at {server_name} and, on the host, {LOOPBACK}): {fix}")
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):
        return f"--tls-cert was not issued by --tls-ca: give the CA that signed it, or {fix}"
    at = now or datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= at <= cert.not_valid_after_utc:
        return (f"--tls-cert is valid from {cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d}, "
                f"not now: {fix}")
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, pub) != cert.public_key().public_bytes(der, pub):
        return f"--tls-key is not the key of --tls-cert: give the key made with it, or {fix}"
    return None


def _ip(name: str) -> object:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return name
