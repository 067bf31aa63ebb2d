"""Storage-function runtime pieces without sockets: billing-tick exit rule,
block memory, insertion-log chain; and the object trailer format."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from storage_functions.daemon import ObjectTable
from storage_functions.daemon._objects import Stripe, trailer
from storage_functions.runtime import BlockMemory, LogState, MemoryFull, leave_at, node_hash


def test_a_function_spins_only_after_latency_bound_requests() -> None:
    """Busy-polling after small PUTs and hinted GETs (the next small request does not pay a
    sleeping CPU's wake-up); never after a coded object's chunks or an unhinted GET."""
    from storage_functions.protocol import Frame, Op
    from storage_functions.runtime._handler import SPIN_PUT_MAX, latency_bound

    def frame(op: int, b: int = 0, paylen: int = 0) -> Frame:
        return Frame(op, 0, 0, "k", {}, 0, 0, b, paylen)

    assert latency_bound(frame(Op.GET, b=1)) and not latency_bound(frame(Op.GET, b=0))
    assert latency_bound(frame(Op.PUT, paylen=4096)) and latency_bound(frame(Op.PUT, paylen=SPIN_PUT_MAX))
    assert not latency_bound(frame(Op.PUT, paylen=SPIN_PUT_MAX + 1))  # e.g. a 1 MiB object's chunk
    assert not latency_bound(frame(Op.DEL)) and not latency_bound(frame(Op.PING))


def test_leave_at_waits_idle_then_rounds_up_to_the_billing_tick() -> None:
    assert leave_at(0.0, 0.0, 1.0, 0.0, 0.0) == 1.0
    assert leave_at(0.0, 0.05, 0.1, 0.1, 0.002) == pytest.approx(0.198)
    assert leave_at(0.0, 0.0, 0.1, 0.1, 0.002) == pytest.approx(0.1)
    assert leave_at(0.0, 0.0, 5.0, 0.1, 0.0, hard_deadline=2.0) == 2.0


def test_block_memory_writes_in_place_and_frees_blocks() -> None:
    m = BlockMemory(1024, 4096)
    e, views = m.reserve("a", 0, 1000, 100, 0)
    assert [len(v) for v in views] == [24, 76]
    views[0][:] = b"x" * 24
    views[1][:] = b"y" * 76
    m.commit(e)
    assert m.used() == 2048
    got = m.get("a")
    assert got is not None and b"".join(bytes(v) for v in got[1]) == b"x" * 24 + b"y" * 76
    assert m.delete("a") and m.used() == 0
    with pytest.raises(MemoryFull):
        m.reserve("big", 0, 0, 5000, 0)


def test_page_sized_blocks_are_populated_mappings_and_outlive_their_views() -> None:
    import mmap

    m = BlockMemory(1 << 16, 1 << 20)
    e, views = m.reserve("a", 0, 100, 1 << 16, 7)
    assert isinstance(m.blocks[0], mmap.mmap) and bytes(m.blocks[1]) == bytes(1 << 16)  # zeroed
    payload = bytes(range(256)) * 256
    views[0][:] = payload[:len(views[0])]
    views[1][:] = payload[len(views[0]):]
    m.commit(e)
    got = m.get("a")
    assert got is not None and b"".join(bytes(v) for v in got[1]) == payload
    assert m.delete("a") and m.used() == 0
    assert b"".join(bytes(v) for v in got[1]) == payload  # a reply still sending from it keeps it mapped


def test_insertion_log_chains_hashes_and_counts_puts() -> None:
    lg = LogState("sion-0")
    assert lg.seal([]) is None
    lg.record_put("1/0/0/k", 0, 0, 10, 123)
    node1, snap1 = lg.seal([["1/0/0/k", 0, 0, 10, 123]], snapshot_every=1)  # type: ignore[misc]
    lg.record_del("1/0/0/k")
    lg.record_put("1/0/1/k", 0, 10, 10, 5)
    node2, snap2 = lg.seal([], snapshot_every=1)  # type: ignore[misc]
    assert (node1["term"], node2["term"]) == (1, 2)
    assert node2["prev"] == node1["hash"] == node_hash(node1)
    assert node2["diff_rank"] == 2 and snap2["term"] == 2 and snap2["hash"] == node2["hash"]
    json.dumps(node2)


def test_versions_and_trailer() -> None:
    t = ObjectTable()
    a, b = t.begin("k"), t.begin("k")
    assert (a.version, b.version) == (1, 2)
    assert t.latest("k") is None
    a.state = b.state = "ready"
    assert t.latest("k") is b and t.latest("k", 1) is a
    b.stripes.append(Stripe(1, 0, 3, 3, 3, [zlib.crc32(b"abc")], [None]))
    raw = trailer(b)
    n, magic = struct.unpack("!I4s", raw[-8:])
    assert magic == b"SION" and json.loads(raw[-8 - n:-8])["version"] == 2


def test_a_put_over_a_dead_entry_supersedes_it_and_a_recovery_there_is_refused() -> None:
    """The allocator reuses a freed entry's space (a hole) before the function heard of the
    drop: the new PUT wins and reports the dead key; restoring the dead chunk is refused."""
    from storage_functions.runtime._memory import BlockMemory, Overlap

    mem = BlockMemory(4096, 1 << 20)
    for key, off in (("old", 0), ("next", 1000)):
        e, views = mem.reserve(key, 0, off, 1000, 0)
        mem.fill(e, views, bytes([len(key)]) * 1000)
    e, views = mem.reserve("new", 0, 500, 400, 0)  # inside "old"'s freed space
    mem.fill(e, views, b"n" * 400)
    assert mem.take_superseded() == ["old"] and mem.get("old") is None and mem.take_superseded() == []
    assert bytes(mem.get("next")[1][0]) == bytes([4]) * 1000  # the neighbour is untouched
    with pytest.raises(Overlap, match="new"):
        mem.reserve("old", 0, 0, 1000, 0, supersede=False)  # a recovery of the dead chunk
    assert bytes(mem.get("new")[1][0]) == b"n" * 400
    e, views = mem.reserve("fresh", 0, 2000, 100, 0, supersede=False)  # free space: fine
    mem.fill(e, views, b"f" * 100)
    mem.delete("new")
    e, views = mem.reserve("old", 0, 0, 1000, 0, supersede=False)  # the place is free again
    mem.abort(e)
    assert sorted(mem.index) == ["fresh", "next"] and mem.used() == 4096
