"""Argument helpers shared by CLI subcommands."""

from __future__ import annotations

import argparse

__all__ = ["parse_params", "add_param_option"]


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
        out[name.strip()] = int(value)
    return out
