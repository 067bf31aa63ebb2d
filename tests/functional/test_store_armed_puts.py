"""A PUT with nothing behind it on its connection is answered by the thread that
receives its last function reply (``_session``'s armed PUT): a function that
stops answering (its process stopped, its connection open) still gets the PUT
answered once ``put_timeout_s`` ran out, its chunk stored on another function
(never again on the one that did not answer), and the connection serves on."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

TIMEOUT_S = 1.0


@pytest.fixture()
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, group_size=3, max_functions=6, idle_s=60.0,
                    put_timeout_s=TIMEOUT_S) as st:
        yield st


def test_a_put_on_a_stopped_function_is_stored_elsewhere_once_its_timeout_ran_out(store: LocalStore) -> None:
    with StoreClient(store.address, store.token, codec=Codec(10, 2)) as c:
        for i in range(6):  # every function of the group invoked
            c.put(f"warm{i}", b"w" * 4096)
        stopped = store.daemon.table.latest("warm0").stripes[0].places[0][0]
        pids = [i.pid for i in store.platform.instances(store.daemon.handles[stopped].name)]
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        data = os.urandom(4096)
        try:
            for n in range(6):  # until one is placed on the stopped function
                t = time.monotonic()
                c.put(f"k{n}", data)
                took = time.monotonic() - t
                if store.daemon.counters.get("chunk_retries", 0):
                    break
            else:
                pytest.fail("no PUT was placed on the stopped function")
            assert TIMEOUT_S * 0.9 <= took < TIMEOUT_S + 10
            place = store.daemon.table.latest(f"k{n}").stripes[0].places[0]
            assert place is not None and place[0] != stopped
            assert c.get(f"k{n}") == data
            c.put("after", b"a" * 100)  # the connection serves on
            assert c.get("after") == b"a" * 100
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)


def test_the_chunk_stored_elsewhere_is_the_one_the_stopped_function_did_not_answer(store: LocalStore) -> None:
    """A coded object: the chunk retried is the stopped function's, whichever index it
    has, not a guess (the last), and the version keeps no place on that function."""
    codec = Codec(2, 1, threshold=4096, stripe_size=64 << 10)
    with StoreClient(store.address, store.token, codec=codec) as c:
        for i in range(6):
            c.put(f"warm{i}", os.urandom(8192))
        d = store.daemon
        first = d.table.latest("warm0").stripes[0].places
        stopped = first[0][0]  # a function that held a data chunk, not the last one
        pids = [i.pid for i in store.platform.instances(d.handles[stopped].name)]
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            hit = None
            for n in range(12):  # until a PUT places a chunk before the last on the stopped function
                data = os.urandom(48 << 10)
                retries = d.counters.get("chunk_retries", 0)
                c.put(f"k{n}", data)
                obj = d.table.latest(f"k{n}")
                assert all(pl is not None and pl[0] != stopped for st in obj.stripes for pl in st.places)
                assert c.get(f"k{n}") == data
                if d.counters.get("chunk_retries", 0) > retries:
                    assert d.counters["chunk_retries"] - retries == 1  # that chunk only
                    hit = n
                    break
            assert hit is not None, "no PUT placed a chunk on the stopped function"
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
