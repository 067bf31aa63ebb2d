"""Command groups whose subcommands live in their own modules (``funcsion bench
metadata`` in ``sdk.cli.bench_metadata``, ...). A module is imported only when
its subcommand is built, and must define ``HELP``, ``add_arguments(parser)``
and ``run(args) -> int``. A group lists its subcommands here; a subcommand
whose module is not there yet is simply not offered. ``epilog`` ends the
group's ``--help`` (e.g. a shorthand the group accepts)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

__all__ = ["add_group"]


def add_group(sub: Any, name: str, help_text: str, members: dict[str, str], epilog: str | None = None) -> None:
    group: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text, epilog=epilog)
    inner = group.add_subparsers(dest=f"{name}_command", required=True, metavar="WHAT")
    for member, module_name in members.items():
        try:
            mod = importlib.import_module(f"sdk.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sdk.cli.{module_name}":
                continue
            raise
        p = inner.add_parser(member, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(run=mod.run, _parser=p)
