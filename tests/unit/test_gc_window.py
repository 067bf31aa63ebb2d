"""SION's sliding-window GC (``_gc.GcWindow``, pure) and its joining to the store core
(``_gc_core`` through ``StoreState``): every bucket transition, release after H and
when frees empty a function, compaction rounds; each test validates the state."""

from __future__ import annotations

import random

import pytest

from storage_functions.daemon._gc import GcConfig, GcRelease, GcSeal, GcWindow
from storage_functions.daemon._objects import chunk_key
from storage_functions.daemon._placement import PlaceChunk
from storage_functions.daemon._state import StoreState
from storage_functions.daemon._store_events import (Free, FunctionLost, Migrate, Migrated, Move, Recover, Release,
                                                    Retire, Tick, Warm)

from .test_store_state import BS, put

CFG = GcConfig(interval_s=10.0, active=2, degraded=3, active_warm_s=5.0, degraded_warm_s=20.0,
               compact_fraction=0.5, compact_max=3)


def test_a_bucket_goes_active_then_degraded_then_released_after_h() -> None:
    w = GcWindow(CFG, now=0.0)
    w.joined(1)
    w.joined(2)
    assert w.state_of(1) == "active" and w.warm_interval(1) == 5.0
    assert w.step(9.9, open_fns=[]) == []  # not a whole interval yet
    assert w.step(10.0, open_fns=[]) == [] and w.slot == 1
    assert w.step(20.0, open_fns=[]) == [GcSeal((1, 2))]  # M = 2 intervals old: degraded
    assert w.state_of(2) == "degraded" and w.warm_interval(2) == 20.0
    assert w.step(40.0, open_fns=[]) == []
    assert w.step(50.0, open_fns=[]) == [GcRelease((1, 2), "window")]  # H = 5 intervals
    assert w.state_of(1) == "released" and len(w.buckets) == 1
    w.validate()


def test_open_functions_move_to_the_new_bucket_and_never_age() -> None:
    w = GcWindow(CFG)
    for fn in (0, 1, 2, 3):
        w.joined(fn)
    out = w.step(60.0, open_fns=[2, 3])  # six rounds at once; 0 and 1 were sealed (full)
    assert out == [GcSeal((0, 1)), GcRelease((0, 1), "window")]
    assert w.newest.functions == {2, 3} and w.state_of(2) == "active"
    w.validate()


def test_a_released_function_rejoins_the_newest_bucket_when_it_holds_data_again() -> None:
    w = GcWindow(CFG)
    w.joined(4)
    w.step(50.0, open_fns=[])
    assert w.state_of(4) == "released"
    w.joined(4)
    assert w.state_of(4) == "active" and w.where[4] is w.newest
    w.validate()


def test_a_function_emptied_by_frees_leaves_at_once_unless_in_the_newest_bucket() -> None:
    w = GcWindow(CFG)
    w.joined(0)
    assert w.emptied(0) == []  # newest: new data goes there next
    w.step(10.0, open_fns=[])
    w.joined(1)
    assert w.emptied(0) == [GcRelease((0,), "empty")]  # no waiting for H
    assert w.state_of(0) == "released" and w.state_of(1) == "active"
    w.validate()


def test_reads_mark_only_chunks_on_degraded_functions_and_compaction_takes_rounds() -> None:
    w = GcWindow(CFG)
    w.joined(0)
    w.step(20.0, open_fns=[])
    w.joined(5)  # the newest bucket's
    assert not w.read(("k", 1, 0, 9), 5)
    for i in range(8):
        assert w.read(("k", 1, 0, i), 0)
    rng = random.Random(7)
    rounds = []
    while w.marked:
        rounds.append(len(w.compaction(rng)))
    assert rounds == [3, 3, 1, 1]  # half of what is marked (rounded up), at most compact_max
    assert w.compacted == 8
    w.validate()


def test_bad_knobs_fail_naming_them() -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        GcConfig(interval_s=0)
    with pytest.raises(ValueError, match="compact_fraction"):
        GcConfig(compact_fraction=0)


