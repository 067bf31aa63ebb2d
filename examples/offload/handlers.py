"""Handlers of the offload examples: plain Lambda handlers with ``@sdk.offload``.

Each state machine's Task ``offload-<name>`` runs ``<name>`` here (``funcsion offload run``
maps ``offload-produce`` to ``produce``). A result value larger than the threshold (64 KiB)
leaves the handler as a reference; a reference in a handler's input arrives as its value.
Nothing else changes in a handler: it takes and returns JSON-like values (and ``bytes``,
which Lambda alone could not return).
"""

from __future__ import annotations

import hashlib
import json
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


# -- map_items: a list too large for the state, handed to the Map as chunks (issue 34 item 4) ------
def item(i: int) -> dict[str, Any]:
    """Item ``i`` of ``list_items``' list (the test recomputes them)."""
    return {"i": i, "text": f"item {i}"}


def chunk_digest(items: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(items, separators=(",", ":")).encode()).hexdigest()


@sdk.offload
def list_items(event: dict[str, Any], context: Any) -> Any:
    # 50,000 items are ~1.6 MB of JSON, past the 256 KiB state: the Map gets chunk references
    return sdk.offload_items(item(i) for i in range(int(event.get("count", 50_000))))


@sdk.offload
def process(event: dict[str, Any], context: Any) -> dict[str, Any]:
    chunk = event["item"]          # one chunk: a list of consecutive items
    return {"first": chunk[0]["i"], "n": len(chunk), "sum": sum(x["i"] for x in chunk),
            "sha256": chunk_digest(chunk)}


@sdk.offload
def aggregate(event: dict[str, Any], context: Any) -> dict[str, Any]:
    parts = sorted(event["results"], key=lambda r: r["first"])
    digest = hashlib.sha256("".join(p["sha256"] for p in parts).encode()).hexdigest()
    return {"chunks": len(parts), "items": sum(p["n"] for p in parts), "sum": sum(p["sum"] for p in parts),
            "sha256": digest}
