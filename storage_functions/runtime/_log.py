"""Insertion log and snapshot of a storage function (SION Sec. 5.5.1): the
record formats, hash chaining and COS keys, the term/hash consistency check
an invocation makes (Sec. 5.5.1) and replaying a manifest (snapshot + later
nodes) checked along the hash chain. Pure: the COS reads are the caller's
(``storage_functions.daemon._manifest``).

Per invocation that left a chunk in memory that no sealed node lists, the
function seals one *insertion-log node* and writes it to COS before it leaves,
and every ``snapshot_every`` terms (and at the first seal of an instance that
continues a chain) a *snapshot* too (JSON, UTF-8)::

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
(deleted chunks included), as in the paper.

What a seal must guarantee (Sec. 5.5.1): before an invocation returns, every
chunk it stored that is still in memory is listed by a node in COS, so that a
lost instance's chunks can be read back from the log. What it need not write
(:func:`coalesce`, the seal policy): a chunk stored and deleted within one node
(nothing to recover: its object was freed; only its ``diff_rank`` count
stays), and a node of deletes alone (they are carried into the next node that
stores something; meanwhile recovery, which joins the log with the daemon's
table of live objects, never restores a freed chunk the log still lists). A
snapshot only shortens recovery's reading (the nodes after it), so it is
written every ``snapshot_every`` terms instead of at every seal, and at the
first seal of an instance that continues a chain, which replaces whatever
snapshot a lost instance left (its chain would not lead to the new instance's
nodes); a new chain's first node deletes the snapshot key instead (DELETE is
free; recovery then reads the chain from term 1). A chunk key is
``"{version}/{stripe}/{index}/{object key}"``; the chunk bytes live in COS in
the daemon's object record for that key and version (see
``storage_functions.daemon._buffer``), not in the log. Recovery = latest
snapshot + the nodes with a larger term, checked along the hash chain.

Failure detection: the daemon keeps the (term, hash, diff_rank) its
function last reported (HELLO, BYE, PUT replies) and passes them in every
invocation; the instance compares them with its own (:func:`consistent`). A
cold instance that replaced a reclaimed one has term 0 and diff_rank 0, so it
knows it lost its memory, then continues the daemon's chain
(:meth:`LogState.adopt`) so its nodes never overwrite the lost instance's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ManifestError

__all__ = ["LogState", "ManifestError", "coalesce", "consistent", "node_hash", "log_key", "replay", "snapshot_key",
           "SNAPSHOT_EVERY"]

#: a snapshot every this many terms (recovery reads the snapshot and at most this many nodes less one)
SNAPSHOT_EVERY = 16


def node_hash(node: dict[str, Any]) -> str:
    body = {k: v for k, v in node.items() if k != "hash"}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def log_key(prefix: str, name: str, term: int) -> str:
    return f"{prefix}/functions/{name}/log/{term:010d}.json"


def snapshot_key(prefix: str, name: str) -> str:
    return f"{prefix}/functions/{name}/snapshot.json"


def consistent(term: int, hash_: str, diff_rank: int, want_term: int, want_hash: str, want_diff: int) -> bool:
    """Is an instance whose log is at (term, hash_, diff_rank) the one the daemon last
    heard from at (want_*)? It may be ahead (it sealed after its last report), never
    behind, and at the same term its hash must match."""
    if term < want_term or diff_rank < want_diff:
        return False
    return term > want_term or hash_ == want_hash


def replay(snapshot: dict[str, Any] | None, nodes: list[dict[str, Any]], want_term: int,
           want_hash: str) -> dict[str, list[Any]]:
    """The chunks a function holds by its log: the snapshot's list with the ops of the
    nodes after it applied. ``nodes`` run with consecutive terms from
    ``min(snapshot term, want_term) + 1`` (0 without a snapshot) to the last one in
    COS. Each must carry its own hash and the previous one's, and the chain must pass
    through the snapshot and through (``want_term``, ``want_hash``), the daemon's last
    report (nodes sealed after it count too). Returns chunk key -> [block, offset,
    length, crc]. Raises :class:`ManifestError` naming the first break."""
    snap_term = int(snapshot.get("term", 0)) if snapshot is not None else 0
    known: dict[int, str] = {0: ""}
    if snapshot is not None:
        known[snap_term] = str(snapshot.get("hash", ""))
    if known.setdefault(want_term, want_hash) != want_hash:
        raise ManifestError(f"the snapshot's term {snap_term} has hash {known[want_term][:8]}, the daemon's "
                            f"{want_hash[:8] or '-'}")
    chunks: dict[str, list[Any]] = {}
    if snapshot is not None:
        for c in snapshot.get("chunks", []):
            chunks[str(c[0])] = list(c[1:5])
    term = min(snap_term, want_term)
    for node in nodes:
        t = node.get("term")
        if t != term + 1 or node_hash(node) != node.get("hash") or (term in known and node.get("prev") != known[term]):
            raise ManifestError(f"log node term {t!r} of {node.get('function')!r} does not continue term {term} "
                                f"(hash {known.get(term, '?')[:8] or '-'})")
        if t in known and known[t] != node["hash"]:
            raise ManifestError(f"log node term {t} has hash {node['hash'][:8]}, expected {known[t][:8] or '-'}")
        term = t
        known[term] = str(node["hash"])
        if term > snap_term:
            for op in node.get("ops", []):
                if op[0] == "put":
                    chunks[str(op[1])] = list(op[2:6])
                elif op[0] == "del":
                    chunks.pop(str(op[1]), None)
    if term < max(snap_term, want_term):
        raise ManifestError(f"the log stops at term {term}; the snapshot is at term {snap_term}, the daemon's "
                            f"report at term {want_term}")
    return chunks


def coalesce(ops: list[list[Any]]) -> list[list[Any]]:
    """The ops of an unsealed node with the same effect on a replay: the last op of each
    chunk key, in the order of those last ops (a put or a delete only touches its own key,
    so a chunk stored then deleted leaves its delete alone, and one deleted then stored
    again its put)."""
    last: dict[str, list[Any]] = {}
    for op in ops:
        key = str(op[1])
        last.pop(key, None)  # re-inserted: the order is that of the last ops
        last[key] = op
    return list(last.values())


@dataclass
class LogState:
    """Term, hash chain and the ops of the current (unsealed) node; ``snap_term`` is the
    term of the last snapshot this instance wrote (-1: none yet)."""

    name: str
    term: int = 0
    hash: str = ""
    diff_rank: int = 0
    ops: list[list[Any]] = field(default_factory=list)
    snap_term: int = -1
    seals: int = 0  # nodes sealed by this instance
    snapshots: int = 0  # snapshots among them
    deferred: int = 0  # seals that wrote nothing: the node would have held deletes alone

    def adopt(self, term: int, hash_: str, diff_rank: int) -> None:
        """Continue the chain the daemon knows (a new instance after a loss); its first
        seal writes a snapshot (the lost instance's may lead elsewhere)."""
        self.term, self.hash, self.diff_rank = term, hash_, max(self.diff_rank, diff_rank)
        self.snap_term = -1

    def record_put(self, key: str, block: int, offset: int, length: int, crc: int) -> None:
        self.ops.append(["put", key, block, offset, length, crc])
        self.diff_rank += 1

    def record_del(self, key: str) -> None:
        self.ops.append(["del", key])

    def seal(self, chunks: list[list[Any]] | Callable[[], list[list[Any]]],
             snapshot_every: int = SNAPSHOT_EVERY) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        """Close the current node: returns (node, snapshot or None), or None when there is
        nothing to write: no op, or (coalesced) deletes alone, which stay pending for the
        next node. ``chunks`` (or a callable giving them, asked only when a snapshot is
        due) lists what memory holds; a snapshot is due when ``snapshot_every`` terms
        passed since this instance's last one (1: at every seal) and at its first seal,
        unless that seal starts a new chain (term 1: nothing before it to skip; the
        caller deletes any snapshot an earlier chain under the name left, for free)."""
        if not self.ops:
            return None
        self.ops = coalesce(self.ops)
        if not any(op[0] == "put" for op in self.ops):
            self.deferred += 1
            return None
        node: dict[str, Any] = {
            "format": "sion-insertion-log/1", "function": self.name, "term": self.term + 1,
            "prev": self.hash, "diff_rank": self.diff_rank, "ops": self.ops,
        }
        node["hash"] = node_hash(node)
        self.term, self.hash, self.ops = node["term"], node["hash"], []
        self.seals += 1
        if self.snap_term < 0 and self.term == 1:
            self.snap_term = 0  # a new chain: recovery reads it from term 1, as from an empty snapshot
        if self.snap_term >= 0 and self.term - self.snap_term < max(1, snapshot_every):
            return node, None
        self.snap_term = self.term
        self.snapshots += 1
        snap = {"format": "sion-snapshot/1", "function": self.name, "term": self.term,
                "hash": self.hash, "diff_rank": self.diff_rank,
                "chunks": chunks() if callable(chunks) else chunks}
        return node, snap
