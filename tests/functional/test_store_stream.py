"""Streaming values over the real embedded store: ``StoreClient.put_stream``
(stripes pulled from a file as they are sent) and ``StoreClient.get_stream``
/ ``get_to`` (stripes handed out as they complete), with bounded memory; plus
a scripted daemon for chunk orders the real one produces only by chance."""

from __future__ import annotations

import io
import os
import socket
import threading
import tracemalloc
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import NotEnoughChunks, ObjectTooLarge, ProtocolError, UnknownKey
from storage_functions.protocol import Op, Status, drain, recv_frame, send_frame

from . import test_store_local

MiB = 1 << 20
STRIPE = 4 * MiB


# the embedded store of test_store_local (512 MiB functions, debug ops, 64 MiB objects), one per module
store = test_store_local.store


@pytest.fixture
def client(store: LocalStore) -> Iterator[StoreClient]:
    """4+2 chunks, stripes of at most 4 MiB: a 20 MiB object is six stripes."""
    c = StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=STRIPE))
    yield c
    c.close()


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _drained(c: StoreClient) -> None:
    """The client's pooled connections are in step: requests on all of them work."""
    c.put("probe", b"probe")
    socks = [c._borrow() for _ in range(len(c._idle) + 1)]
    for s in socks:
        c._give_back(s)
    for _ in socks:
        assert c.get("probe") == b"probe"
        assert c.stats()["functions"] is not None


