"""The ``funcsion`` command line.

Each subcommand lives in its own module and registers itself through
``add_parser(subparsers)`` and a ``run(args) -> int``. ``main`` turns every
``FuncsionError`` into a message and exit code 2 (bad input) without a
traceback; unexpected errors still print one, since they are bugs.

Optional packages (networkx, matplotlib, boto3, ...) are imported only by the
commands that use them; a missing one exits 2 naming the extra to install.
``--version`` prints the installed distribution's version. A ``FUNCSION_*``
environment variable that funcsion does not read gets a one-line warning.

Shorthand: ``funcsion deploy WDS ...`` is ``funcsion deploy workflow WDS ...``
(``main`` rewrites the arguments when the word after ``deploy`` is neither a
subcommand nor an option).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from funcsion_errors import FuncsionError

from . import (certs_cmd, collect_cmd, get_cmd, inspect_cmd, logs_cmd, report_cmd, run_cmd, runs_cmd, stack_cmd,
               train_cmd)
from ._common import missing_extra
from ._dispatch import add_group
from ._env import unknown_env_warnings

__all__ = ["main", "build_parser"]

_COMMANDS = [inspect_cmd, run_cmd, runs_cmd, report_cmd, logs_cmd, get_cmd, stack_cmd, collect_cmd, train_cmd,
             certs_cmd]
# group -> (help, {subcommand: module under sdk.cli})
_GROUPS = {
    "serve": ("run one funcsion server in the foreground", {
        "metadata": "serve_metadata", "daemon": "serve_daemon", "stack": "serve_stack"}),
    "bench": ("benchmarks; add --json for one JSON object as the last line", {
        "metadata": "bench_metadata", "store": "bench_store", "hdag": "bench_hdag",
        "utilization": "bench_utilization", "lifetime": "bench_lifetime", "recovery": "bench_recovery",
        "run": "bench_run", "elasticity": "bench_elasticity", "placement": "bench_placement",
        "scale": "bench_scale", "offload": "bench_offload"}),
    "deploy": ("deploy storage functions or a workflow", {
        "storage": "deploy_storage", "workflow": "deploy_workflow"}),
    "offload": ("offload large results of any Step Functions state machine", {
        "plan": "offload_plan", "run": "offload_run", "deploy": "offload_deploy"}),
}
_EPILOGS = {
    "deploy": "shorthand: `funcsion deploy WDS [--target local|aws] ...` is `funcsion deploy workflow WDS ...`",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="funcsion",
        description="Ephemeral storage for serverless workflows: run, inspect and deploy funcsion workflows.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in _COMMANDS:
        mod.add_parser(sub)
    for name, (help_text, members) in _GROUPS.items():
        add_group(sub, name, help_text, members, epilog=_EPILOGS.get(name))
    return parser


def version() -> str:
    """The installed funcsion's version (from its distribution metadata)."""
    try:
        return metadata.version("funcsion")
    except metadata.PackageNotFoundError:
        return "(not installed: run from a source tree)"


def _deploy_shorthand(argv: list[str]) -> list[str] | str:
    """``deploy WDS ...`` becomes ``deploy workflow WDS ...``; returns an error message
    when the word after ``deploy`` is neither a subcommand nor an existing file."""
    if len(argv) < 2 or argv[0] != "deploy" or argv[1].startswith("-"):
        return argv
    subcommands = _GROUPS["deploy"][1]
    if argv[1] in subcommands:
        return argv
    path = Path(argv[1])
    if not path.is_file():
        why = "not a file" if path.exists() else "no such file"
        return (f"{argv[1]!r} is neither a subcommand ({', '.join(subcommands)}) nor a WDS file ({why}); "
                "write `funcsion deploy WDS --target local|aws` or `funcsion deploy storage ...`")
    return [argv[0], "workflow", *argv[1:]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    expanded = _deploy_shorthand(list(sys.argv[1:] if argv is None else argv))
    if isinstance(expanded, str):
        print(f"funcsion deploy: {expanded}", file=sys.stderr)
        return 2
    args = parser.parse_args(expanded)
    for warning in unknown_env_warnings(os.environ):
        print(f"funcsion: warning: {warning}", file=sys.stderr)
    try:
        code: int = args.run(args)
    except FuncsionError as exc:
        print(f"funcsion {args.command}: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        fix = missing_extra(exc)
        if fix is None:
            raise
        print(f"funcsion {args.command}: {fix}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"funcsion {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
