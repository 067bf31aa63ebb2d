"""Handlers that break the rules, chosen by the BAD_MODE file next to this one."""

from __future__ import annotations

from pathlib import Path

import sdk

MODE = (Path(__file__).parent / "BAD_MODE").read_text().strip()


def _divide(x: int) -> float:
    return 1 / x


@sdk.task
def producer(event: dict, context: object) -> dict:
    data = sdk.get("src")
    if MODE == "raises":  # an error of the handler's own code
        print("about to divide", flush=True)
        _divide(0)
    if MODE == "undeclared_write":
        sdk.put("not_declared", "x")
    if MODE == "missing_output":
        sdk.put("mid", data)
        return {}
    if MODE == "missing_middle_output":  # the last output commits; 'mid' is never written
        sdk.put("side", "s")
        return {}
    if MODE == "codec":
        sdk.put_many({"mid": {1, 2}, "side": "s"})  # a set: json cannot encode it
    if MODE == "bad_return":
        sdk.put_many({"mid": data, "side": "s"})
        return {"not json": {1, 2}}  # type: ignore[dict-item]
    sdk.put_many({"mid": data, "side": "s"})
    return {}


@sdk.task
def consumer(event: dict, context: object) -> dict:
    if MODE == "undeclared_read":
        sdk.get("side")
    mid = sdk.get("mid")
    sdk.put("result", mid.upper())
    if MODE == "read_after_commit":
        sdk.get("mid")
    return {}


def _undecorated(event: dict, context: object) -> dict:  # the mistake: no @sdk.task
    sdk.get("src")
    return {}


if MODE == "no_task":
    producer = _undecorated  # type: ignore[assignment]  # noqa: F811
