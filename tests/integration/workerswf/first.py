"""Stage 0: waits (up to 20 s) until two workers of stage 1 imported their module,
which happens only if the executor starts them while this stage runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import sdk

HERE = Path(__file__).parent


@sdk.task
def first(event: dict[str, Any], context: Any) -> None:
    src = sdk.get("src")
    deadline = time.monotonic() + 20
    while len(list(HERE.glob("imported-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the task's own work: as long as stage 1's workers take to start
    sdk.put("mid", src)
