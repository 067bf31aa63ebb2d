"""Argument helpers shared by CLI subcommands."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk._client import Endpoints

__all__ = ["parse_params", "add_param_option", "parse_size", "stack_endpoints", "EXTRAS", "missing_extra"]

#: Optional top-level modules -> the extra of pyproject.toml that installs them.
EXTRAS = {"networkx": "local", "tqdm": "local", "matplotlib": "plot", "boto3": "aws", "botocore": "aws",
          "torch": "model", "redis": "bench", "moto": "dev"}

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
                     running.get("cos_url", ""))


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
