"""Argument helpers of the CLI."""

from __future__ import annotations

import argparse

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
