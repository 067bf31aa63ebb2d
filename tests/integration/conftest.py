"""One embedded stack per module: starting one costs ~0.1 s, but its storage
functions warm up on first use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sdk._config import Config
from sdk.local._stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        yield st