# -- joined to the store core -----------------------------------------------------------------
def core(maxf: int = 8) -> StoreState:
    pc = PlaceChunk(group_size=4, hardcap=8 * BS, block_size=BS, max_functions=maxf, capacity=16 * BS)
    return StoreState(pc, block_size=BS, function_prefix="sion", cos_prefix="p", warm_interval_s=5,
                      gc=GcWindow(CFG, now=0.0), rng=random.Random(1))


def test_degraded_functions_are_sealed_warmed_slower_and_released_with_their_chunks() -> None:
    s = core()
    obj = put(s, "r/a", cl=8 * BS)  # at the HARDCAP: sealed, so they stay in bucket 0
    fns = sorted({pl[0] for pl in obj.stripes[0].places if pl})
    assert s.gc is not None and s.gc.window.newest.functions == set(fns)
    sleeping = tuple((fn, 0.0) for fn in fns)
    assert s.handle(Tick(now=6.0, sleeping=sleeping)) == [Warm(fn) for fn in fns]  # active: every 5 s
    out = s.handle(Tick(now=20.0, sleeping=tuple((fn, 15.0) for fn in fns)))
    assert out == []  # degraded now: warmed every 20 s
    assert all(s.placement.slots[fn].sealed and s.placement.slots[fn].held for fn in fns)
    assert s.handle(Tick(now=30.0, sleeping=tuple((fn, 15.0) for fn in fns))) == []  # 15 s < 20 s
    assert s.handle(Tick(now=36.0, sleeping=tuple((fn, 15.0) for fn in fns))) == [Warm(fn) for fn in fns]
    s.validate_state()
    out = s.handle(Tick(now=50.0))
    releases = [x for x in out if isinstance(x, Release)]
    assert sorted(x.fn for x in releases) == fns
    assert {k for x in releases for k in x.keys} == {chunk_key("r/a", 1, 0, i) for i in range(3)}
    assert [x for x in out if isinstance(x, Retire)] == [Retire(fn, "window") for fn in fns]
    assert obj.stripes[0].places == [None, None, None] and not s.fn_chunks and not s.ledger.entries
    assert s.table.latest("r/a") is obj  # still readable: from COS
    s.validate_state()


def test_the_open_group_carries_over_and_new_data_lands_in_the_newest_bucket() -> None:
    s = core()
    put(s, "r/a")
    s.placement.open_functions()
    assert s.handle(Tick(now=10.0)) == []
    assert s.gc is not None
    w = s.gc.window
    assert w.newest.slot == 1 and w.newest.functions == {0, 1, 2}  # open: carried over
    s.validate_state()


def test_frees_that_empty_a_function_of_an_older_bucket_retire_it_at_once() -> None:
    s = core()
    a = put(s, "r/a", cl=8 * BS)  # fills functions 0-2 to the HARDCAP: their group seals
    fns = sorted({pl[0] for pl in a.stripes[0].places if pl})
    assert all(s.placement.slots[fn].sealed for fn in fns)
    s.handle(Tick(now=10.0))  # sealed: they stay in bucket 0, the open function 3 moves on
    assert s.gc is not None and s.gc.window.state_of(0) == "active"
    out = s.handle(Free(keys=("r/a",), now=11.0))
    assert [x for x in out if isinstance(x, Retire)] == [Retire(fn, "empty") for fn in fns]
    assert s.gc.window.state_of(0) == "released" and s.placement.slots[0].retired
    s.validate_state()


def test_a_released_group_is_reused_when_the_pool_is_at_its_bound() -> None:
    s = core(maxf=4)
    a = put(s, "r/a", cl=8 * BS)
    s.handle(Tick(now=10.0))
    s.handle(Free(keys=("r/a",), now=11.0))
    assert all(sl.retired for sl in s.placement.slots[:3])
    b = put(s, "r/b", cl=8 * BS)  # function 3 is open, then the whole group comes back
    assert {pl[0] for pl in b.stripes[0].places if pl} <= {0, 1, 2, 3}
    assert a.state == "freed"
    s.validate_state()