SIZES = [0, 1, MiB - 2, MiB - 1, MiB, 20 * MiB + 3]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_files(client: StoreClient, tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    src = _file(tmp_path, "in.bin", data)
    with open(src, "rb") as f:
        res = client.put_stream(f"st-{size}", f.read, size)
    assert (res.size, res.coded) == (size, size > MiB)
    assert res.stripes == len(client.codec.plan(size))
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        assert client.get_to(f"st-{size}", f.write) == size
    assert out.read_bytes() == data
    assert client.get(f"st-{size}") == data  # put_stream -> get
    client.put(f"pl-{size}", data)  # put -> get_stream
    with client.get_stream(f"pl-{size}") as s:
        assert s.size == size and s.readable()
        pieces = list(s)
    assert all(len(p) for p in pieces)
    assert b"".join(pieces) == data
    assert sum(len(p) for p in pieces) == size


def test_prefix_is_part_of_the_object(client: StoreClient, tmp_path: Path) -> None:
    for size in (0, 5, MiB - 1, 9 * MiB + 1):
        data = os.urandom(size)
        with open(_file(tmp_path, "p.bin", data), "rb") as f:
            res = client.put_stream(f"pre-{size}", f, size, prefix=b"\x07")  # the file object itself
        assert res.size == size + 1 and res.coded == (size + 1 > MiB)
        assert client.get(f"pre-{size}") == b"\x07" + data
        with client.get_stream(f"pre-{size}") as s:
            assert s.read(1) == b"\x07"
            assert s.read() == data


def test_same_stored_object_either_way(store: LocalStore, client: StoreClient) -> None:
    data = os.urandom(6 * MiB + 11)
    a = client.put("either-a", b"\x02" + data)
    b = client.put_stream("either-b", io.BytesIO(data).read, len(data), prefix=b"\x02")
    assert (a.size, a.stripes, a.coded) == (b.size, b.stripes, b.coded)
    sa = store.daemon.table.latest("either-a").stripes
    sb = store.daemon.table.latest("either-b").stripes
    assert [(s.d, s.p, s.fs, s.ol, s.cl, s.crcs) for s in sa] == [(s.d, s.p, s.fs, s.ol, s.cl, s.crcs) for s in sb]


def test_file_api_read_readinto_and_iteration_mix(client: StoreClient) -> None:
    data = os.urandom(9 * MiB + 5)
    client.put("mix", data)
    with client.get_stream("mix") as s:
        assert s.version >= 1 and not s.closed
        got = bytearray(s.read(10))
        buf = bytearray(MiB + 3)
        n = s.readinto(buf)
        assert n == len(buf)
        got += buf
        got += next(s)  # the rest of the current piece first
        for piece in s:
            got += piece
        assert s.read(5) == b"" and s.readinto(bytearray(5)) == 0
    assert s.closed
    assert bytes(got) == data
    with pytest.raises(ValueError, match="closed"):
        s.read(1)


def test_early_close_then_the_client_is_reused(client: StoreClient) -> None:
    big, small = os.urandom(20 * MiB + 3), os.urandom(MiB + 1)
    client.put("close-big", big)
    client.put("close-small", small)
    for _ in range(3):
        with client.get_stream("close-big") as s:  # most of the reply still to come: the connection is closed
            assert s.read(100) == big[:100]
        assert s.closed
        _drained(client)
        idle = len(client._idle)
        s = client.get_stream("close-small")  # one stripe: received whole, the connection is back at once
        assert s.read(10) == small[:10]
        s.close()
        assert len(client._idle) == max(idle, 1)
        _drained(client)
        s = client.get_stream("close-big")
        s.close()  # closed before reading anything
        _drained(client)
    assert client.get("close-big") == big


def test_errors(client: StoreClient) -> None:
    with pytest.raises(UnknownKey, match="'nope': no such object"):
        client.get_stream("nope")
    _drained(client)
    with pytest.raises(ObjectTooLarge, match="over the store's maximum"):
        client.put_stream("huge", io.BytesIO(bytes(65 * MiB)).read, 65 * MiB)
    limited = StoreClient(client.addr, client.token, max_object_bytes=10)
    with limited, pytest.raises(ObjectTooLarge, match="over the maximum of 10 bytes"):
        limited.put_stream("huge", lambda n: pytest.fail("read before the size check"), 10, prefix=b"x")
    _drained(client)


@pytest.mark.parametrize("size", [100, 3 * MiB, 20 * MiB + 3])
def test_short_file_is_a_clear_error(client: StoreClient, tmp_path: Path, size: int) -> None:
    path = _file(tmp_path, "short.bin", os.urandom(size - 7))
    with open(path, "rb") as f, pytest.raises(ValueError, match=f"expected {size} bytes, got {size - 7}"):
        client.put_stream(f"short-{size}", f.read, size)
    with pytest.raises(UnknownKey):
        client.get(f"short-{size}")  # nothing half-written became readable
    _drained(client)


def test_parity_decode_while_streaming(store: LocalStore, client: StoreClient) -> None:
    data = os.urandom(10 * MiB + 1)
    client.put("stream-parity", data)
    assert store.daemon.wait_uploads(20)
    for s in range(3):
        assert store.daemon.corrupt_chunk("stream-parity", s, 0)
    with client.get_stream("stream-parity") as st:
        assert b"".join(st) == data


def _peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _consume(c: StoreClient, key: str) -> None:
    with c.get_stream(key) as s:
        for piece in s:
            del piece


def test_memory_stays_bounded_by_stripes_not_the_object(store: LocalStore, client: StoreClient,
                                                        tmp_path: Path) -> None:
    size = 40 * MiB + 3
    path = _file(tmp_path, "big.bin", os.urandom(size))
    stripe = client.codec.plan(size)[0][1]
    store.daemon.buffer.paused.clear()  # keep it in the persistent buffer: the daemon sends stripes in order
    try:
        def put() -> None:
            with open(path, "rb") as f:
                client.put_stream("mem", f.read, size)
        put_peak = _peak(put)
        _consume(client, "mem")  # warm
        ordered = min(_peak(lambda: _consume(client, "mem")) for _ in range(2))
    finally:
        store.daemon.buffer.paused.set()
    assert store.daemon.wait_uploads(30)
    _consume(client, "mem")  # from function memory: chunks of later stripes arrive early
    from_memory = _peak(lambda: _consume(client, "mem"))
    whole = _peak(lambda: client.get_buffer("mem"))
    print(f"stripe {stripe / MiB:.1f} MiB; peaks: put_stream {put_peak / MiB:.1f} MiB, get_stream ordered "
          f"{ordered / MiB:.1f} MiB, from memory {from_memory / MiB:.1f} MiB, get_buffer {whole / MiB:.1f} MiB")
    assert whole >= size
    # put_stream: the stripe being read and encoded, its d+p chunks and the previous stripe's (freed only once
    # the next ones exist: freeing them first costs ~40% of PUT speed in page faults), plus the daemon's share
    # (it runs in this process)
    assert put_peak < 6 * stripe
    assert ordered < 2 * stripe
    # the daemon forwards chunks as functions answer, so later stripes may arrive before earlier ones
    # complete; the stream keeps only the chunks that did arrive, never more than the object
    assert from_memory < size + stripe
    with open(path, "rb") as f:
        want = f.read()
    assert client.get("mem") == want
    client.free(["mem"])


def test_get_survives_a_function_killed_mid_stream() -> None:
    with LocalStore(idle_s=1.0, function_memory_mb=256, get_straggler_s=0.2) as st, \
            StoreClient(st.address, st.token, codec=Codec(4, 2, stripe_size=MiB)) as c:
        data = os.urandom(24 * MiB + 5)
        c.put("kill", data)
        assert st.daemon.wait_uploads(30)
        obj = st.daemon.table.latest("kill")
        victims = {st.daemon.handles[obj.stripes[-1].places[i][0]].name for i in range(2)}
        got = bytearray()
        with c.get_stream("kill") as s:  # the reply has begun; this client reads nothing yet, so the
            for name in victims:  # daemon soon stops forwarding (socket buffers full)
                st.platform.kill(name)
            for piece in s:
                got += piece
        # (most runs here the killed functions still owed chunks: missing_chunks > 0; in the others
        # every chunk was already in socket buffers, which is a pass too)
        assert bytes(got) == data
        assert c.get("kill") == data


# -- a scripted daemon: chunk orders and replies the real one makes only by chance ------------
def _scripted(frames: Callable[[socket.socket], None]) -> tuple[StoreClient, socket.socket, threading.Thread]:
    """A client whose one pooled connection is answered by ``frames``."""
    ours, theirs = socket.socketpair()
    c = StoreClient(("127.0.0.1", 1), "t", codec=Codec(4, 2, stripe_size=MiB))
    c._idle.append(ours)

    def serve() -> None:
        f = recv_frame(theirs)
        assert f is not None and f.op == Op.GET
        drain(theirs, f.paylen)
        try:
            frames(theirs)
        except OSError:  # the client closed its end
            pass

    t = threading.Thread(target=serve)
    t.start()
    return c, theirs, t


def _head(sock: socket.socket, codec: Codec, data: bytes, size: int | None = None) -> list[tuple[Any, list[Any]]]:
    stripes = list(codec.stripes(data))
    meta = {"version": 3, "size": len(data) if size is None else size,
            "stripes": [{"d": i.d, "p": i.p, "fs": i.fs, "ol": i.ol, "cl": i.cl} for i, _ in stripes]}
    send_frame(sock, Op.REPLY, meta=meta)
    return stripes


def _data_chunks_and_end(sock: socket.socket, stripes: list[tuple[Any, list[Any]]]) -> None:
    for s, (info, chunks) in enumerate(stripes):
        for i in range(info.d):
            send_frame(sock, Op.CHUNK, a=s, b=i, payload=chunks[i])
    send_frame(sock, Op.END)


def test_interleaved_parity_and_surplus_chunks() -> None:
    codec = Codec(4, 2, stripe_size=MiB)
    data = os.urandom(3 * MiB + 1)

    def frames(sock: socket.socket) -> None:
        stripes = _head(sock, codec, data)
        order = [(2, 0), (2, 1), (2, 4), (1, 3), (2, 2),  # stripe 2 complete first (one parity chunk)
                 (2, 5),  # a surplus chunk of a complete stripe
                 (1, 0), (1, 1), (1, 2), (0, 5), (0, 4), (0, 1), (0, 3), (3, 0), (3, 1), (3, 2), (3, 3)]
        for s, i in order:
            send_frame(sock, Op.CHUNK, a=s, b=i, payload=stripes[s][1][i])
        send_frame(sock, Op.END)

    c, theirs, t = _scripted(frames)
    with c, theirs:
        with c.get_stream("k") as s:
            assert (s.size, s.version) == (len(data), 3)
            assert b"".join(s) == data
        t.join(10)
        assert len(c._idle) == 1  # the whole reply was read: the connection is back


def test_an_error_end_mid_stream_raises_and_keeps_the_connection() -> None:
    codec = Codec(4, 2, stripe_size=MiB)
    data = os.urandom(2 * MiB + 1)

    def frames(sock: socket.socket) -> None:
        stripes = _head(sock, codec, data)
        for i in range(4):
            send_frame(sock, Op.CHUNK, a=0, b=i, payload=stripes[0][1][i])
        send_frame(sock, Op.END, status=Status.NOT_ENOUGH, payload=b"stripe 1 has 2 of 4 chunks")

    c, theirs, t = _scripted(frames)
    with c, theirs:
        s = c.get_stream("k")
        assert len(next(s)) > 0
        with pytest.raises(NotEnoughChunks, match="stripe 1 has 2 of 4"):
            list(s)
        s.close()
        t.join(10)
        assert len(c._idle) == 1


@pytest.mark.parametrize("size", [3 * MiB // 2, 4 * MiB - 5], ids=["drained", "closed"])
def test_close_drains_a_short_remainder_else_closes(size: int) -> None:
    codec = Codec(4, 2, stripe_size=MiB)
    data = os.urandom(size)

    def frames(sock: socket.socket) -> None:
        _data_chunks_and_end(sock, _head(sock, codec, data))

    c, theirs, t = _scripted(frames)
    with c, theirs:
        s = c.get_stream("k")
        assert s.read(10) == data[:10]
        s.close()
        if size < 2 * MiB:  # under a MiB still to come: read to the END, the connection goes back
            assert len(c._idle) == 1
        else:
            assert c._idle == []  # the daemon's side sees the connection go
        t.join(10)
        assert not t.is_alive()


def test_a_reply_whose_stripes_do_not_cover_the_object_is_refused() -> None:
    """``get`` receives into uninitialised memory (``sdk._fresh``): a head whose stripes
    hold fewer bytes than the object's size would leave some of it unwritten."""
    codec = Codec(4, 2, stripe_size=MiB)
    data = os.urandom(2 * MiB)

    def frames(sock: socket.socket) -> None:
        _data_chunks_and_end(sock, _head(sock, codec, data, size=len(data) + 4096))  # 4 KiB no stripe holds

    c, theirs, t = _scripted(frames)
    with c, theirs:
        with pytest.raises(ProtocolError, match="stripes hold 2097152 bytes of a 2101248-byte object"):
            c.get("k")
        t.join(10)
