"""A task that reports the run context it was given and tries another run's
key with the store token it holds (tests/integration/test_run_tokens.py)."""

from __future__ import annotations

from typing import Any

import sdk
from sdk._store_client import StoreClient
from storage_functions.exceptions import AuthError, StorageError


@sdk.task
def probe(event: dict[str, Any], context: Any) -> None:
    target = sdk.get("target")  # another run's store key, "<run_id>/<name>"
    ctx = event["funcsion"]
    attempts = {
        "get": lambda c: c.get(target),
        "put": lambda c: c.put(target, b"overwritten by another run"),
        "delete": lambda c: c.delete(target),
        "free": lambda c: c.free([target]),
        "cos_get": lambda c: c.cos_get(f"persisted/{target}"),
    }
    tried: dict[str, str] = {}
    with StoreClient(ctx["daemon"], ctx["store_token"]) as c:
        for op, fn in attempts.items():
            try:
                fn(c)
                tried[op] = "allowed"
            except AuthError:
                tried[op] = "refused"
            except StorageError as exc:
                tried[op] = f"{type(exc).__name__}: {exc}"
    sdk.put("seen", {"context": ctx, "tried": tried})
