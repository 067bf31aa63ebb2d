"""A producer that leaves a few MiB in the store (and a persisted copy), and a
consumer that, once it has read them, writes ``STARTED`` (its run id) beside
this file and waits for ``RELEASE`` there -- or for its parent (the run's
process) to go away -- so tests can act on a run while it holds data."""

from __future__ import annotations

import os
import time
from pathlib import Path

import sdk

HERE = Path(__file__).parent


@sdk.task
def producer(event: dict, context: object) -> dict:
    src = sdk.get("src")
    sdk.put("mid", src.encode() * (3 * 2**20 // max(1, len(src))), persist=True)
    return {}


@sdk.task
def consumer(event: dict, context: object) -> dict:
    mid = sdk.get("mid")
    parent = os.getppid()
    (HERE / "STARTED").write_text(event["run_id"])
    while not (HERE / "RELEASE").exists() and os.getppid() == parent:
        time.sleep(0.05)  # the task's own work, as long as the test wants it
    sdk.put("result", len(mid))
    return {}