def test_compaction_moves_read_chunks_from_degraded_functions_to_the_newest_bucket() -> None:
    s = core(maxf=12)
    obj = put(s, "r/a", cl=8 * BS)  # sealed by the HARDCAP: stays in bucket 0
    obj.uploaded = True
    old = list(obj.stripes[0].places)
    s.handle(Tick(now=20.0))  # bucket 0 degraded
    assert s.gc is not None and all(s.gc.window.degraded(pl[0]) for pl in old if pl)
    reads = tuple((pl[0], chunk_key("r/a", 1, 0, i)) for i, pl in enumerate(old) if pl)
    out = s.handle(Tick(now=21.0, reads=reads))  # marks 3 chunks; a round moves half (2)
    moves = [x for x in out if isinstance(x, Migrate)]
    assert len(moves) == 2 and len(s.gc.window.marked) == 1
    for m in moves:
        assert m.place[0] not in s.gc.window.where or s.gc.window.where[m.place[0]] is s.gc.window.newest
        assert m.place[0] not in {pl[0] for pl in old if pl}
    s.validate_state()  # the new places are reserved while the chunks load
    m0, m1 = moves
    out = s.handle(Migrated(obj=obj, stripe=0, index=m0.index, place=m0.place, ok=True, now=22.0))
    was = old[m0.index]
    assert was is not None
    # the degraded function held nothing else: it leaves the pool at once
    assert out == [Release(was[0], (chunk_key("r/a", 1, 0, m0.index),)), Retire(was[0], "empty")]
    assert obj.stripes[0].places[m0.index] == m0.place
    assert s.handle(Migrated(obj=obj, stripe=0, index=m1.index, place=m1.place, ok=False, now=22.0)) == []
    assert obj.stripes[0].places[m1.index] == old[m1.index]  # failed: stays; its next read marks it again
    s.validate_state()
    out = s.handle(Tick(now=23.0))
    assert len([x for x in out if isinstance(x, Migrate)]) == 1  # the next round: the last marked chunk
    s.handle(Free(keys=("r/a",), now=24.0))  # freed while it moves: the new place goes back
    s.validate_state()
    assert all(not sl.alloc.refs for sl in s.placement.slots)


def test_versions_the_metadata_server_placed_are_not_compacted_here_its_move_carries_them() -> None:
    s = core()
    obj = put(s, "r/a", alloc=[(0, 0, 0), (1, 0, 0), (2, 0, 0)])
    obj.uploaded = True
    s.placement.hold((0, 1, 2))  # as if degraded: sealed
    s.handle(Tick(now=20.0))
    assert s.gc is not None and s.gc.window.degraded(0)
    out = s.handle(Tick(now=21.0, reads=tuple((fn, chunk_key("r/a", 1, 0, fn)) for fn in (0, 1))))
    assert not [x for x in out if isinstance(x, Migrate)] and not s.gc.window.marked
    w = s.gc.window
    assert w.degraded(0) and w.degraded(1) and w.degraded(2)  # not revived: the metadata server moves
    # its move: chunks 0 and 1 to functions 3 and 4 (chunk 2 stays), loaded from COS
    out = s.handle(Move(key="r/a", moves=((0, 3, 0, 0, 300), (1, 4, 0, 0, 300)), now=21.5))
    loads = [x for x in out if isinstance(x, Migrate)]
    assert [(m.index, m.place) for m in loads] == [(0, (3, 0, 0)), (1, (4, 0, 0))]
    assert s.handle(Move(key="r/a", moves=((0, 3, 0, 0, 300),), now=21.6)) == []  # again: nothing new
    s.validate_state()
    assert obj.stripes[0].places[0] == (0, 0, 0)  # GETs read the old copy until the new one landed
    out = s.handle(Migrated(obj=obj, stripe=0, index=0, place=(3, 0, 0), ok=True, now=21.7))
    assert Release(0, (chunk_key("r/a", 1, 0, 0),)) in out and obj.stripes[0].places[0] == (3, 0, 0)
    s.handle(Tick(now=60.0))  # H later: the old functions go; chunk 1's copy lands after its release
    assert obj.stripes[0].places[1] is None
    out = s.handle(Migrated(obj=obj, stripe=0, index=1, place=(4, 0, 0), ok=True, now=60.5))
    assert obj.stripes[0].places[1] == (4, 0, 0) and s.gc.moved == 2
    assert obj.alloc is not None and obj.alloc[0][0] == 3 and obj.alloc[1][0] == 4
    s.validate_state()


