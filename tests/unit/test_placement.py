"""PlaceChunk (SION Fig. 5) and the per-function block allocator: pure."""

from __future__ import annotations

import pytest

from storage_functions.daemon import BlockAllocator, PlaceChunk, PoolExhausted
from storage_functions.daemon._placement import BadPlacement

MiB = 1 << 20


def make(group: int = 4, hardcap: int = 8 * MiB, maxf: int = 16) -> PlaceChunk:
    return PlaceChunk(group_size=group, hardcap=hardcap, block_size=MiB, max_functions=maxf)


def test_first_object_scales_out_one_group_and_uses_distinct_functions() -> None:
    pc = make()
    pl = pc.place([MiB // 2] * 4)
    assert pl.scaled_out == 4
    assert [p[0] for p in pl.places] == [0, 1, 2, 3]


def test_chunks_of_one_object_never_share_a_function() -> None:
    pc = make(group=4)
    for n in (1, 3, 4, 6, 4, 2):
        fns = [p[0] for p in pc.place([300_000] * n).places]
        assert len(set(fns)) == n


def test_object_wider_than_the_group_scales_out_whole_groups() -> None:
    pc = make(group=4)
    pl = pc.place([1000] * 6)
    assert pl.scaled_out == 8
    assert len(pc.slots) == 8


def test_small_objects_fill_oldest_open_function_first() -> None:
    pc = make(group=4)
    pc.place([1000] * 4)
    fns = [pc.place([1000]).places[0][0] for _ in range(5)]
    assert fns == [0] * 5


def test_hardcap_seals_the_group_and_scales_out() -> None:
    pc = make(group=2, hardcap=2 * MiB)
    pc.place([MiB, MiB])
    pl = pc.place([MiB, MiB])  # fills both to the cap
    assert pc.slots[0].sealed and pc.slots[1].sealed
    pl = pc.place([MiB, MiB])
    assert {p[0] for p in pl.places} == {2, 3}
    assert pl.scaled_out == 2


def test_freeing_reopens_a_sealed_group() -> None:
    pc = make(group=2, hardcap=2 * MiB)
    placed = [pc.place([MiB, MiB]).places for _ in range(2)]
    assert pc.slots[0].sealed
    for places in placed:
        for fn, block, off in places:
            pc.free(fn, block, off, MiB)
    assert not pc.slots[0].sealed
    assert pc.used(0) == 0


def test_pool_exhausted_is_explicit() -> None:
    pc = make(group=2, hardcap=MiB, maxf=2)
    pc.place([MiB, MiB])
    with pytest.raises(PoolExhausted, match="pool of 2 exhausted"):
        pc.place([MiB, MiB])


def test_a_placement_that_runs_out_of_functions_reserves_nothing() -> None:
    # 5 chunks on a pool of 4 functions: the first 4 fit, the fifth exhausts the pool; the
    # blocks of the first 4 go back (the PUT fails and no place of it was recorded anywhere)
    pc = make(group=4, maxf=4)
    with pytest.raises(PoolExhausted):
        pc.place([10] * 5)
    assert [pc.used(fn) for fn in range(4)] == [0, 0, 0, 0]


def test_exclude_and_busy_are_respected() -> None:
    pc = make(group=4)
    pc.place([10] * 4)
    assert pc.place([10], exclude=frozenset({0, 1})).places[0][0] == 2
    assert pc.place([10], busy=lambda fn: fn < 3).places[0][0] == 3


def test_block_allocator_packs_slices_and_spans_blocks() -> None:
    a = BlockAllocator(MiB)
    assert a.alloc(1000) == (0, 0)
    assert a.alloc(2000) == (0, 1000)
    big = a.alloc(int(2.5 * MiB))
    assert big == (1, 0)
    assert a.used() == 4 * MiB
    assert a.alloc(1000) == (3, MiB // 2)  # tail of the big one's last block
    a.free(0, 0, 1000)
    assert a.used() == 4 * MiB
    a.free(0, 1000, 2000)
    assert a.used() == 3 * MiB
    assert a.alloc(0) == (0, 0)


def test_reserve_accounts_external_allocations() -> None:
    pc = make(group=2)
    pc.reserve(3, 5, 0, 2 * MiB)
    assert len(pc.slots) == 4
    assert pc.used(3) == 2 * MiB
    assert pc.slots[3].alloc.next_block == 7


def test_reserve_refuses_places_outside_the_pool_and_changes_nothing() -> None:
    pc = PlaceChunk(group_size=2, hardcap=4 * MiB, block_size=MiB, max_functions=4, capacity=6 * MiB)
    pc.reserve(1, 5, MiB - 1, 1)            # the last byte of the last block (capacity, past the hardcap)
    pc.reserve(3, 0, 0, 6 * MiB)            # a whole function
    for fn, block, off, size, why in [
        (-1, 0, 0, 1, "function -1 is outside the pool of 4"),
        (4, 0, 0, 1, "function 4 is outside the pool of 4"),
        (0, -1, 0, 1, "block -1"),
        (0, 6, 0, 1, "block 6 .* outside function 0's 6 blocks"),
        (0, 5, MiB - 1, 2, "block 5 .* outside function 0's 6 blocks"),   # runs past the last block
        (0, 0, 0, 6 * MiB + 1, "outside function 0's 6 blocks"),
        (0, 0, -1, 1, "offset -1 is outside a block"),
        (0, 0, MiB, 1, f"offset {MiB} is outside a block"),
        (0, 0, 0, -1, "chunk size -1"),
    ]:
        with pytest.raises(BadPlacement, match=why):
            pc.reserve(fn, block, off, size)
    assert pc.used(0) == 0 and pc.used(1) == MiB and pc.used(3) == 6 * MiB
