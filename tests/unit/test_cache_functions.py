"""Cache functions for GET bursts: the daemon's router (``_burst.BurstRouter``, pure) and
a storage function's demand cache (``runtime._demand``): routing when a queue is full,
the copy limit, eviction order (least recently used demand-cached chunks first, and
before any regular data; recovery copies never)."""

from __future__ import annotations

import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from storage_functions.cos import LocalCOS
from storage_functions.daemon._burst import BurstConfig, BurstRouter
from storage_functions.protocol import Status
from storage_functions.runtime._demand import DemandCache, evict_for, load
from storage_functions.runtime._handler import FunctionState, _Throttle

CID = ("r/hot", 1, 0, 3)


def test_a_gets_goes_to_its_function_until_the_queue_is_full() -> None:
    r = BurstRouter(BurstConfig(depth=2, copies=2))
    load = {0: 1}
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 0
    load[0] = 2  # full, but one GET of the chunk is out: not hot yet
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 0
    # full and hot (two GETs of it out): a cache function, never one holding a chunk of the stripe
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 3
    load[3] = 1
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 3  # not full yet
    load[3] = 2
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 4
    load[4] = 5
    # at the copy limit: the least busy of the chunk's functions
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 0
    load[0] = 9
    assert r.route(CID, 0, lambda fn: load.get(fn, 0), frozenset({0, 1, 2}), range(8)) == 3
    assert r.stats() == {"cache_chunks": 1, "cache_copies": 2, "cache_routed": 4, "cache_opened": 2}
    for _ in range(7):
        r.done(CID)
    assert r.pending == {}


def test_a_burst_routed_before_its_gets_reach_a_queue_spreads_over_the_copies() -> None:
    """A cache function being invoked holds its queue while the invocation starts, so dozens
    of GETs are routed before its queue shows the first: the router counts what it sent
    (before, 50 of a burst's 64 GETs of one chunk piled onto the first cache function)."""
    r = BurstRouter(BurstConfig(depth=2, copies=4))
    primary_full = lambda fn: 2 if fn == 0 else 0  # noqa: E731 - the queues never show a GET
    got = [r.route(CID, 0, primary_full, frozenset({0, 1}), range(8)) for _ in range(2 + 4 * 2)]
    assert got[:2] == [0, 0]  # not hot yet
    assert sorted(got[2:]) == [2, 2, 3, 3, 4, 4, 5, 5]  # two each, up to depth, on four copies
    assert r.inflight == {2: 2, 3: 2, 4: 2, 5: 2}
    more = [r.route(CID, 0, primary_full, frozenset({0, 1}), range(8)) for _ in range(5)]
    assert more == [0] * 5  # every copy as busy as the chunk's function: the least busy of all, it first
    for fn in got[2:]:
        r.done(CID, fn)
    assert r.inflight == {}


def test_one_clients_read_of_a_large_object_never_leaves_a_busy_function() -> None:
    """A windowed GET asks a function for several chunks of one object at once (one of each
    stripe): its queue is full, but no chunk is hot, so no cache function loads from COS."""
    r = BurstRouter(BurstConfig(depth=2, copies=4))
    for s in range(7):
        assert r.route(("r/big", 1, s, 0), 0, lambda fn: 3, frozenset({0, 1}), range(8)) == 0
    assert r.stats()["cache_opened"] == 0 and len(r.pending) == 7


def test_warm_functions_are_preferred_and_failed_ones_dropped() -> None:
    r = BurstRouter(BurstConfig(depth=1, copies=1))
    assert r.route(CID, 0, lambda f: 1 if f == 0 else 0, frozenset({0}), range(6)) == 0  # the first: not hot
    fn = r.route(CID, 0, lambda f: 1 if f == 0 else 0, frozenset({0}), range(6), warm=lambda f: f == 4)
    assert fn == 4 and r.is_copy(CID, 4)
    r.dropped(CID, 4)
    assert not r.is_copy(CID, 4) and r.stats()["cache_chunks"] == 0


def test_no_copies_means_no_cache_functions_and_a_freed_version_deletes_its_copies() -> None:
    off = BurstRouter(BurstConfig(depth=1, copies=0))
    assert off.route(CID, 0, lambda f: 99, frozenset({0}), range(6)) == 0
    r = BurstRouter(BurstConfig(depth=1, copies=2))
    for i in range(2):
        r.route(("r/hot", 1, 0, i), 0, lambda f: 1 if f == 0 else 0, frozenset({0}), range(6))  # not hot yet
        r.route(("r/hot", 1, 0, i), 0, lambda f: 1 if f == 0 else 0, frozenset({0}), range(6))
    # the second chunk's copy goes to another function (the fewest chunks cached first)
    assert r.forget("r/hot", 1) == {1: ["1/0/0/r/hot"], 2: ["1/0/1/r/hot"]}
    assert r.stats()["cache_chunks"] == 0
    with pytest.raises(ValueError, match="depth"):
        BurstConfig(depth=0)


