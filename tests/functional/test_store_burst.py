"""Cache functions on real storage functions: a burst of concurrent GETs of one object
is served partly by cache functions that load its chunks from COS (SION Sec. 5.3.3);
every GET gets the right bytes, and freeing the object deletes the copies."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore
from tests._waiting import wait_for

MiB = 1 << 20


@pytest.fixture
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, idle_s=2.0, cache_copies=2, cache_queue_depth=1, max_functions=24,
                    function_send_mbps=50, check_state=True) as st:
        yield st


def burst(store: LocalStore, key: str, data: bytes, n: int) -> list[BaseException]:
    errors: list[BaseException] = []
    go = threading.Barrier(n)

    def one() -> None:
        try:
            with StoreClient(store.address, store.token) as c:
                go.wait()
                assert c.get(key) == data
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_a_burst_spreads_over_cache_functions_and_a_free_deletes_their_copies(store: LocalStore) -> None:
    d = store.daemon
    data = os.urandom(2 * MiB)
    with StoreClient(store.address, store.token) as c:
        c.put("hot", data)
        assert d.wait_uploads(30)
        assert burst(store, "hot", data, 16) == []
        st = d.stats()["cache"]
        # at most cache_copies (2) per chunk: the data chunks, and under load the parity chunks a
        # first-d read reaches for when a data chunk is slow (23 seen in a full run)
        assert st["cache_routed"] > 0 and 0 < st["cache_copies"] <= 2 * (10 + 2)
        assert d.counters["cos_fallbacks"] == 0
        obj = d.table.latest("hot")
        assert obj is not None
        holders = {pl[0] for s in obj.stripes for pl in s.places if pl}
        copies = {fn for fns in d.cache_functions.router.copies.values() for fn in fns}
        assert copies and not copies & holders
        name = d.handles[min(copies)].name
        assert any(k.endswith("/hot") for k in d.function_memory(name)["entries"])
        c.delete("hot")
        wait_for(lambda: not any(k.endswith("/hot") for k in d.function_memory(name)["entries"]), 10,
                 "the cache function to drop its copy of a freed object")
        assert d.stats()["cache"]["cache_copies"] == 0


def test_a_broadcasts_copies_are_loaded_before_its_readers_ask() -> None:
    """A PUT that says its object has many readers (the workflow graph's read count): the
    daemon uploads it at once, though the write-behind would wait a minute, and loads its
    data chunks into cache functions; the burst then reads from them without loading, and a
    PUT with few readers is left alone."""
    with LocalStore(function_memory_mb=256, idle_s=5.0, cache_copies=2, cache_queue_depth=1, max_functions=24,
                    upload_delay_s=60.0, parity_upload_delay_s=60.0, check_state=True) as st, \
            StoreClient(st.address, st.token) as c:
        d = st.daemon
        data = os.urandom(2 * MiB)
        c.put("few", data, hints={"readers": d.config.cache_prefetch_readers - 1})
        c.put("hot", data, hints={"readers": 16})
        hot, few = d.table.latest("hot"), d.table.latest("few")
        assert hot is not None and few is not None and hot.readers == 16
        wait_for(lambda: d.counters.get("cache_loads", 0) == 10 * 2, 30,
                 "two copies of each of the 10 data chunks loaded")  # min(copies, ceil(16 / depth) - 1)
        assert hot.uploaded and not few.uploaded and d.counters["cache_prefetches"] == 20
        copies = d.cache_functions.router.copies
        assert {cid[0] for cid in copies} == {"hot"} and all(len(fns) == 2 for fns in copies.values())
        holders = {pl[0] for s in hot.stripes for pl in s.places if pl}
        fns = {fn for f in copies.values() for fn in f}
        assert not fns & holders
        assert all(any(k.endswith("/hot") for k in d.function_memory(d.handles[fn].name)["entries"]) for fn in fns)
        assert burst(st, "hot", data, 16) == []
        stats = d.stats()["cache"]
        assert stats["cache_routed"] > 0 and stats["cache_opened"] == 20  # the burst opened none
        assert d.counters["cache_loads"] == 20 and d.counters["cos_fallbacks"] == 0  # nor loaded any


def test_a_copy_loaded_after_its_object_was_freed_does_not_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """A freed version's DEL reaches a cache function on its small connection while the
    prefetch it is serving on the large one still loads from COS (modelled at 0.5 MB/s
    here), so the DEL finds nothing to delete: the daemon deletes each copy again when its
    load ends after the free, and no copy of the freed object stays in any function. (The
    free's COS delete is held until the loads end, so that every load reads its chunk.)"""
    with LocalStore(function_memory_mb=256, idle_s=5.0, cache_copies=2, cache_queue_depth=1, max_functions=24,
                    upload_delay_s=60.0, parity_upload_delay_s=60.0, function_bandwidth_mbps=0.5,
                    check_state=True) as st, StoreClient(st.address, st.token) as c:
        d = st.daemon
        cos_deletes = threading.Event()
        real_delete = d.buffer.cos.delete
        monkeypatch.setattr(d.buffer.cos, "delete", lambda key: (cos_deletes.wait(30), real_delete(key)))
        try:
            c.put("hot", os.urandom(2 * MiB), hints={"readers": 16})
            wait_for(lambda: d.counters.get("cache_prefetches", 0) == 20, 30, "the 20 prefetches sent")
            copies = {fn for fns in d.cache_functions.router.copies.values() for fn in fns}
            assert copies and d.counters.get("cache_loads", 0) == 0  # each takes ~0.4 s of modelled download
            c.delete("hot")  # its DELs go out now, while the loads are under way
            wait_for(lambda: d.counters.get("cache_loads", 0) == 20, 30, "the 20 loads to end")
            assert d.counters.get("cache_loads_freed", 0) == 20 and d.counters["bad_frames"] == 0
        finally:
            cos_deletes.set()

        def held() -> list[str]:
            return [k for fn in copies for k in d.function_memory(d.handles[fn].name)["entries"]
                    if k.endswith("/hot")]

        wait_for(lambda: not held(), 10, "the copies loaded after the free to be deleted")
