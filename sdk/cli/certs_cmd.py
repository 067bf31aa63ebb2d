"""``funcsion certs DIR --name NAME [--name NAME ...] [--days N]``: a CA and a server
certificate for a deployment's advertised names, made with ``cryptography``.

Writes ``DIR/ca.pem`` (what clients trust: ``--tls-ca``, ``--stack ...,ca=PATH``),
``DIR/ca.key`` (keep it offline; only needed to make more certificates), ``DIR/server.pem``
and ``DIR/server.key`` (``--tls-cert`` / ``--tls-key`` of ``funcsion serve metadata`` and
``serve daemon``). Keys are written 0600. Each ``--name`` becomes a subject alternative
name: an IP address as an IP SAN, anything else as a DNS name; clients verify the host
part of the address they dial against them. ``make_certs`` is the same for tests.
Not here: serving TLS (``storage_functions.tls``)."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

from funcsion_errors import FuncsionError

__all__ = ["add_parser", "run", "make_certs", "CertsError", "FILES"]

#: what ``make_certs`` writes into its directory
FILES = ("ca.pem", "ca.key", "server.pem", "server.key")


class CertsError(FuncsionError):
    """Bad arguments for ``funcsion certs``, or a directory it cannot write."""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "certs", help="make a CA and a server certificate for TLS between funcsion's servers and clients",
        description="Make DIR/ca.pem, ca.key, server.pem and server.key (keys 0600): a CA and a server "
                    "certificate for the names the servers advertise (DNS names or IP addresses).")
    p.add_argument("dir", metavar="DIR", help="directory to write the four files into (made if missing)")
    p.add_argument("--name", action="append", required=True, metavar="NAME",
                   help="a DNS name or IP address clients dial (repeat for each; e.g. the server host's private IP)")
    p.add_argument("--days", type=int, default=365, help="validity of both certificates in days (default 365)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(run=run, _parser=p)


def _san(name: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return x509.DNSName(name)


def _check(names: list[str], days: int) -> None:
    if not names:
        raise CertsError("give at least one --name (a DNS name or IP address the servers advertise)")
    for n in names:
        if not n or (not _is_ip(n) and any(c.isspace() or c in "/:*@[]" for c in n)):
            raise CertsError(f"--name {n!r} is neither a DNS name nor an IP address (write the host only, "
                             "no port or scheme)")
    if not 1 <= days <= 3650:
        raise CertsError(f"--days must be 1..3650, got {days}")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if private:
        os.chmod(path, 0o600)   # an existing file keeps its mode through O_CREAT


def make_certs(directory: str | Path, names: list[str], *, days: int = 365, force: bool = False) -> dict[str, Path]:
    """Write the CA and a server certificate for ``names`` into ``directory``; returns the
    paths by file name (``FILES``). Raises ``CertsError``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    _check(names, days)
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CertsError(f"cannot make {out}: {exc.strerror or exc}") from None
    paths = {f: out / f for f in FILES}
    present = [str(p) for p in paths.values() if p.exists()]
    if present and not force:
        raise CertsError(f"{present[0]} exists; pass --force to replace the certificates in {out}")
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "funcsion deployment CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    srv = (x509.CertificateBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0].strip("[]"))]))
           .issuer_name(ca_name).public_key(key.public_key())
           .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
           .add_extension(x509.SubjectAlternativeName([_san(n.strip("[]")) for n in dict.fromkeys(names)]),
                          critical=False)
           .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
           .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
           .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
           .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    pkcs8, plain = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    try:
        _write(paths["ca.pem"], ca.public_bytes(pem), False)
        _write(paths["ca.key"], ca_key.private_bytes(pem, pkcs8, plain), True)
        _write(paths["server.pem"], srv.public_bytes(pem), False)
        _write(paths["server.key"], key.private_bytes(pem, pkcs8, plain), True)
    except OSError as exc:
        raise CertsError(f"cannot write into {out}: {exc.strerror or exc}") from None
    return paths


def run(args: argparse.Namespace) -> int:
    paths = make_certs(args.dir, list(args.name), days=args.days, force=args.force)
    names = ", ".join(dict.fromkeys(args.name))
    print(f"CA {paths['ca.pem']} (its key {paths['ca.key']}: keep it offline), server certificate "
          f"{paths['server.pem']} and key {paths['server.key']} for {names}, valid {args.days} days")
    print(f"serve with: --tls-cert {paths['server.pem']} --tls-key {paths['server.key']} --tls-ca {paths['ca.pem']}")
    return 0
