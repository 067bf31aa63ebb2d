"""The task handlers ``funcsion bench offload`` runs, in its own process (direct calls) and as
Lambdas of the local platform (one instance process each), three ways per payload:

- ``offload_write``/``offload_read``: ``@sdk.offload`` handlers; the writer's value leaves as
  a reference, the reader gets the value back (and its commit frees it);
- ``inline_write``/``inline_read``: the same handlers undecorated; the value travels in the
  state itself (what a payload under Step Functions' 256 KiB limit can do);
- ``s3_write``/``s3_read``: an S3 claim check, hand-rolled as users do today: the writer puts
  the value to S3 with boto3 and returns its key; the reader gets it (the driver deletes it).

Every writer returns the same value (``payload(size)``: ASCII text, so its JSON is as large as
it is, made once per process and size: a warm Lambda's cost is the handler's, not the
making of the value). The S3 endpoint and bucket come from ``BENCH_OFFLOAD_S3_ENDPOINT`` and
``BENCH_OFFLOAD_S3_BUCKET``. Not here: the timing (``sdk.cli.bench_offload``).
"""

from __future__ import annotations

import os
import random
import string
import uuid
from typing import Any

from .._offload import offload

__all__ = ["inline_read", "inline_write", "offload_read", "offload_write", "payload", "s3_read", "s3_write"]

_PAYLOADS: dict[int, str] = {}
_S3: list[Any] = []


def payload(size: int) -> str:
    """``size`` ASCII characters (the same in every process: a fixed seed)."""
    if size not in _PAYLOADS:
        _PAYLOADS[size] = "".join(random.Random(size).choices(string.ascii_letters + string.digits, k=size))
    return _PAYLOADS[size]


def _write(event: dict[str, Any]) -> dict[str, Any]:
    return {"blob": payload(int(event["size"])), "size": int(event["size"])}


def _read(event: dict[str, Any]) -> dict[str, Any]:
    blob = event["data"]["blob"]
    return {"size": len(blob), "intact": len(blob) == int(event["data"]["size"])}


@offload
def offload_write(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _write(event)


@offload
def offload_read(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _read(event)


def inline_write(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _write(event)


def inline_read(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _read(event)


def _s3() -> Any:
    if not _S3:
        import boto3

        _S3.append(boto3.client("s3", endpoint_url=os.environ["BENCH_OFFLOAD_S3_ENDPOINT"], region_name="us-east-1"))
    return _S3[0]


def s3_write(event: dict[str, Any], context: Any) -> dict[str, Any]:
    size = int(event["size"])
    bucket, key = os.environ["BENCH_OFFLOAD_S3_BUCKET"], f"claim-check/{uuid.uuid4().hex}"
    _s3().put_object(Bucket=bucket, Key=key, Body=payload(size).encode())
    return {"claim": {"bucket": bucket, "key": key}, "size": size}


def s3_read(event: dict[str, Any], context: Any) -> dict[str, Any]:
    claim = event["data"]["claim"]
    blob = _s3().get_object(Bucket=claim["bucket"], Key=claim["key"])["Body"].read().decode()
    return {"size": len(blob), "intact": len(blob) == int(event["data"]["size"])}
