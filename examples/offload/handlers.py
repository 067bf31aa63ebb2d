"""Handlers of the offload examples: plain Lambda handlers with ``@sdk.offload``.

Each state machine's Task ``offload-<name>`` runs ``<name>`` here (``funcsion offload run``
maps ``offload-produce`` to ``produce``). A result value larger than the threshold (64 KiB)
leaves the handler as a reference; a reference in a handler's input arrives as its value.
Nothing else changes in a handler: it takes and returns JSON-like values (and ``bytes``,
which Lambda alone could not return).
"""

from __future__ import annotations

import hashlib
import random
import zlib
from typing import Any

import sdk


def _blob(size: int, seed: int = 7) -> bytes:
    """``size`` bytes, the same on every attempt (a retried state writes what the first wrote)."""
    return random.Random(seed).randbytes(size)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- large_result / parallel_fanout ------------------------------------------------------
@sdk.offload
def produce(event: dict[str, Any], context: Any) -> dict[str, Any]:
    data = _blob(int(float(event.get("size_mb", 5)) * 1_000_000))
    return {"blob": data, "sha256": _digest(data), "size": len(data)}


@sdk.offload
def consume(event: dict[str, Any], context: Any) -> dict[str, Any]:
    data = event["data"]
    return {"size": len(data["blob"]), "intact": _digest(data["blob"]) == data["sha256"]}


@sdk.offload
def checksum(event: dict[str, Any], context: Any) -> dict[str, Any]:
    blob = event["data"]["blob"]
    return {"sha256": _digest(blob), "intact": _digest(blob) == event["data"]["sha256"]}


@sdk.offload
def compress(event: dict[str, Any], context: Any) -> dict[str, Any]:
    blob = event["data"]["blob"]
    packed = zlib.compress(blob, 1)
    return {"compressed": packed, "ratio": round(len(packed) / max(1, len(blob)), 4)}


@sdk.offload
def index(event: dict[str, Any], context: Any) -> dict[str, Any]:
    blob = event["data"]["blob"]
    return {"histogram": [blob.count(bytes((b,))) for b in range(0, 256, 32)]}


@sdk.offload
def merge(event: dict[str, Any], context: Any) -> dict[str, Any]:
    checks, packed, hist = event["parts"]
    return {"intact": checks["intact"], "compressed_bytes": len(packed["compressed"]),
            "histogram_total": sum(hist["histogram"])}


# -- catch_path -----------------------------------------------------------------------------
@sdk.offload
def fetch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    url = str(event.get("url", ""))
    data = _blob(1_000_000, seed=len(url))
    return {"blob": data, "url": url, "sha256": _digest(data)}


class TransformError(Exception):
    pass


@sdk.offload
def transform(event: dict[str, Any], context: Any) -> dict[str, Any]:
    data = event["data"]
    if "fail" in data["url"]:
        raise TransformError(f"cannot transform {data['url']}")
    return {"upper": data["blob"][:200_000].hex(), "sha256": data["sha256"]}


@sdk.offload
def store(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"key": event["transformed"]["sha256"][:16], "bytes": len(event["transformed"]["upper"])}


@sdk.offload
def recover(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"saved": len(event["data"]["blob"]), "error": event["error"].get("Error")}


# -- map_items (issue 34 item 4 will hand the Map an offloaded list; here items are small) -------
@sdk.offload
def list_items(event: dict[str, Any], context: Any) -> list[dict[str, Any]]:
    return [{"i": i, "text": f"item {i} " * 8} for i in range(int(event.get("count", 8)))]


@sdk.offload
def process(event: dict[str, Any], context: Any) -> dict[str, Any]:
    item = event["item"]
    return {"i": item["i"], "words": len(item["text"].split()), "pad": str(item["i"]) * 70_000}


@sdk.offload
def aggregate(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"items": len(event["results"]), "words": sum(r["words"] for r in event["results"])}