def test_a_move_of_a_version_not_in_cos_yet_loads_once_it_is_and_a_free_gives_its_place_back() -> None:
    s = core()
    obj = put(s, "r/a", alloc=[(0, 0, 0), (1, 0, 0), (2, 0, 0)], stripes=2)   # chunks of 2 stripes end to end
    assert not obj.uploaded
    assert s.handle(Move(key="r/a", moves=((2, 5, 1, 0, 600),), now=1.0)) == []   # reserved, waits for COS
    assert s.gc is not None and len(s.gc.waiting) == 2
    s.validate_state()
    obj.uploaded = True
    loads = [x for x in s.handle(Tick(now=2.0)) if isinstance(x, Migrate)]
    assert [(m.stripe, m.index, m.place) for m in loads] == [(0, 2, (5, 1, 0)), (1, 2, (5, 1, 300))]
    assert not s.gc.waiting
    s.handle(Free(keys=("r/a",), now=3.0))       # freed while they load: the new places go back
    assert not s.gc.migrating and all(not sl.alloc.refs for sl in s.placement.slots)
    out = s.handle(Migrated(obj=obj, stripe=0, index=2, place=(5, 1, 0), ok=True, now=3.5))
    assert out == [Release(5, (chunk_key("r/a", 1, 0, 2),))]   # the copy that landed late is deleted
    s.validate_state()


def test_a_lost_degraded_function_is_released_not_recovered() -> None:
    s = core()
    obj = put(s, "r/a", alloc=[(0, 0, 0), (1, 0, 0), (2, 0, 0)])  # placed by the metadata server
    obj.uploaded = True
    s.placement.hold((0, 1, 2))  # sealed: they stay in bucket 0
    s.handle(Tick(now=20.0))
    assert s.gc is not None and s.gc.window.degraded(1)
    out = s.handle(FunctionLost(fn=1, now=21.0))
    assert out == [Retire(1, "lost")] and not s.missing  # its cold data is read from COS
    assert s.gc.window.state_of(1) == "released" and s.placement.slots[1].retired
    s.validate_state()
    other = core()
    put(other, "r/b", alloc=[(0, 0, 0), (1, 0, 0), (2, 0, 0)])
    assert isinstance(other.handle(FunctionLost(fn=1, now=1.0))[0], Recover)  # active: recovered
    other.validate_state()


def test_the_daemon_config_refuses_bad_gc_and_cache_knobs_naming_them() -> None:
    from storage_functions.daemon import DaemonConfig

    with pytest.raises(ValueError, match="gc_active >= 1"):
        DaemonConfig(gc_active=0)
    with pytest.raises(ValueError, match="cache_copies must be >= 0"):
        DaemonConfig(cache_copies=-1)
    assert DaemonConfig(gc_interval_s=0, gc_active=0).gc_interval_s == 0  # no window: its knobs unused


def test_under_the_metadata_servers_placement_full_functions_age_and_new_data_revives_them() -> None:
    s = core()
    put(s, "r/a", alloc=[(0, 0, 0), (1, 0, 0), (2, 0, 0)], cl=8 * BS)  # at the HARDCAP, never sealed by reserve
    put(s, "r/b", alloc=[(3, 0, 0), (4, 0, 0), (5, 0, 0)])  # room left: open
    assert not s.placement.slots[0].sealed
    s.handle(Tick(now=20.0))
    assert s.gc is not None
    w = s.gc.window
    assert w.degraded(0) and w.state_of(3) == "active"  # the full ones aged, the open ones moved on
    put(s, "r/c", alloc=[(0, 8, 0), (6, 0, 0), (7, 0, 0)])  # the allocator still sees room on 0
    assert w.state_of(0) == "active" and w.where[0] is w.newest  # fresh data: not released with bucket 0
    assert w.degraded(1)
    s.validate_state()
