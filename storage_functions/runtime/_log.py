"""Insertion log and snapshot of a storage function (SION Sec. 5.5.1): the
record formats, hash chaining and COS keys. Covers what is written; recovery
(reading them back, replaying, parallel recovery) is later work.

Per invocation that stored or deleted anything, the function seals one
*insertion-log node* and one *snapshot* and writes both to COS before it
leaves (JSON, UTF-8)::

    {prefix}/functions/{name}/log/{term:010d}.json
    {"format": "sion-insertion-log/1", "function": name, "term": 7,
     "prev": "<hash of node 6, '' for term 1>", "diff_rank": 42,
     "ops": [["put", chunk_key, block, offset, length, crc32],
             ["del", chunk_key]],
     "hash": "<blake2b-128 hex of this node without 'hash', canonical JSON>"}

    {prefix}/functions/{name}/snapshot.json   (overwritten each time)
    {"format": "sion-snapshot/1", "function": name, "term": 7,
     "hash": "<hash of node 7>", "diff_rank": 42,
     "chunks": [[chunk_key, block, offset, length, crc32], ...]}

``term`` counts sealed nodes; ``diff_rank`` counts every PUT since term 1
(deleted chunks included), as in the paper. A chunk key is
``"{version}/{stripe}/{index}/{object key}"``; the chunk bytes live in COS in
the daemon's object record for that key and version (see
``storage_functions.daemon._buffer``), not in the log. Recovery = latest
snapshot + the nodes with a larger term, checked along the hash chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LogState", "node_hash", "log_key", "snapshot_key"]


def node_hash(node: dict[str, Any]) -> str:
    body = {k: v for k, v in node.items() if k != "hash"}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def log_key(prefix: str, name: str, term: int) -> str:
    return f"{prefix}/functions/{name}/log/{term:010d}.json"


def snapshot_key(prefix: str, name: str) -> str:
    return f"{prefix}/functions/{name}/snapshot.json"


@dataclass
class LogState:
    """Term, hash chain and the ops of the current (unsealed) node."""

    name: str
    term: int = 0
    hash: str = ""
    diff_rank: int = 0
    ops: list[list[Any]] = field(default_factory=list)

    def record_put(self, key: str, block: int, offset: int, length: int, crc: int) -> None:
        self.ops.append(["put", key, block, offset, length, crc])
        self.diff_rank += 1

    def record_del(self, key: str) -> None:
        self.ops.append(["del", key])

    def seal(self, chunks: list[list[Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Close the current node; returns (node, snapshot) or None when the
        invocation changed nothing."""
        if not self.ops:
            return None
        node: dict[str, Any] = {
            "format": "sion-insertion-log/1", "function": self.name, "term": self.term + 1,
            "prev": self.hash, "diff_rank": self.diff_rank, "ops": self.ops,
        }
        node["hash"] = node_hash(node)
        self.term, self.hash, self.ops = node["term"], node["hash"], []
        snap = {"format": "sion-snapshot/1", "function": self.name, "term": self.term,
                "hash": self.hash, "diff_rank": self.diff_rank, "chunks": chunks}
        return node, snap
