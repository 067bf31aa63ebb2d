"""Lifetime-aware allocation: slices in pooled blocks, whole blocks with PlaceChunk,
edge cases (exactly one block, zero bytes, exhaustion, spill), capacity registration
(idempotent, updates, out-of-range refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import errors as E
from metadata_server._allocator import Solo
from metadata_server import Allocator, CoreDriver, Placed, ReleaseFunction, ScaleOut, reply


def test_slices_fill_freeze_and_free_when_fragment_equals_offset():
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    a.register("s0", 3)
    p1 = a.allocate(60, "r", 0)
    p2 = a.allocate(30, "r", 0)
    assert p1.kind == p2.kind == "slice"
    assert (p1.extents[0].block, p1.extents[0].offset) == (p2.extents[0].block, 0) and p2.extents[0].offset == 60
    p3 = a.allocate(20, "r", 0)                       # does not fit: active block frozen, new active
    assert p3.extents[0].block != p1.extents[0].block
    pool = a.pools[("r", 0)]
    assert len(pool.frozen) == 1 and pool.active.offset == 20
    assert a.free(p1) == [] and a.allocated_bytes == 200      # fragment 60 < offset 90
    a.free(p2)                                                # fragment == offset: block free
    assert a.allocated_bytes == 100 and not pool.frozen
    assert a.free(p3) == ["s0"]                               # last block of s0: it may leave the pool
    assert a.allocated_bytes == 0 and not a.pools
    a.validate()


def test_a_pools_remainder_rides_in_a_block_another_pool_holds():
    """Slice packing: a lifetime pool takes a block of its own only when no open block of
    the run has room; its objects go to their own pool's block first, and a shared block
    frees when its last entry does, whichever pool carved it."""
    a = Allocator(block_size=100)
    a.register("s0", 4)
    short = a.allocate(10, "r", 0)
    long = a.allocate(10, "r", 3)
    assert (long.extents[0].block, long.extents[0].offset) == (short.extents[0].block, 10)   # shared
    assert a.allocated_bytes == 100 and a.new_blocks(80, "r", 3) == 0 and a.new_blocks(81, "r", 3) == 1
    big = a.allocate(85, "r", 3)                              # no room anywhere: the long pool's own block
    assert big.extents[0].block != short.extents[0].block and a.allocated_bytes == 200
    later = a.allocate(5, "r", 3)                             # its own pool's block first
    assert later.extents[0].block == big.extents[0].block
    a.free(short)
    assert a.allocated_bytes == 200                           # long still holds the shared block
    a.free(long)
    assert a.allocated_bytes == 100
    a.validate()
    a.free(big)
    a.free(later)
    assert a.allocated_bytes == 0 and not a.pools and not a.open
    a.validate()


def test_a_shared_block_is_chosen_by_lifetime_then_fullness():
    a = Allocator(block_size=100)
    a.register("s0", 8)
    blocks = {k: a.allocate(size, "r", k).extents[0].block for k, size in ((1, 60), (5, 70), (9, 50), (2, 55))}
    assert len(set(blocks.values())) == 4                     # none fitted the others' rest
    assert a.allocate(20, "r", 4).extents[0].block == blocks[5]   # the nearest longer-lived pool
    assert a.allocate(20, "r", 7).extents[0].block == blocks[9]
    assert a.allocate(20, "r", 20).extents[0].block == blocks[9]  # none longer: the nearest shorter
    assert a.allocate(30, "r", "adhoc").extents[0].block == blocks[1]   # no order: the fullest with room
    a.validate()


def test_runs_and_solo_objects_share_no_block():
    a = Allocator(block_size=100)
    a.register("s0", 8)
    mine = a.allocate(10, "r1", 0)
    other = a.allocate(10, "r2", 0)
    solo = a.allocate(10, "r1", Solo("x"))
    after = a.allocate(10, "r1", Solo("y"))
    assert len({p.extents[0].block for p in (mine, other, solo, after)}) == 4
    assert a.allocate(10, "r1", 0).extents[0].block == mine.extents[0].block   # not into a solo block
    assert a.new_blocks(10, "r1", Solo("z")) == 1
    a.validate()


def test_solo_chunks_take_a_block_each():
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for i in range(3):
        a.register(f"s{i}", 4)
    p = a.allocate(120, "r", Solo("a"))                       # 3 chunks of 60 bytes
    q = a.allocate(120, "r", Solo("b"))
    assert a.allocated_bytes == 600                           # 6 chunks, 6 blocks
    assert {(e.function, e.block) for e in p.extents}.isdisjoint({(e.function, e.block) for e in q.extents})
    a.free(p)
    assert a.allocated_bytes == 300
    a.validate()


def test_object_exactly_one_block():
    a = Allocator(block_size=100)
    a.register("s0", 2)
    small = a.allocate(10, "r", 0)
    whole = a.allocate(100, "r", 0)
    assert whole.kind == "slice" and whole.extents[0].offset == 0 and whole.extents[0].length == 100
    assert a.blocks_needed(100) == 1
    a.free(whole)
    assert a.allocated_bytes == 100
    a.free(small)
    assert a.allocated_bytes == 0
    a.validate()


def test_zero_byte_object_takes_nothing():
    a = Allocator(block_size=100)
    p = a.allocate(0, "r", 0)
    assert p.tier == "empty" and p.extents == () and a.blocks_needed(0) == 0
    assert a.free(p) == [] and a.allocated_bytes == 0


def test_large_object_chunks_on_distinct_functions():
    a = Allocator(block_size=100, data_chunks=4, parity_chunks=2)
    for i in range(8):
        a.register(f"s{i}", 2)
    p = a.allocate(1000, "r")                  # chunk 250 B -> 3 blocks per chunk: no function has 3
    assert p is None
    p = a.allocate(700, "r")                   # chunk 175 -> 2 blocks per chunk
    assert p.kind == "blocks" and p.chunk_size == 175 and (p.data_chunks, p.parity_chunks) == (4, 2)
    by_chunk: dict[int, set[str]] = {}
    for e in p.extents:
        by_chunk.setdefault(e.chunk, set()).add(e.function)
    assert len(by_chunk) == 6 and all(len(f) == 1 for f in by_chunk.values())
    assert len({next(iter(f)) for f in by_chunk.values()}) == 6          # distinct functions
    assert sum(e.length for e in p.extents) == 6 * 175
    assert a.blocks_needed(700) == 12 and a.allocated_bytes == 1200
    # chunk 0 probes s0, then s6 (stride n=6); s0..s5 are full now
    q = a.allocate(50, "r", 0)                 # a slice goes to the first function with a free block
    assert q.extents[0].function == "s6"
    assert a.allocate(201, "r") is None         # only s6, s7 have room: PlaceChunk needs 6 functions
    idle = a.free(p)
    assert set(idle) == {f"s{i}" for i in range(6)}
    a.validate()


def test_place_chunk_skips_full_function_by_whole_groups():
    a = Allocator(block_size=10, data_chunks=2, parity_chunks=1)
    for i in range(6):
        a.register(f"s{i}", 1)
    a.allocate(10, "r", 0)                     # s0 full
    p = a.allocate(20, "r")                    # chunk0: s0 full -> s3 (one group on); chunk1: s1; chunk2: s2
    assert sorted((e.chunk, e.function) for e in p.extents) == [(0, "s3"), (1, "s1"), (2, "s2")]


def test_unregister_waits_for_blocks_in_use():
    a = Allocator(block_size=100)
    a.register("s0", 2)
    p = a.allocate(10, "r", 0)
    assert a.unregister("s0") == 1 and a.free_blocks == 0
    assert a.allocate(10, "r", 1) is None
    assert a.free(p) == [] and "s0" not in a.functions
    assert a.unregister("nope") == 0
    a.validate()


def test_pool_exhaustion_scales_out_and_falls_back_to_cos(fig9_path: Path):
    d = CoreDriver(block_size=100)
    key = d.register(fig9_path)
    d.capacity("s0", 1)
    r = d.start(key)
    d.put(r, "", "in1", 80)
    out = d.begin(r, "", "in2", 80)                  # no block left
    assert reply(out, Placed).placement.tier == "cos"
    so = reply(out, ScaleOut)
    assert so.blocks == 1 and "in2" in so.reason and so.seq > 0
    assert d.state.runs[r].counters["cos_fallback"] == 1
    d.finish(r, "", "in2")
    d.capacity("s1", 4)                              # the daemon scaled out
    assert reply(d.begin(r, "F1", "a", 50), Placed).placement.extents[0].function == "s1"
    d.state.validate_state()
    d.end(r)
    d.state.validate_state()
    assert d.state.runs[r].cos_bytes == 0


def test_memory_budget_spills_to_cos_never_fails(fig9_path: Path):
    d = CoreDriver(block_size=100, memory_budget=100)
    key = d.register(fig9_path)
    d.capacity("s0", 10)
    r = d.start(key)
    d.put(r, "", "in1", 90)
    out = d.begin(r, "", "in2", 20)                  # would need a second block: past the budget
    assert reply(out, Placed).placement.tier == "cos"
    assert not any(isinstance(i, ScaleOut) for i in out)
    assert d.state.counters["spilled_to_cos"] == 1
    d.finish(r, "", "in2")
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 0)                          # zero bytes: no budget needed
    out = d.put(r, "F2", "b2", 0)
    assert any(getattr(i, "object", None) == "in2" for i in out)      # COS object freed by commit too
    d.state.validate_state()
    assert d.state.runs[r].cos_bytes == 0


def test_release_function_when_its_last_block_frees(fig9_path: Path):
    d = CoreDriver(block_size=100)
    key = d.register(fig9_path)
    d.capacity("s0", 2)
    r = d.start(key)
    d.put(r, "", "in1", 10)
    out = d.delete(r, "in1")
    assert reply(out, ReleaseFunction).function == "s0"


def test_bad_allocator_arguments():
    with pytest.raises(ValueError):
        Allocator(block_size=0)
    with pytest.raises(ValueError):
        Allocator().allocate(-1, "r")


# -- capacity registration: idempotent per function, an update when it differs -----------
def test_registering_the_same_capacity_again_changes_nothing():
    a = Allocator(block_size=100)
    assert a.register("s0", 4) == 4
    p = a.allocate(10, "r", 0)
    before = (a.total_blocks, a.free_blocks, list(a.functions["s0"].free))
    for _ in range(3):                                  # a stack starting again over its journal
        assert a.register("s0", 4) == 4
    assert (a.total_blocks, a.free_blocks, list(a.functions["s0"].free)) == before == (4, 3, [3, 2, 1])
    a.free(p)
    a.validate()


def test_a_different_capacity_updates_the_function():
    a = Allocator(block_size=100)
    a.register("s0", 2)
    a.register("s1", 2)
    assert a.register("s0", 5) == 5 and a.total_blocks == 7
    assert list(a.functions) == ["s0", "s1"]            # keeps its place in PlaceChunk's order
    placed = [a.allocate(100, "r", 0) for _ in range(4)]
    assert [p.extents[0].block for p in placed] == [0, 1, 2, 3] and {p.extents[0].function for p in placed} == {"s0"}
    assert a.register("s0", 2) == 2                     # shrink: free blocks past the end go now ...
    assert a.free_blocks == 2 and a.total_blocks == 6   # ... blocks 2, 3 in use stay until freed
    a.validate()
    a.free(placed[3])
    assert a.total_blocks == 5 and a.functions["s0"].free == []
    a.free(placed[0])
    assert a.functions["s0"].free == [0]
    a.validate()


def test_registering_again_after_unregister_keeps_block_numbers_in_use():
    a = Allocator(block_size=100)
    a.register("s0", 3)
    p = a.allocate(10, "r", 0)
    assert a.unregister("s0") == 1
    assert a.register("s0", 3) == 3 and a.free_blocks == 2 and a.total_blocks == 3
    q = [a.allocate(100, "r", 1) for _ in range(2)]
    assert sorted(x.extents[0].block for x in q) == [1, 2] and a.allocate(100, "r", 2) is None
    a.free(p)
    assert a.total_blocks == 3 and a.free_blocks == 1    # capacity stays 3, not 3 + reused numbers
    a.validate()


@pytest.mark.parametrize("function, blocks, why", [
    ("s0", 0, "blocks must be 1 to 1,048,576"), ("s0", -5, "blocks must be 1 to"),
    ("s0", (1 << 20) + 1, "got 1,048,577"), ("s0", (1 << 31) - 1, "blocks must be 1 to"),
    ("", 4, "name of 1 to 256 characters"), ("f" * 257, 4, "got 257"),
])
def test_out_of_range_capacity_is_refused(function, blocks, why):
    d = CoreDriver(block_size=1000)
    d.capacity("s0", 8)
    with pytest.raises(E.InvalidRequest, match=why):
        d.capacity(function, blocks)
    assert d.state.allocator.total_blocks == 8
    with pytest.raises(ValueError):
        Allocator().register("s1", 0)
    d.state.validate_state()


def test_coded_chunks_get_contiguous_runs_sized_by_the_clients_chunk_bytes():
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for f in ("s0", "s1", "s2"):
        a.register(f, 6)
    hole = a.allocate(50, "r", 0)                      # s0 block 0 half taken by a slice
    p = a.allocate(500, "r", 0, chunk_bytes=290)       # 3 blocks per chunk (290 > 250 = ceil(500/2))
    assert p.chunk_size == 290
    for i in range(3):
        ext = [e for e in p.extents if e.chunk == i]
        assert len({e.function for e in ext}) == 1
        assert [e.block for e in ext] == list(range(ext[0].block, ext[0].block + len(ext)))
        assert sum(e.length for e in ext) == 290
    chunk0 = [(e.block, e.offset, e.length) for e in p.extents if e.chunk == 0]
    assert hole.extents[0].function == "s0" and chunk0 == [(0, 50, 50), (1, 0, 100), (2, 0, 100), (3, 0, 40)]
    assert a.allocated_bytes == 4 * 100 + 2 * 300      # on from the slice's tail; s1, s2: fresh runs
    a.free(hole)
    assert a.allocated_bytes == 1000                   # the chunk still holds the block's tail
    a.free(p)
    assert a.allocated_bytes == 0
    a.validate()


def test_no_contiguous_run_means_no_room_even_with_enough_free_blocks():
    a = Allocator(block_size=100, data_chunks=1, parity_chunks=1)
    a.register("s0", 4)
    a.register("s1", 4)
    slices = [a.allocate(100, ("r", i), 0) for i in range(8)]   # every block as a slice of its own pool
    a.free(slices[0])
    a.free(slices[2])                                            # s0: blocks 0 and 2 free, not adjacent
    a.free(slices[4])
    a.free(slices[5])                                            # s1: blocks 0 and 1 free
    assert a.allocate(150, "big", 0, chunk_bytes=150) is None    # chunk 0 (2 blocks) finds no run on s0
    a.validate()


def test_implausible_chunk_bytes_are_refused():
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    a.register("s0", 100)
    with pytest.raises(ValueError, match="implausible"):
        a.allocate(500, "r", 0, chunk_bytes=100)                # less than the payload
    with pytest.raises(ValueError, match="implausible"):
        a.allocate(500, "r", 0, chunk_bytes=10_000)             # would reserve far more than needed


def test_chunks_of_one_block_or_less_are_packed_per_function_and_pool():
    """A coded object whose chunks are smaller than a block takes slices of per-function
    chunk pools, not a whole block per chunk: two such objects of one pool share blocks."""
    a = Allocator(block_size=100, data_chunks=4, parity_chunks=2)
    fns = [f"s{i}" for i in range(6)]
    for f in fns:
        a.register(f, 4)
    assert a.new_blocks(160, "r", 0) == 6
    p = a.allocate(160, "r", 0)                        # chunk 40 <= one block
    assert a.new_blocks(160, "r", 0) == 0              # the next fits p's blocks
    q = a.allocate(160, "r", 0)
    assert p.kind == q.kind == "blocks" and p.chunk_size == 40 and len(p.extents) == 6
    assert [(e.function, e.chunk, e.offset, e.length) for e in p.extents] == \
        [(f, i, 0, 40) for i, f in enumerate(fns)]
    assert [(e.function, e.block, e.offset) for e in q.extents] == \
        [(e.function, e.block, 40) for e in p.extents]   # after p's chunk, in the same blocks
    assert a.allocated_bytes == 600                    # 6 blocks for 480 coded bytes, not 12
    assert a.new_blocks(160, "r", 0) == 6              # a third does not fit: a block per chunk
    assert a.new_blocks(160, "r", 5) == 6
    other = a.allocate(160, "r", 5)                    # another lifetime: on from the shared blocks' tails
    assert [(e.block, e.offset, e.length) for e in other.extents] == [(0, 80, 20), (1, 0, 20)] * 6
    assert a.free(p) == [] and a.allocated_bytes == 1200  # q still holds the shared blocks
    a.validate()
    assert a.free(q) == [] and a.allocated_bytes == 1200  # and other's heads
    assert sorted(a.free(other)) == fns
    assert a.allocated_bytes == 0 and not a.pools
    a.validate()


def test_packed_chunk_probes_past_a_full_function_and_is_all_or_nothing():
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for i in range(6):
        a.register(f"s{i}", 1)
    a.allocate(100, "r", 0)                            # s0's only block, a slice
    p = a.allocate(150, "r", 1)                        # chunk 75: s0 full -> s3 (one stride on)
    assert sorted((e.chunk, e.function) for e in p.extents) == [(0, "s3"), (1, "s1"), (2, "s2")]
    q = a.allocate(40, "x", 0)                         # s4's block
    assert q.extents[0].function == "s4"
    before = (a.allocated_bytes, dict(a.owner_blocks))
    assert a.allocate(150, "r", 7) is None             # chunk 1 finds s1 and s4 taken: nothing placed
    assert (a.allocated_bytes, a.owner_blocks) == before and a.new_blocks(150, "r", 7) == 3
    a.validate()


def test_a_packed_chunk_continues_into_the_next_block_when_it_is_free():
    """Chunks of 60 in blocks of 100: the second starts at 60 and runs on into block+1 of
    the same function (one contiguous entry), so no block's tail is left empty."""
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for f in ("s0", "s1", "s2"):
        a.register(f, 3)
    p = a.allocate(120, "r", 0)                        # chunk 60
    q = a.allocate(120, "r", 0)
    for e in p.extents:
        ext = [x for x in q.extents if x.chunk == e.chunk]
        assert [(x.function, x.block, x.offset, x.length) for x in ext] == \
            [(e.function, e.block, 60, 40), (e.function, e.block + 1, 0, 20)]
    assert a.allocated_bytes == 600 and a.new_blocks(120, "r", 0) == 0   # 20 + 60 fits block+1
    a.free(p)                                          # the first blocks still hold q's heads
    assert a.allocated_bytes == 600
    assert sorted(a.free(q)) == ["s0", "s1", "s2"] and a.allocated_bytes == 0 and not a.pools
    a.validate()


