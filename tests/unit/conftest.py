"""Fixtures shared by the unit tests of the metadata core."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata_server import CoreDriver


@pytest.fixture
def d(fig9_path: Path) -> Iterator[CoreDriver]:
    """A metadata core with FuncStore's Fig. 9 workflow registered (``d.key``) and one
    storage function of 64 blocks of 1000 B; every invariant is checked afterwards."""
    drv = CoreDriver(block_size=1000)
    drv.key = drv.register(fig9_path)  # type: ignore[attr-defined]
    drv.capacity("s0", 64)
    yield drv
    drv.state.validate_state()
