"""The cleanup task of a generated state machine (``funcsion: end run`` and
``funcsion: clean up failed run``): on success it copies the workflow's
outputs to COS (``outputs/<run_id>/<name>``, the encoded payload; its result
names each copy and the codec that decodes it, which ``funcsion run --target
aws`` reads from the execution history), then ends the run, which frees every
object the run still holds. Deployed as its own Lambda next to the task
handlers. It holds the run's tokens only, like the
tasks: reading the run's objects, writing ``outputs/<run_id>/`` (through the
daemon) and ending the run need nothing more; the stack's control loop,
on the admin side, frees the bytes."""

from __future__ import annotations

from typing import Any

from ._task import RunContext

__all__ = ["handler"]


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from ._client import Client

    rc = RunContext.from_event({**event, "function": event.get("function") or "funcsion-cleanup"})
    status = str(event.get("status", "failed"))
    outputs: dict[str, str] = {}
    codecs: dict[str, str] = {}
    with Client(rc.endpoints, run_id=rc.run_id, token=rc.token) as run:
        if status == "succeeded" and rc.endpoints.cos_url:
            for obj in run.list():
                if obj.declared_reads == 0 and obj.producer and obj.state == "readable" and not obj.adhoc:
                    outputs[obj.object_name], codecs[obj.object_name] = run.copy_output(obj.object_name)
        summary = run.end_run(status)
    return {"run_id": rc.run_id, "status": status, "outputs": outputs, "output_codecs": codecs,
            "allocated_mb_s": summary.get("allocated_mb_s")}
