"""A task whose first attempt prints and fails (so it is retried) and one that prints one line:
what ``funcsion logs`` shows attempt by attempt."""

from __future__ import annotations

import sdk


@sdk.task
def flaky(event: dict, context: object) -> dict:
    print(f"flaky says hello from attempt {event['attempt']}")
    if event["attempt"] == 1:
        raise RuntimeError("the first attempt fails on purpose")
    sdk.put("mid", sdk.get("src").upper())
    return {}


@sdk.task
def quiet(event: dict, context: object) -> dict:
    print("quiet ran")
    sdk.put("result", sdk.get("mid"))
    return {}
