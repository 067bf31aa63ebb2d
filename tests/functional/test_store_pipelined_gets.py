"""``StoreClient.get_many``: many GETs pipelined on one connection (sent
back to back, at most a window ahead of the replies read); the daemon
serves them at once and answers in request order, so coded objects' chunks
from different functions never interleave across replies; a missing key is
its own outcome; objects still in the persistent buffer and in function
memory mix; a request after pipelined GETs is answered after them; a peer
that pipelines and hangs up leaves the daemon serving everyone else."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from sdk._stream import FrameReader, read_head
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import UnknownKey
from storage_functions.protocol import Op, send_frame

MiB = 1 << 20


@pytest.fixture(scope="module")
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, group_size=6, max_functions=12, idle_s=30.0,
                    max_object_bytes=16 * MiB) as st:
        yield st


def _values(prefix: str, n: int) -> dict[str, bytes]:
    # single slices, and coded objects of several stripes (Codec(4, 2): 1 MiB stripes)
    return {f"{prefix}/{i}": os.urandom(4096 + i if i % 3 else 2 * MiB + 17 * i) for i in range(n)}


def test_pipelined_gets_of_coded_objects_come_back_whole_and_in_order(store: LocalStore) -> None:
    values = _values("order", 24)
    with StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        c.put_many([(k, v, None) for k, v in values.items()])
        assert store.daemon.wait_uploads(60)  # every GET is first-d from the functions, many at once
        keys = list(values) * 3  # longer than the pipeline window, and each key more than once
        before = store.daemon.counters["gets"]
        got = c.get_many(keys)
        assert [bytes(g) if isinstance(g, bytearray) else g for g in got] == [values[k] for k in keys]
        assert store.daemon.counters["gets"] - before == len(keys)


def test_a_missing_key_is_its_own_outcome_and_the_connection_stays_in_step(store: LocalStore) -> None:
    values = _values("missing", 6)
    with StoreClient(store.address, store.token, codec=Codec(4, 2), pool_size=1) as c:
        c.put_many([(k, v, None) for k, v in values.items()])
        keys = list(values)
        keys.insert(3, "missing/none")
        got = c.get_many(keys)
        assert isinstance(got[3], UnknownKey) and "missing/none" in str(got[3])
        assert [bytes(g) for i, g in enumerate(got) if i != 3] == list(values.values())  # type: ignore[arg-type]
        assert c.get("missing/1") == values["missing/1"]  # the same (only) pooled connection, in step


def test_objects_in_the_buffer_and_in_function_memory_mix() -> None:
    uploaded, buffered = _values("mix/up", 4), _values("mix/buf", 4)
    with LocalStore(function_memory_mb=256, group_size=6, max_functions=6, idle_s=30.0) as store, \
            StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        c.put_many([(k, v, None) for k, v in uploaded.items()])
        assert store.daemon.wait_uploads(60)
        store.daemon.buffer.paused.clear()  # the next PUTs stay in the persistent buffer
        try:
            c.put_many([(k, v, None) for k, v in buffered.items()])
            hits = store.daemon.counters.get("buffer_hits", 0)
            keys = [k for pair in zip(uploaded, buffered) for k in pair]
            got = c.get_many(keys)
            assert store.daemon.counters["buffer_hits"] - hits == len(buffered)
        finally:
            store.daemon.buffer.paused.set()
        assert [bytes(g) for g in got] == [{**uploaded, **buffered}[k] for k in keys]  # type: ignore[arg-type]


def test_a_put_after_pipelined_gets_is_answered_after_them(store: LocalStore) -> None:
    values = _values("then", 3)
    with StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        c.put_many([(k, v, None) for k, v in values.items()])
        assert store.daemon.wait_uploads(60)
        sock = c._borrow()
        try:
            for k in values:
                send_frame(sock, Op.GET, key=k)
            new = os.urandom(3 * MiB)
            c._send_put(sock, "then/new", c.codec.stripes(new), len(new), None)
            rd = FrameReader(sock, pipelined=True)
            for k, v in values.items():
                head, infos = read_head(rd)
                assert bytes(c._receive(rd, k, head, infos, None)[0]) == v
            reply = rd.frame()
            assert reply.op == Op.REPLY and int(reply.meta["version"]) >= 1
        finally:
            sock.close()
        assert c.get("then/new") == new


def test_a_peer_that_pipelines_and_hangs_up_leaves_the_daemon_serving(store: LocalStore) -> None:
    big = os.urandom(8 * MiB)
    with StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        c.put("hangup/big", big)
        assert store.daemon.wait_uploads(60)
        sock = c._borrow()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(200):  # far past the pipeline's byte budget, and nothing is ever read
            send_frame(sock, Op.GET, key="hangup/big")
        sock.close()
        with StoreClient(store.address, store.token, codec=Codec(4, 2)) as other:
            assert other.get_many(["hangup/big"] * 3) == [big] * 3
