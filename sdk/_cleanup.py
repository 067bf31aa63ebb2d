"""The cleanup task of a generated state machine (``funcsion: end run`` and
``funcsion: clean up failed run``): on success it copies the workflow's
outputs to COS (``outputs/<run_id>/<name>``, the encoded payload), then ends
the run, which frees every object the run still holds. Deployed as its own
Lambda next to the task handlers."""

from __future__ import annotations

from typing import Any

from ._task import RunContext

__all__ = ["handler"]


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from ._client import Client

    rc = RunContext.from_event({**event, "function": event.get("function") or "funcsion-cleanup"})
    status = str(event.get("status", "failed"))
    cos_url = str(event.get("funcsion", {}).get("cos_url", ""))
    outputs: dict[str, str] = {}
    with Client(rc.endpoints, run_id=rc.run_id, token=rc.token) as run:
        if status == "succeeded" and cos_url:
            from storage_functions.cos import open_cos

            cos = open_cos(cos_url)
            try:
                for obj in run.list():
                    if obj.declared_reads == 0 and obj.producer and obj.state == "readable":
                        key = f"outputs/{rc.run_id}/{obj.object_name}"
                        cos.put(key, run.read_raw(obj.object_name))
                        outputs[obj.object_name] = f"{cos.url.rstrip('/')}/{key}"
            finally:
                cos.close()
        summary = run.end_run(status)
    return {"run_id": rc.run_id, "status": status, "outputs": outputs,
            "allocated_mb_s": summary.get("allocated_mb_s")}