def test_a_chunk_after_an_exactly_full_block_starts_a_block_of_its_own():
    a = Allocator(block_size=100, data_chunks=4, parity_chunks=2)
    for i in range(6):
        a.register(f"s{i}", 3)
    a.allocate(200, "r", 0)
    a.allocate(200, "r", 0)                            # two chunks of 50: every block exactly full
    p = a.allocate(200, "r", 0)
    assert all(e.length == 50 and e.offset == 0 and e.block == 1 for e in p.extents), p.extents
    a.validate()



def test_a_freed_span_of_a_held_block_is_filled_before_a_new_block():
    """Holes: an entry freed while its block is still held leaves a hole; the next entry
    that fits one goes there (the tightest fit) instead of taking a free block, so a block
    pinned by a long-lived entry does not hold dead bytes beside it. A hole that reaches
    the block's offset gives its bytes back to the rest; the block frees with its last entry."""
    a = Allocator(block_size=100)
    a.register("s0", 4)
    e1, e2, e3 = (a.allocate(30, "r", 0) for _ in range(3))           # 0-30, 30-60, 60-90 of block 0
    a.free(e1)
    a.free(e2)                                                          # one hole 0-60, merged
    blk = a.used[("s0", 0)]
    assert blk.holes == [(0, 60)] and blk.fragment == 60 and blk.offset == 90
    big = a.allocate(50, "r", 3)                                       # does not fit the rest (10): the hole
    assert (big.extents[0].block, big.extents[0].offset) == (0, 0) and a.allocated_bytes == 100
    assert a.new_blocks(10, "r", 0) == 0 and a.new_blocks(11, "r", 0) == 1
    a.validate()
    a.free(e3)                                                          # merged with 50-60, it reaches the offset
    assert blk.offset == 50 and blk.holes == [] and blk.fragment == 0
    a.validate()
    a.free(big)
    assert a.allocated_bytes == 0 and not a.holed and not a.pools
    a.validate()


