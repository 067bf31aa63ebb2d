"""Reading a storage function's insertion log back from COS (SION Sec. 5.5.1):
its last snapshot plus the log nodes after it, checked along the hash chain
against the daemon's last report (``runtime._log.replay``), and what they say
the function held. Covers the COS reads and parsing chunk keys; not what to
do with the list (``_recovery``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..exceptions import COSNotFound
from ..runtime._log import ManifestError, log_key, replay, snapshot_key

__all__ = ["Manifest", "ManifestError", "read_manifest", "parse_chunk_key"]

#: log nodes read past the snapshot at most (a function seals one per invocation)
MAX_NODES = 10_000


@dataclass(frozen=True, slots=True)
class Manifest:
    term: int  # of the last node the chain reached
    chunks: dict[str, list[Any]]  # chunk key -> [block, offset, length, crc]


def parse_chunk_key(ckey: str) -> tuple[str, int, int, int] | None:
    """``"{version}/{stripe}/{index}/{key}"`` -> (key, version, stripe, index), or None."""
    parts = ckey.split("/", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
        return None
    return parts[3], int(parts[0]), int(parts[1]), int(parts[2])


def _get_json(cos: Any, key: str) -> dict[str, Any] | None:
    try:
        raw = cos.get(key)
    except COSNotFound:
        return None
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ManifestError(f"{key}: not a JSON object")
    return doc


def read_manifest(cos: Any, prefix: str, name: str, term: int, hash_: str) -> Manifest:
    """What function ``name`` held by its log in ``cos``, checked against the daemon's
    last report (``term``, ``hash_``). Raises :class:`ManifestError` on a broken chain
    or a record that is not JSON."""
    try:
        snap = _get_json(cos, snapshot_key(prefix, name))
        start = min(int(snap.get("term", 0)), term) if snap is not None else 0
        nodes: list[dict[str, Any]] = []
        for t in range(start + 1, start + 1 + MAX_NODES):
            node = _get_json(cos, log_key(prefix, name, t))
            if node is None:
                break
            nodes.append(node)
    except ValueError as exc:  # json.JSONDecodeError included
        raise ManifestError(f"function {name}'s log in COS is unreadable: {exc}") from None
    chunks = replay(snap, nodes, term, hash_)
    last = nodes[-1]["term"] if nodes else (int(snap.get("term", 0)) if snap is not None else 0)
    return Manifest(int(last), chunks)
