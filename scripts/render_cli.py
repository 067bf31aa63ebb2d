#!/usr/bin/env python3
"""The CLI reference of the documentation site, generated from `sdk.cli`'s argparse parsers.

    python scripts/render_cli.py > /tmp/cli.md

walks `sdk.cli.build_parser()` (every command, every group's subcommands) and writes one
section per command: its description and its `--help` exactly as argparse prints it, at a
fixed width of 100 columns so the page does not depend on the terminal that built it. The
documentation build calls `render()` (scripts/docs_hooks.py), so the page is made from the
parsers each time and cannot drift from them.

What this does not do: it documents no behaviour the parsers do not declare (the guide pages
do that), and it does not import the commands' implementations beyond what `build_parser`
imports.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["commands", "render"]

_WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand of ``parser``, in the order it lists them."""
    out: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every command under ``parser`` as (words after `funcsion`, help, parser), depth first."""
    for name, help_text, sub in _subcommands(parser):
        yield (*path, name), help_text, sub
        yield from commands(sub, (*path, name))


def _anchor(words: tuple[str, ...]) -> str:
    return "-".join(words)


def render() -> str:
    """The CLI reference as Markdown."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _WIDTH  # argparse wraps help at $COLUMNS
    try:
        from sdk.cli import build_parser

        root = build_parser()
        entries = list(commands(root))
        lines = ["| command | what it does |", "|---|---|"]
        for words, help_text, _ in entries:
            summary = " ".join(help_text.split()).replace("|", "\\|")
            lines.append(f"| [`funcsion {' '.join(words)}`](#{_anchor(words)}) | {summary} |")
        lines += ["", "## funcsion", "", "```text", root.format_help().rstrip(), "```", ""]
        for words, _, sub in entries:
            level = "#" * min(2 + len(words) - 1, 4)
            lines += [f"{level} funcsion {' '.join(words)} {{ #{_anchor(words)} }}", ""]
            lines += ["```text", sub.format_help().rstrip(), "```", ""]
        return "\n".join(lines)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.stdout.write(render())
