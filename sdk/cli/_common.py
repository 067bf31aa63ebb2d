"""Argument helpers shared by CLI subcommands."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk._client import Endpoints

__all__ = ["parse_params", "add_param_option", "parse_size", "stack_endpoints", "stack_option", "EXTRAS",
           "missing_extra"]

#: Optional top-level modules -> the extra of pyproject.toml that installs them.
EXTRAS = {"networkx": "local", "tqdm": "local", "matplotlib": "plot", "boto3": "aws", "botocore": "aws",
          "torch": "model", "redis": "bench", "moto": "dev", "cryptography": "aws"}

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_size(text: str) -> int:
    """``"512MiB"`` -> 536870912; decimal (kB, MB, GB) and binary (KiB, MiB, GiB) units."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write e.g. 512MiB, 2GB or 1048576")
    return int(float(m.group(1)) * _UNITS[unit])


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line fix for an optional package that is not installed, or None when
    ``exc`` is about anything else (a bug, or a broken install, keeps its traceback)."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    return (f"this command needs {root}, which a plain `pip install funcsion` leaves out; "
            f"install it with: pip install 'funcsion[{extra}]'")


def stack_endpoints(running: dict[str, Any]) -> Endpoints:
    """The ``Endpoints`` of a stack that ``funcsion up`` described in ``stack.json``."""
    from sdk._client import Endpoints

    return Endpoints(running["metadata"], running["daemon"], running["store_token"], running["admin_token"],
                     running.get("cos_url", ""), block_size=int(running.get("block_size") or 0),
                     ec_data=int(running.get("ec_data") or 0), ec_parity=int(running.get("ec_parity") or 0),
                     tls_ca=str(running.get("tls_ca") or ""))


def stack_option(text: str, env: Mapping[str, str]) -> Endpoints:
    """The ``Endpoints`` ``--stack`` names: a stack.json (as ``funcsion up`` writes it) or
    ``metadata=HOST:PORT,daemon=HOST:PORT[,cos=URL][,ca=PATH]`` with the tokens from ``env``
    (FUNCSION_ADMIN_TOKEN, FUNCSION_STORE_TOKEN); ``ca=PATH``: the servers speak TLS, verified
    against that CA (PEM). Several metadata shards: ``metadata=`` repeated, or their addresses
    joined by ``;`` (``metadata=H:P;H:P``), in shard order (every client and daemon must list them
    in the same order). Several daemons likewise: ``daemon=`` repeated or ``daemon=H:P;H:P``, in
    order (the K-th is daemon-K, as ``funcsion serve daemon --daemon-id daemon-K`` names itself), or
    each as ``ID=H:P`` (``daemon=daemon-0=H:P;daemon-1=H:P``). Raises ValueError saying what is wrong."""
    import json
    from pathlib import Path

    from sdk._client import Endpoints, parse_addr
    from sdk._constants import ENV_ADMIN_TOKEN, ENV_STORE_TOKEN
    from sdk._daemons import parse_daemons

    if "=" not in text:
        path = Path(text)
        if path.is_dir():
            path = path / "stack.json"
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            ep = stack_endpoints(info)
            for addr in (*ep.metadata_shards, *(a for _, a in ep.daemons)):
                parse_addr(addr)
        except OSError as exc:
            raise ValueError(f"--stack {text}: cannot read {path}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"--stack {text}: {path} is not a stack file as `funcsion up` writes it "
                             f"(metadata, daemon, store_token, admin_token): {exc}") from None
        return ep
    parts: dict[str, str] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or name not in ("metadata", "daemon", "cos", "ca") or not value or (
                name in parts and name not in ("metadata", "daemon")):
            raise ValueError(f"--stack {text!r}: write metadata=HOST:PORT,daemon=HOST:PORT (optionally ,cos=URL "
                             "and ,ca=PATH; several metadata shards: metadata= again, in shard order; several "
                             "daemons: daemon= again, in order) or the path of a stack.json")
        parts[name] = f"{parts[name]};{value}" if name in parts else value
    missing = [n for n in ("metadata", "daemon") if n not in parts]
    if missing:
        raise ValueError(f"--stack {text!r}: no {' and no '.join(missing)}=HOST:PORT")
    try:
        daemons = parse_daemons(parts["daemon"])
    except ValueError as exc:
        raise ValueError(f"--stack daemon=: {exc}") from None
    for name, addrs in (("metadata", parts["metadata"].split(";")), ("daemon", [a for _, a in daemons])):
        for addr in addrs:
            try:
                parse_addr(addr.strip())
            except ValueError as exc:
                raise ValueError(f"--stack {name}=: {exc}") from None
    if len(daemons) > 1:     # named in full, so that a grant's daemon id finds its address
        parts["daemon"] = ";".join(f"{i}={a}" for i, a in daemons)
    tokens = {var: env.get(var, "") for var in (ENV_ADMIN_TOKEN, ENV_STORE_TOKEN)}
    unset = [var for var, tok in tokens.items() if not tok]
    if unset:
        raise ValueError(f"--stack {text!r}: set {' and '.join(unset)} (`funcsion serve metadata` prints the admin "
                         "token, `funcsion serve daemon` the store token)")
    ca = ""
    if "ca" in parts:
        try:
            ca = Path(parts["ca"]).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--stack ca={parts['ca']}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                             ) from None
        if "-----BEGIN CERTIFICATE-----" not in ca:
            raise ValueError(f"--stack ca={parts['ca']}: not a PEM certificate (ca.pem of `funcsion certs`)")
    return Endpoints(parts["metadata"], parts["daemon"], tokens[ENV_STORE_TOKEN], tokens[ENV_ADMIN_TOKEN],
                     parts.get("cos", ""), tls_ca=ca)


def add_param_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--param", "-p", action="append", default=[], metavar="NAME=N",
        help="set a template parameter declared in the WDS 'params' object (repeatable)",
    )


def parse_params(items: list[str], parser_error: "argparse.ArgumentParser") -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.strip().isdigit():
            parser_error.error(f"--param {item!r}: write NAME=N with a whole number, e.g. --param mappers=8")
        if len(value.strip()) > 30:  # int() itself refuses past 4300 digits, with a traceback
            parser_error.error(f"--param {name}=...: a {len(value.strip())}-digit number; the WDS limits "
                               "(wds_max_*) allow far less")
        out[name.strip()] = int(value)
    return out
