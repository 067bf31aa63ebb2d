"""SION's two request queues on real storage functions: a small GET is served by a function
while the same function is in the middle of sending a large object (the runtime's small
connection and its own thread, the daemon's per-request lanes), not queued behind it.

The large transfer is held mid-way by its reader: the client reads the first stripe of a
64 MiB GET and stops, so the function's send of its chunk blocks on the full connection
(and a bandwidth throttle on every function keeps it sending meanwhile). A small GET that
waited for the large one would wait forever; here it must complete, from the same
function, while the large stream is still open, and the large one then completes intact."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

MiB = 1 << 20


@pytest.fixture
def store() -> Iterator[LocalStore]:
    # three functions, a 2+1 code: every function holds a chunk of the large object
    with LocalStore(function_memory_mb=512, idle_s=30.0, max_functions=3, group_size=3,
                    max_object_bytes=128 * MiB, function_send_mbps=40, check_state=True) as st:
        yield st


def _holders(store: LocalStore, key: str) -> set[str]:
    obj = store.daemon.table.latest(key)
    assert obj is not None
    return {pl[0] for s in obj.stripes for pl in s.places if pl}


def test_a_small_get_completes_while_the_same_function_sends_a_large_object(store: LocalStore) -> None:
    big, small = os.urandom(64 * MiB), os.urandom(4096)
    codec = Codec(2, 1)
    with StoreClient(store.address, store.token, codec=codec) as writer:
        writer.put("big", big)
        writer.put("small", small)
    assert store.daemon.wait_uploads(120)
    shared = _holders(store, "small") & _holders(store, "big")
    assert shared, "the small object must live on a function that holds a chunk of the large one"
    with StoreClient(store.address, store.token, codec=codec) as reader_big, \
            StoreClient(store.address, store.token, codec=codec) as reader_small:
        stream = reader_big.get_stream("big")
        pieces = iter(stream)
        first = bytes(next(pieces))  # the large transfer is under way; its reader now stops
        small_done = threading.Event()
        got: list[bytes] = []

        def read_small() -> None:
            got.append(reader_small.get("small"))
            small_done.set()

        t = threading.Thread(target=read_small, daemon=True)
        t.start()
        # the large GET cannot finish while its stream is held: the small one finishes first or never
        assert small_done.wait(30), "a 4 KiB GET waited behind a held 64 MiB transfer on the same function"
        assert got == [small]
        rest = b"".join(bytes(p) for p in pieces)
        stream.close()
        t.join()
    assert first + rest == big
