"""Waiting in tests for something another process or thread does, where no event of
ours says it happened: poll ``cond`` with a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_for"]


def wait_for(cond: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition",
             interval_s: float = 0.02) -> Any:
    """``cond()``'s first true value; AssertionError naming ``what`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval_s)
