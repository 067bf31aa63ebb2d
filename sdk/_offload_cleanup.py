"""``sdk.offload_cleanup``: end an execution's run however the execution ended.

A Lambda handler for EventBridge's "Step Functions Execution Status Change" event
(source ``aws.states``): when ``detail.status`` is SUCCEEDED, FAILED, TIMED_OUT or
ABORTED it ends the run named ``detail.name`` with that outcome, which frees every
object the run still holds (in function memory and in COS). The run's token comes
from the execution's input (``detail.input``: the ``funcsion`` entry
``sdk.offload_start`` put there), so the cleanup Lambda holds no admin or store-wide
token. A rule to route the events::

    {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
     "detail": {"status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                "stateMachineArn": ["<the state machine's ARN>"]}}

An event that arrives twice, or after the run ended, does nothing. An execution whose
event never arrives (or whose input EventBridge left out) is ended by the metadata
server's TTL (config ``run_ttl_s``, with no activity) as a last resort.

Not here: the per-state decorator (``sdk._offload``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from funcsion_rpc.errors import RunEnded, UnknownRun

from ._constants import EVENT_KEY
from ._task import RunContext

__all__ = ["ENDED", "handler"]

#: The execution statuses that end a run (the outcome is the status in lower case).
ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """End the run of the execution ``event`` reports on (see the module docstring)."""
    from ._client import Client

    detail = event.get("detail") if isinstance(event, Mapping) else None
    if not isinstance(detail, Mapping) or not detail.get("name"):
        raise ValueError("sdk.offload_cleanup: the event is not a Step Functions Execution Status Change event "
                         "(no detail.name); route only source aws.states, detail-type \"Step Functions "
                         "Execution Status Change\" to this handler")
    status, run_id = str(detail.get("status", "")), str(detail["name"])
    if status not in ENDED:
        return {"run_id": run_id, "status": status, "ended": False, "why": "the execution has not ended"}
    raw = detail.get("input")
    try:
        doc = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        doc = None
    ctx = doc.get(EVENT_KEY) if isinstance(doc, Mapping) else None
    if not isinstance(ctx, Mapping):
        return {"run_id": run_id, "status": status, "ended": False,
                "why": "the event holds no funcsion run in the execution's input; the run's TTL ends it"}
    rc = RunContext.from_event({EVENT_KEY: ctx, "run_id": run_id, "function": "funcsion-offload-cleanup"})
    with Client(rc.endpoints, run_id=rc.run_id, token=rc.token) as run:
        try:
            summary = run.end_run(status.lower())
        except (RunEnded, UnknownRun):
            return {"run_id": run_id, "status": status, "ended": False, "why": "the run had already ended"}
    return {"run_id": run_id, "status": status, "ended": True, "allocated_mb_s": summary.get("allocated_mb_s")}
