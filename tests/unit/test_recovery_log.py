"""SION's failure detection and the manifest recovery reads (Sec. 5.5.1): the term/hash/diff_rank
check an invocation makes, replaying a snapshot plus later log nodes along the hash chain, and
reading them back from a (local-directory) COS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage_functions.cos import open_cos
from storage_functions.daemon._manifest import parse_chunk_key, read_manifest
from storage_functions.runtime._handler import FunctionState, _Invocation
from storage_functions.runtime._log import (
    LogState,
    ManifestError,
    coalesce,
    consistent,
    log_key,
    node_hash,
    replay,
    snapshot_key,
)


def _chain(terms: int) -> tuple[LogState, list[dict[str, Any]], list[dict[str, Any]]]:
    """A function's log after ``terms`` invocations: chunk t put at term t, chunk 1 deleted at term 3."""
    lg = LogState("sion-0")
    nodes, snaps = [], []
    held: dict[str, list[Any]] = {}
    for t in range(1, terms + 1):
        lg.record_put(f"1/0/{t}/k", t, 0, 10, t)
        held[f"1/0/{t}/k"] = [f"1/0/{t}/k", t, 0, 10, t]
        if t == 3:
            lg.record_del("1/0/1/k")
            held.pop("1/0/1/k")
        node, snap = lg.seal(list(held.values()), snapshot_every=1)  # type: ignore[misc]
        nodes.append(node)
        snaps.append(snap)
    return lg, nodes, snaps


def test_the_consistency_check_catches_a_new_instance_even_before_its_first_seal() -> None:
    assert consistent(4, "h4", 9, 4, "h4", 9)
    assert consistent(5, "h5", 11, 4, "h4", 9)             # sealed after its last report: ahead is fine
    assert not consistent(0, "", 0, 4, "h4", 9)           # a cold instance that replaced a reclaimed one
    assert not consistent(4, "other", 9, 4, "h4", 9)
    assert not consistent(0, "", 0, 0, "", 3)             # killed before it ever sealed: diff_rank tells


def test_replay_applies_the_nodes_after_the_snapshot_along_the_chain() -> None:
    lg, nodes, snaps = _chain(5)
    got = replay(snaps[2], nodes[3:], lg.term, lg.hash)   # snapshot of term 3, nodes 4 and 5
    assert sorted(got) == ["1/0/2/k", "1/0/3/k", "1/0/4/k", "1/0/5/k"]
    assert got["1/0/4/k"] == [4, 0, 10, 4]
    assert replay(None, nodes, lg.term, lg.hash) == got   # from term 1, no snapshot
    # a snapshot sealed after the daemon's last report (term 3): nodes 4..5 only check the chain
    assert replay(snaps[4], nodes[3:], 3, nodes[2]["hash"]) == got


@pytest.mark.parametrize("breakage", ["tampered", "gap", "wrong hash", "short"])
def test_replay_refuses_a_broken_chain(breakage: str) -> None:
    lg, nodes, snaps = _chain(5)
    later = [dict(n) for n in nodes[3:]]
    want = lg.hash
    if breakage == "tampered":
        later[0]["ops"] = [["put", "1/0/9/k", 9, 0, 10, 9]]
    elif breakage == "gap":
        later = later[1:]
    elif breakage == "wrong hash":
        want = "0" * 32
    else:
        later = later[:1]
    with pytest.raises(ManifestError):
        replay(snaps[2], later, lg.term, want)


def test_read_manifest_from_cos(tmp_path: Path) -> None:
    cos = open_cos(f"file://{tmp_path}")
    lg, nodes, snaps = _chain(5)
    for n in nodes:
        cos.put(log_key("sion", "sion-0", n["term"]), json.dumps(n).encode())
    cos.put(snapshot_key("sion", "sion-0"), json.dumps(snaps[2]).encode())   # an older snapshot stayed
    m = read_manifest(cos, "sion", "sion-0", lg.term, lg.hash)
    assert m.term == 5 and sorted(m.chunks) == ["1/0/2/k", "1/0/3/k", "1/0/4/k", "1/0/5/k"]
    assert read_manifest(cos, "sion", "sion-9", 0, "").chunks == {}           # a function that never sealed
    cos.put(log_key("sion", "sion-0", 4), b"{not json")
    with pytest.raises(ManifestError, match="unreadable"):
        read_manifest(cos, "sion", "sion-0", lg.term, lg.hash)
    assert parse_chunk_key("3/1/2/r-1/a/b") == ("r-1/a/b", 3, 1, 2)
    assert parse_chunk_key("x/1/2/k") is None


