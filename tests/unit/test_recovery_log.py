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
from storage_functions.runtime._log import LogState, ManifestError, consistent, log_key, replay, snapshot_key


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
        node, snap = lg.seal(list(held.values()))  # type: ignore[misc]
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