def test_a_chunk_fills_a_hole_of_its_function_and_solo_blocks_share_none():
    """A packed chunk takes the tightest hole on its function before running on into free
    blocks; ``holes=False`` (the oracle) and ``Solo`` keys never reuse a freed span."""
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for i in range(3):
        a.register(f"s{i}", 6)
    first = a.allocate(120, "r", 1)                                    # chunks of 60 at 0 of block 0
    second = a.allocate(30, "r", 1)                                    # a slice behind the chunk on s0
    assert (second.extents[0].function, second.extents[0].block, second.extents[0].offset) == ("s0", 0, 60)
    a.free(first)                                                       # s1, s2 free; s0 keeps a hole 0-60
    assert a.allocated_bytes == 100 and a.used[("s0", 0)].holes == [(0, 60)]
    assert a.new_blocks(110, "r", 1, holes=False) == 3 and a.new_blocks(110, "r", 1) == 2
    again = a.allocate(110, "r", 1)                                    # chunks of 55: s0's in the hole
    assert {(e.function, e.block, e.offset) for e in again.extents if e.function == "s0"} == {("s0", 0, 0)}
    a.validate()
    solo = a.allocate(3, "r", Solo("x"))
    assert solo.extents[0].block != 0
    a.free(second)
    a.free(again)
    a.free(solo)
    assert a.allocated_bytes == 0 and not a.holed
    a.validate()


