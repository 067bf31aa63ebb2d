"""Argument helpers of the CLI."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from sdk.cli._common import parse_size


@pytest.mark.parametrize(("text", "want"), [
    ("0", 0), ("1048576", 1 << 20), ("512MiB", 512 << 20), ("2GB", 2 * 10**9), ("1.5 KiB", 1536), ("3m", 3 * 10**6),
])
def test_parse_size(text: str, want: int) -> None:
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "MiB", "-1", "2 parsecs", "1e9"])
def test_parse_size_refuses_what_is_not_a_size(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a size"):
        parse_size(text)


def test_stack_option_reads_a_stack_file_or_addresses_with_tokens_from_the_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from sdk.cli._common import stack_option

    (tmp_path / "stack.json").write_text(json.dumps({"pid": 1, "metadata": "127.0.0.1:7917", "daemon": "h:7918",
                                                     "store_token": "s", "admin_token": "a", "cos_url": "file:///c"}))
    for given in (tmp_path, tmp_path / "stack.json"):
        ep = stack_option(str(given), {})
        assert (ep.metadata, ep.daemon, ep.store_token, ep.admin_token, ep.cos_url) == (
            "127.0.0.1:7917", "h:7918", "s", "a", "file:///c")
    env = {"FUNCSION_ADMIN_TOKEN": "a", "FUNCSION_STORE_TOKEN": "s"}
    ep = stack_option("metadata=10.0.0.1:7917, daemon=10.0.0.2:7918,cos=s3://b/p", env)
    assert (ep.metadata, ep.daemon, ep.store_token, ep.admin_token, ep.cos_url) == (
        "10.0.0.1:7917", "10.0.0.2:7918", "s", "a", "s3://b/p")


@pytest.mark.parametrize(("text", "env", "match"), [
    ("metadata=h:1", {}, "no daemon=HOST:PORT"),
    ("metadata=h:1,daemon=h:2,extra=3", {}, "write metadata=HOST:PORT,daemon=HOST:PORT"),
    ("metadata=h,daemon=h:2", {}, "metadata=: address 'h' is not host:port"),
    ("metadata=h:1,daemon=h:2", {"FUNCSION_ADMIN_TOKEN": "a"}, "set FUNCSION_STORE_TOKEN"),
    ("metadata=h:1,daemon=h:2", {}, "set FUNCSION_ADMIN_TOKEN and FUNCSION_STORE_TOKEN"),
    ("/nonexistent/stack.json", {}, "cannot read /nonexistent/stack.json"),
])
def test_stack_option_says_what_is_wrong(text: str, env: dict[str, str], match: str) -> None:
    from sdk.cli._common import stack_option

    with pytest.raises(ValueError, match=match):
        stack_option(text, env)


def test_stack_option_refuses_a_file_that_is_not_a_stack_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from sdk.cli._common import stack_option

    (tmp_path / "stack.json").write_text('{"metadata": "h:1"}')
    with pytest.raises(ValueError, match="is not a stack file as `funcsion up` writes it"):
        stack_option(str(tmp_path), {})


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from _commands(sub, (*path, name))


def test_every_command_has_a_description_in_its_help() -> None:
    """`funcsion up --help` and `down --help` once had none: each command's --help says what it does."""
    from sdk.cli import build_parser

    commands = dict(_commands(build_parser()))
    assert {"up", "down", "run", "get", "serve stack", "deploy workflow"} <= set(commands)
    lacking = [name for name, p in commands.items() if not (p.description or "").strip()]
    assert lacking == []
    assert "in the background" in commands["up"].format_help() and "funcsion down" in commands["up"].format_help()
    assert "funcsion up" in commands["down"].format_help()