def test_a_broadcast_opens_the_copies_its_readers_would_before_they_read() -> None:
    """``provision``: ceil(readers / depth) - 1 copies, at most ``copies``, never on a function
    holding a chunk of the stripe, spread over functions caching the fewest chunks; a second
    call (or a chunk that has its copies) opens none."""
    r = BurstRouter(BurstConfig(depth=2, copies=4))
    idle = lambda fn: 0  # noqa: E731
    assert r.provision(CID, 0, 2, idle, frozenset({0, 1}), range(8)) == []  # two readers: its function serves both
    assert r.provision(CID, 0, 5, idle, frozenset({0, 1}), range(8)) == [2, 3]  # ceil(5 / 2) - 1
    assert r.provision(CID, 0, 64, idle, frozenset({0, 1}), range(8)) == [4, 5]  # up to copies=4
    assert r.provision(CID, 0, 64, idle, frozenset({0, 1}), range(8)) == []
    assert r.copies[CID] == [2, 3, 4, 5] and r.stats()["cache_opened"] == 4
    other = ("r/hot", 1, 0, 4)
    busy = lambda fn: 3 if fn == 6 else 0  # noqa: E731
    got = r.provision(other, 1, 64, busy, frozenset({0, 1}), range(8), warm=lambda fn: fn != 3)
    assert got == [7, 2, 4, 5]  # the fewest cached first (7), then not busy and warm
    # the burst then finds them: the chunk's GETs beyond its function's depth go to the copies
    load = {1: 2}
    r.pending[other] = 2
    assert r.route(other, 1, lambda fn: load.get(fn, 0), frozenset({0, 1}), range(8)) == 7
    assert r.stats()["cache_opened"] == 8  # routed to a copy already open: none opened
    assert BurstRouter(BurstConfig(depth=2, copies=0)).provision(CID, 0, 64, idle, frozenset(), range(8)) == []


def test_demand_cache_victims_are_least_recently_used_first() -> None:
    c = DemandCache()
    for k in ("a", "b", "c"):
        c.add(k, 10)
    c.touch("a")
    assert c.victims(15, 0) == ["b", "c"]
    assert c.victims(5, 10) == []
    assert c.victims(100, 0) is None


# -- a storage function's demand cache, on its block memory and a COS directory ---------------
BS = 1024


@pytest.fixture
def cos(tmp_path: Path) -> LocalCOS:
    c = LocalCOS(str(tmp_path))
    c.put("obj", bytes(range(256)) * 16)  # 4 KiB: four 1 KiB chunks
    return c


def get(key: str, i: int) -> SimpleNamespace:
    data = (bytes(range(256)) * 16)[i * BS:(i + 1) * BS]
    return SimpleNamespace(key=key, crc=0, meta={"src": "obj", "off": i * BS, "len": BS, "crc": zlib.crc32(data)})


def test_a_cache_function_loads_from_cos_and_evicts_the_least_recently_used(cos: LocalCOS) -> None:
    st = FunctionState("sion-9", BS, 8 * BS)
    ev = {"cache_cap": 3 * BS}
    nothrottle = _Throttle(0)
    for i in range(3):
        assert load(st, ev, cos, get(f"c{i}", i), nothrottle) == (Status.OK, "")
    assert load(st, ev, cos, get("c0", 0), nothrottle) == (Status.OK, "")  # a hit: c0 is the newest
    assert load(st, ev, cos, get("c3", 3), nothrottle) == (Status.OK, "")
    assert list(st.demand.entries) == ["c2", "c0", "c3"] and st.memory.get("c1") is None
    got = st.memory.get("c3")
    assert got is not None and bytes(got[1][0]) == (bytes(range(256)) * 16)[3 * BS:]
    assert not st.log.ops  # demand-cached chunks are never logged
    bad = get("c9", 1)
    bad.meta["crc"] = 1
    assert load(st, ev, cos, bad, nothrottle)[0] == Status.CORRUPT


def test_a_put_of_regular_data_evicts_demand_cached_chunks_never_regular_or_recovery_copies(
        cos: LocalCOS) -> None:
    st = FunctionState("sion-9", BS, 6 * BS)
    ev = {"cache_cap": 3 * BS}
    for i in range(2):
        load(st, ev, cos, get(f"c{i}", i), _Throttle(0))
    st.cached["recovery-copy"] = BS  # a recovery function's copy (its routes point at it)
    e, _ = st.memory.reserve("recovery-copy", 1 << 41, 0, BS, 0)
    st.memory.commit(e)
    for b in range(3):  # regular data
        e, _ = st.memory.reserve(f"r{b}", b, 0, BS, 0)
        st.memory.commit(e)
    assert st.memory.used() == 6 * BS
    assert evict_for(st, BS)  # one demand-cached chunk goes, the oldest
    assert list(st.demand.entries) == ["c1"] and st.memory.get("c0") is None
    assert all(st.memory.get(k) is not None for k in ("r0", "r1", "r2", "recovery-copy"))
    assert evict_for(st, 2 * BS)  # the last one (with the block freed just before)
    assert not evict_for(st, 4 * BS)  # nothing demand-cached left: regular data is never evicted
    assert all(st.memory.get(k) is not None for k in ("r0", "r1", "r2", "recovery-copy"))
