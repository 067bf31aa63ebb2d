"""Persisted copies with a lifetime (Pocket's PERSIST timeout): the producer persists a
brief for 2 s after the run and a summary with the store's default lifetime."""

from datetime import timedelta

import sdk


@sdk.task
def producer(event, context):
    lines = sdk.get("src").splitlines()
    sdk.put("brief", lines[0], persist=timedelta(seconds=2))
    sdk.put("summary", {"lines": len(lines)}, persist=True)
    return {"lines": len(lines)}


@sdk.task
def consumer(event, context):
    sdk.put("result", {"brief": sdk.get("brief"), "summary": sdk.get("summary")})
    return {"ok": True}