def test_an_invocation_that_finds_its_log_behind_starts_empty_and_continues_the_chain() -> None:
    st = FunctionState("sion-0", 4096, 1 << 20)
    entry, views = st.memory.reserve("1/0/0/k", 0, 0, 10, 0)
    st.memory.commit(entry)
    st.log.record_put("1/0/0/k", 0, 0, 10, 0)
    st.log.seal([])
    same = _Invocation(st, {"term": st.log.term, "hash": st.log.hash, "diff_rank": st.log.diff_rank}, None)
    assert not same.lost and st.memory.index
    lost = _Invocation(st, {"term": 7, "hash": "h7", "diff_rank": 30}, None)   # the daemon knew a later instance
    assert lost.lost and not st.memory.index and st.losses == 1
    assert (st.log.term, st.log.hash, st.log.diff_rank) == (7, "h7", 30)        # its next node is term 8


def test_coalesce_keeps_the_last_op_of_each_chunk() -> None:
    ops = [["put", "a", 0, 0, 1, 1], ["put", "b", 0, 1, 1, 2], ["del", "a"], ["del", "c"], ["put", "c", 1, 0, 1, 3]]
    assert coalesce(ops) == [["put", "b", 0, 1, 1, 2], ["del", "a"], ["put", "c", 1, 0, 1, 3]]
    # the same replay either way
    lg = LogState("f")
    lg.record_put("c", 9, 9, 1, 9)
    node, snap = lg.seal([["c", 9, 9, 1, 9]], snapshot_every=1)  # type: ignore[misc]
    raw = {**node, "term": 2, "prev": node["hash"], "ops": ops}
    raw["hash"] = node_hash(raw)
    co = {**raw, "ops": coalesce(ops)}
    co["hash"] = node_hash(co)
    assert replay(snap, [raw], 2, raw["hash"]) == replay(snap, [co], 2, co["hash"]) == {"b": [0, 1, 1, 2],
                                                                                          "c": [1, 0, 1, 3]}


def test_a_seal_writes_nothing_for_chunks_freed_in_its_node_and_carries_deletes_alone() -> None:
    lg = LogState("f")
    lg.record_put("k1", 0, 0, 10, 1)
    lg.record_del("k1")                               # stored and freed within one node: nothing to recover
    assert lg.seal([]) is None and lg.ops == [["del", "k1"]] and lg.term == 0 and lg.diff_rank == 1
    lg.record_put("k2", 0, 0, 10, 2)
    node, snap = lg.seal([["k2", 0, 0, 10, 2]])  # type: ignore[misc]
    assert node["ops"] == [["del", "k1"], ["put", "k2", 0, 0, 10, 2]] and node["diff_rank"] == 2
    assert snap is None                               # a new chain: read from term 1, no snapshot yet
    lg.record_del("k2")
    assert lg.seal([]) is None and lg.deferred == 2   # deletes alone wait for the next node
    assert (lg.term, lg.seals, lg.snapshots) == (1, 1, 0)


def test_a_snapshot_every_n_terms_and_after_adopting_a_lost_instances_chain() -> None:
    lg = LogState("f")
    asked: list[int] = []

    def chunks() -> list[list[Any]]:
        asked.append(lg.term)
        return []

    snaps = []
    for t in range(1, 11):
        lg.record_put(f"k{t}", t, 0, 1, t)
        _, snap = lg.seal(chunks, snapshot_every=4)  # type: ignore[misc]
        snaps.append(snap is not None)
    assert [t for t, s in zip(range(1, 11), snaps) if s] == [4, 8] == asked   # chunks listed only then
    lg.adopt(30, "h30", 99)                            # a new instance on the chain: its first seal writes one
    lg.record_put("x", 0, 0, 1, 0)
    node, snap = lg.seal(chunks, snapshot_every=4)  # type: ignore[misc]
    assert node["term"] == 31 and node["prev"] == "h30" and snap is not None and snap["term"] == 31


def test_replay_of_a_lagging_snapshot_and_the_nodes_after_it(tmp_path: Path) -> None:
    """A snapshot written every 4 terms: recovery reads it and the nodes after it, along the chain."""
    cos = open_cos(f"file://{tmp_path}")
    lg = LogState("sion-0")
    held: dict[str, list[Any]] = {}
    for t in range(1, 8):
        lg.record_put(f"1/0/{t}/k", t, 0, 10, t)
        held[f"1/0/{t}/k"] = [f"1/0/{t}/k", t, 0, 10, t]
        if t == 6:
            lg.record_del("1/0/2/k")
            held.pop("1/0/2/k")
        node, snap = lg.seal(list(held.values()), snapshot_every=4)  # type: ignore[misc]
        cos.put(log_key("sion", "sion-0", node["term"]), json.dumps(node).encode())
        if snap is not None:
            cos.put(snapshot_key("sion", "sion-0"), json.dumps(snap).encode())
    assert json.loads(cos.get(snapshot_key("sion", "sion-0")))["term"] == 4
    m = read_manifest(cos, "sion", "sion-0", lg.term, lg.hash)
    assert m.term == 7 and m.chunks == {k: v[1:] for k, v in held.items()}
