"""The TLS options ``funcsion serve metadata`` and ``serve daemon`` share, and the rule
that a server off loopback speaks TLS unless told ``--insecure``.

``--tls-cert PATH --tls-key PATH`` (the server's certificate chain and key) and
``--tls-ca PATH`` (the CA the deployment's clients trust) default to the config fields
``tls_cert``/``tls_key``/``tls_ca`` (``FUNCSION_TLS_CERT``/``_KEY``/``_CA``, funcsion.toml).
``tls_settings`` checks them (pure but for reading the files it names); serving them is
``storage_functions.tls``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from funcsion_errors import FuncsionError

__all__ = ["add_tls_arguments", "tls_settings", "TlsSettings", "TlsSettingsError"]


class TlsSettingsError(FuncsionError):
    """TLS options that cannot be used together, or plaintext on a non-loopback address."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert: str = ""
    key: str = ""
    ca: str = ""          # the CA file's path
    ca_pem: str = ""      # its text

    @property
    def serving(self) -> bool:
        return bool(self.cert)


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-cert", metavar="PATH", default=None,
                   help="serve TLS with this certificate chain (PEM; `funcsion certs` makes one; env FUNCSION_TLS_CERT)")
    p.add_argument("--tls-key", metavar="PATH", default=None,
                   help="the certificate's private key (PEM; env FUNCSION_TLS_KEY)")
    p.add_argument("--tls-ca", metavar="PATH", default=None,
                   help="the CA the deployment's clients trust (PEM; env FUNCSION_TLS_CA)")
    p.add_argument("--insecure", action="store_true",
                   help="allow plaintext on a non-loopback address (tokens and data cross the network in clear)")


def tls_settings(args: argparse.Namespace, host: str, flag: str = "--host") -> TlsSettings:
    """The checked TLS settings of ``args`` for a server bound to ``host``; raises
    ``TlsSettingsError`` (one line naming the fix)."""
    from sdk._config import Config
    from storage_functions.tls import is_loopback, read_pem

    cfg = Config.load(tls_cert=args.tls_cert, tls_key=args.tls_key, tls_ca=args.tls_ca)
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        given, missing = ("--tls-cert", "--tls-key") if cfg.tls_cert else ("--tls-key", "--tls-cert")
        raise TlsSettingsError(f"{given} needs {missing} too (the server's certificate and its key)")
    if not cfg.tls_cert and not is_loopback(host) and not getattr(args, "insecure", False):
        raise TlsSettingsError(
            f"{flag} {host} is not loopback and no certificate was given: serve TLS with --tls-cert PATH "
            f"--tls-key PATH (`funcsion certs DIR --name HOST` makes them), or pass --insecure to speak "
            "plaintext on the network")
    try:
        ca_pem = read_pem(cfg.tls_ca, "--tls-ca") if cfg.tls_ca else ""
    except ValueError as exc:
        raise TlsSettingsError(str(exc)) from None
    return TlsSettings(cfg.tls_cert, cfg.tls_key, cfg.tls_ca, ca_pem)
