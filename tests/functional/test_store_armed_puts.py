"""A PUT with nothing behind it on its connection is answered by the thread that
receives its last function reply (``_session``'s armed PUT): a function that
stops answering (its process stopped, its connection open) still gets the PUT
answered once ``put_timeout_s`` ran out, its chunk stored on another function
(never again on the one that did not answer; the chunk retried is exactly the one
not answered), and the connection serves on. The function is then silent: later
PUTs do not wait for it and GETs ask it last, until it answers again."""

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
                    put_timeout_s=TIMEOUT_S, parity_upload_delay_s=0.0) as st:
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


def test_once_a_function_let_a_chunk_time_out_later_puts_do_not_wait_for_it(store: LocalStore) -> None:
    """The first PUT placed on a stopped function waits out ``put_timeout_s``; the function
    is then silent: later PUTs placed there store the chunk elsewhere at once, GETs still
    answer, and once the function answers again it takes chunks again."""
    d = store.daemon
    with StoreClient(store.address, store.token, codec=Codec(10, 2)) as c:
        for i in range(6):
            c.put(f"warm{i}", b"w" * 4096)
        coded = os.urandom(48 << 10)
        with StoreClient(store.address, store.token, codec=Codec(2, 1, threshold=4096)) as c2:
            c2.put("coded", coded)  # 3 chunks, one per function of the group
        assert d.wait_uploads(30)  # out of the buffer: a GET reads the functions
        stopped = d.table.latest("coded").stripes[0].places[0][0]  # holds data chunk 0
        h = d.handles[stopped]
        pids = [i.pid for i in store.platform.instances(h.name)]
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            n = 0
            while not h.silent:  # until a PUT is placed on it and times out there
                assert n < 12, "no PUT was placed on the stopped function"
                c.put(f"k{n}", b"k" * 4096)
                n += 1
            assert d.counters["silent_functions"] == 1
            data = os.urandom(4096)
            took = []
            for m in range(24):  # placed on it again and again: never waited for
                t = time.monotonic()
                c.put(f"later{m}", data)
                took.append(time.monotonic() - t)
                assert d.table.latest(f"later{m}").stripes[0].places[0][0] != stopped
            assert d.counters.get("chunks_not_sent_to_silent", 0) >= 1
            assert max(took) < TIMEOUT_S / 2, took
            assert all(c.get(f"later{m}") == data for m in range(24))
            t = time.monotonic()  # first-d asks the parity chunk at once, not after get_straggler_s
            assert c.get("coded") == coded
            assert time.monotonic() - t < d.config.get_straggler_s
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        d.function_memory(h.name, timeout_s=10)  # answered after its late replies: it answers again
        assert not h.silent
