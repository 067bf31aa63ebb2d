"""Shared fixtures. Tiers: tests/unit (pure, no sockets), tests/functional (one
process, real protocols on loopback, moto for AWS), tests/integration (the whole
local stack, examples, fault injection)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_functions.daemon._config import CHECK_STATE_ENV

# every daemon a test stops asserts its store core's invariants (StoreState.validate_state),
# in this process and in the stacks and daemons tests start as child processes
os.environ.setdefault(CHECK_STATE_ENV, "1")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def example_paths() -> dict[str, Path]:
    return {
        "wordcount": EXAMPLES / "wordcount" / "wordcount.wds.json",
        "gg_compile": EXAMPLES / "gg_compile" / "gg_compile.wds.json",
        "video": EXAMPLES / "video" / "video.wds.json",
    }


@pytest.fixture
def fig9_path() -> Path:
    return DATA / "fig9.wds.json"