def test_with_a_grain_the_model_counts_the_grains_extents_lie_on():
    """``memory_grain``: what the storage functions hold is the grains entries lie on, per
    owner, while placement still goes by blocks (the same extents as without a grain)."""
    whole, grained = Allocator(block_size=1000, data_chunks=2, parity_chunks=1), \
        Allocator(block_size=1000, data_chunks=2, parity_chunks=1, grain=100)
    for a in (whole, grained):
        a.register("s0", 4)
        a.register("s1", 4)
        a.register("s2", 4)
    got = {}
    for a in (whole, grained):
        got[id(a)] = [a.allocate(10, "r", 0), a.allocate(150, "r", 0), a.allocate(40, "q", 0),
                      a.allocate(1500, "r", 0)]
    assert [p.extents for p in got[id(whole)]] == [p.extents for p in got[id(grained)]]
    p1, p2, p3, p4 = got[id(grained)]
    # r: 10 B at 0 + 150 B at 10 -> grains 0-1 of one block; q: 40 B in a block of its own -> 1;
    # 1500 B -> 3 chunks of 750 B, one per function -> 8 grains each (whatever their offsets)
    r_units = {(e.function, u) for p in (p1, p2, p4) for e in p.extents
               for u in range((e.block * 1000 + e.offset) // 100, (e.block * 1000 + e.offset + e.length - 1) // 100 + 1)}
    assert grained.owner_bytes("r") == 100 * len(r_units) and grained.owner_bytes("q") == 100
    assert grained.allocated_bytes == grained.owner_bytes("r") + 100 < whole.allocated_bytes
    grained.free(p1)
    assert grained.owner_bytes("r") == 100 * len(r_units)      # grain 0 still holds p2's first bytes
    for p in (p2, p4, p3):
        grained.free(p)
    assert grained.allocated_bytes == 0 and not grained.grains.functions and not grained.grains.owners
