"""The daemon's I/O paths driven through their narrow Protocols with small in-memory
doubles, no daemon: the GC window's instructions (``_gc_io.carry_out`` over a
``GcHost``), a GET's first-d collection (``_collect.Collector`` over a ``GetHost``,
functions that answer on a socket pair), a connection's authentication
(``_session.admit`` over a ``SessionHost``) and a PUT (``_put.PutPath`` over a
``PutHost``: the real store core and buffer, functions that keep what they are sent).
Each double records what the path did."""

from __future__ import annotations

import os
import socket
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from storage_functions.throttle import HostLink
from storage_functions.auth import mint_run_token
from storage_functions.daemon._buffer import PersistentBuffer
from storage_functions.daemon._collect import Collector
from storage_functions.daemon._config import DaemonConfig
from storage_functions.daemon._gc_io import ReadNotes, carry_out
from storage_functions.daemon._lanes import Lanes
from storage_functions.daemon._objects import ObjectVersion, Stripe, chunk_key
from storage_functions.daemon._outbox import BufferPool, Outbox
from storage_functions.daemon._placement import PlaceChunk
from storage_functions.daemon._put import PutPath
from storage_functions.daemon._session import admit
from storage_functions.daemon._state import StoreState
from storage_functions.daemon._store_events import Event, Freed, Instruction, Migrate, Migrated, Retire, Upload
from storage_functions.exceptions import ProtocolError
from storage_functions.protocol import Frame, Op, Status, pack_header, recv_exact, recv_frame, send_frame

Reply = Callable[[Frame | None, "socket.socket | None"], None]


def _reply(status: int = Status.OK, paylen: int = 0) -> Frame:
    return Frame(Op.REPLY, status, 0, "", {}, 0, 0, 0, paylen)


# -- the GC window's I/O -------------------------------------------------------------------
class _Function:
    """A storage function's connection: records requests; answers them when told."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.released = 0
        self.requests: list[tuple[int, str, dict[str, Any]]] = []
        self.replies: list[Reply] = []

    def release(self) -> bool:
        self.released += 1
        return True

    def request(self, op: int, key: str, on_reply: Reply, *, a: int = 0, b: int = 0, crc: int = 0,
                meta: dict[str, Any] | None = None, payload: Any = None, large: bool = False) -> None:
        self.requests.append((op, key, {"a": a, "b": b, "crc": crc, "meta": meta, "large": large}))
        self.replies.append(on_reply)


class _GcHost:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.functions: dict[int, _Function] = {}
        self.events: list[Event] = []

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def _handle(self, index: int) -> _Function:
        return self.functions.setdefault(index, _Function(index))

    def _do(self, ev: Event) -> list[Instruction]:
        self.events.append(ev)
        return []


def _uploaded_version() -> ObjectVersion:
    st = Stripe(d=2, p=1, fs=100, ol=200, cl=100, crcs=[11, 22, 33], places=[(0, 0, 0), None, (2, 0, 0)],
                offset=40)
    return ObjectVersion(key="r/obj", version=3, size=200, stripes=[st], state="ready", uploaded=True,
                         cos_key="sion/r/obj.3")


def test_a_retire_releases_its_function_and_counts_why() -> None:
    host = _GcHost()
    assert carry_out(host, Retire(fn=4, reason="empty")) is True
    assert carry_out(host, Retire(fn=5, reason="window")) is True
    assert (host.functions[4].released, host.functions[5].released) == (1, 1)
    assert host.counts == Counter(gc_released_functions=2, gc_emptied_functions=1)
    assert carry_out(host, Freed(versions=1)) is False  # not the GC window's: left to the caller
    assert host.events == []


def test_a_migration_loads_the_chunk_from_cos_and_reports_to_the_core() -> None:
    host = _GcHost()
    obj = _uploaded_version()
    assert carry_out(host, Migrate(obj=obj, stripe=0, index=1, place=(7, 5, 300))) is True
    ((op, key, kw),) = host.functions[7].requests
    # the newest bucket's function loads it itself from the version's COS copy, into block 5 at 300
    assert (op, key) == (Op.RECOVER, chunk_key("r/obj", 3, 0, 1))
    assert kw == {"a": 5, "b": 300, "crc": 22, "meta": {"src": "sion/r/obj.3", "off": 140, "len": 100},
                  "large": True}
    assert host.counts == Counter(compaction_cos_reads=1) and host.events == []  # nothing before its reply
    host.functions[7].replies[0](_reply(), None)
    assert host.counts == Counter(compaction_cos_reads=1, compacted_chunks=1)
    ((ev,),) = [host.events]
    assert isinstance(ev, Migrated) and (ev.obj, ev.stripe, ev.index, ev.place, ev.ok) == (obj, 0, 1, (7, 5, 300), True)


def test_a_failed_or_lost_migration_is_reported_as_not_ok() -> None:
    host = _GcHost()
    obj = _uploaded_version()
    carry_out(host, Migrate(obj=obj, stripe=0, index=1, place=(7, 5, 300)))
    carry_out(host, Migrate(obj=obj, stripe=0, index=0, place=(8, 1, 0)))
    host.functions[7].replies[0](_reply(Status.ERROR), None)  # the function could not read COS
    host.functions[8].replies[0](None, None)  # its connection was lost
    assert host.counts["compaction_failures"] == 2 and host.counts["compacted_chunks"] == 0
    assert [(e.index, e.ok) for e in host.events if isinstance(e, Migrated)] == [(1, False), (0, False)]


# -- a GET's first-d collection --------------------------------------------------------------
class _Holder:
    """A storage function holding chunks: answers a GET on a socket pair (as a function's
    reader thread does: the frame, then the payload on the socket), or fails it."""

    def __init__(self, chunks: dict[str, bytes], *, fail: bool = False) -> None:
        self.state = "active"
        self.silent = False
        self.chunks = chunks
        self.fail = fail
        self.asked: list[str] = []
        self.socks: list[socket.socket] = []

    def request(self, op: int, key: str, on_reply: Reply, *, a: int = 0, b: int = 0, crc: int = 0,
                meta: dict[str, Any] | None = None, payload: Any = None, large: bool = False) -> None:
        assert op == Op.GET
        self.asked.append(key)
        if self.fail or key not in self.chunks:
            on_reply(_reply(Status.NOT_FOUND), None)
            return
        ours, theirs = socket.socketpair()
        self.socks += [ours, theirs]
        data = self.chunks[key]
        theirs.sendall(data)
        on_reply(_reply(paylen=len(data)), ours)


class _NoRecovery:
    def route(self, obj: ObjectVersion, s: int, i: int) -> int | None:
        return None

    def busy(self, fn: int) -> bool:
        return False

    def unroute(self, obj: ObjectVersion, s: int, i: int) -> None:
        pass


class _GetHost:
    def __init__(self, handles: list[_Holder]) -> None:
        self.config = DaemonConfig()
        self.pool = BufferPool()
        self.handles = handles
        self.recovery = _NoRecovery()
        self.reads = ReadNotes(False)
        self.cache_functions = None
        self.counts: Counter[str] = Counter()
        self.kicks = 0

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def kick(self) -> None:
        self.kicks += 1


@pytest.fixture
def client() -> Iterator[tuple[Outbox, socket.socket]]:
    ours, theirs = socket.socketpair()
    out = Outbox(ours)
    theirs.settimeout(10)
    yield out, theirs
    out.close()
    ours.close()
    theirs.close()


def _coded(data: bytes, holders: list[_Holder]) -> ObjectVersion:
    """A version of one stripe, d=2 + p=1, chunk i on function i (parity: its own bytes)."""
    chunks = [data[:4], data[4:], b"PPPP"]
    st = Stripe(d=2, p=1, fs=4, ol=len(data), cl=4, crcs=[zlib.crc32(c) for c in chunks],
                places=[(i, 0, 0) for i in range(3)])
    obj = ObjectVersion(key="r/k", version=1, size=len(data), stripes=[st], state="ready")
    for i, h in enumerate(holders):
        h.chunks[chunk_key("r/k", 1, 0, i)] = chunks[i]
    return obj


def _collector(host: _GetHost, out: Outbox, obj: ObjectVersion) -> Collector:
    """As the GET path makes one: its reply's head first, then chunks, then END."""
    return Collector(host, Lanes(out).open(obj.size), obj, 9, pack_header(Op.REPLY, reqid=9, meta=obj.head_json()),
                     window=0, extra=0)


def _read_reply(sock: socket.socket) -> tuple[Frame, dict[int, bytes], Frame]:
    """(the REPLY head, chunk index -> bytes, the END frame) of one GET reply."""
    head = recv_frame(sock)
    assert head is not None and head.op == Op.REPLY and head.status == Status.OK
    chunks: dict[int, bytes] = {}
    while True:
        f = recv_frame(sock)
        assert f is not None
        if f.op == Op.END:
            return head, chunks, f
        assert f.op == Op.CHUNK and f.a == 0
        chunks[f.b] = bytes(recv_exact(sock, f.paylen))


def test_first_d_asks_the_data_chunks_and_streams_them_to_the_client(
        client: tuple[Outbox, socket.socket]) -> None:
    out, peer = client
    holders = [_Holder({}) for _ in range(3)]
    obj = _coded(b"abcdefgh", holders)
    host = _GetHost(holders)
    _collector(host, out, obj).start()
    assert [h.asked for h in holders] == [[chunk_key("r/k", 1, 0, 0)], [chunk_key("r/k", 1, 0, 1)], []]
    head, chunks, end = _read_reply(peer)
    assert (head.reqid, head.meta) == (9, obj.head())
    assert chunks == {0: b"abcd", 1: b"efgh"}  # the first d; parity never asked
    assert (end.reqid, end.status) == (9, Status.OK)
    # nothing missing, no watchdog needed; the GET was served from the functions holding its chunks
    assert host.counts == Counter({"gets_from_functions": 1}) and host.kicks == 0
    for h in holders:
        for s in h.socks:
            s.close()


def test_a_failed_data_chunk_is_replaced_by_parity_and_counted(client: tuple[Outbox, socket.socket]) -> None:
    out, peer = client
    holders = [_Holder({}), _Holder({}, fail=True), _Holder({})]
    obj = _coded(b"abcdefgh", holders)
    host = _GetHost(holders)
    _collector(host, out, obj).start()
    _, chunks, end = _read_reply(peer)
    assert end.status == Status.OK
    assert chunks == {0: b"abcd", 2: b"PPPP"}  # chunk 1's function failed it: the parity chunk instead
    assert [len(h.asked) for h in holders] == [1, 1, 1]
    assert host.counts == Counter(missing_chunks=1, gets_from_functions=1)   # parity from a function: still memory
    for h in holders:
        for s in h.socks:
            s.close()


# -- a connection's authentication -----------------------------------------------------------
class _Proves:
    def __init__(self, secret: str) -> None:
        self.secret = secret

    def proves(self, secret: Any) -> bool:
        return secret == self.secret


class _SessionHost:
    """Only what ``admit`` touches: the config (the store token), the function handles by
    name, the counters."""

    def __init__(self) -> None:
        self.config = DaemonConfig(token="store-token")
        self._by_name = {"sion-0": _Proves("s3cret")}
        self.counts: Counter[str] = Counter()

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


def _hello(**meta: Any) -> Frame:
    return Frame(Op.HELLO, 0, 5, "", meta, 0, 0, 0, 0)


@pytest.mark.parametrize("meta", [
    {"role": "client", "token": "wrong"},
    {"role": "client"},
    {"role": "function", "name": "sion-0", "secret": "guess"},
    {"role": "function", "name": "sion-9", "secret": "s3cret"},
    {"role": "function", "name": 7, "secret": "s3cret"},
])
def test_a_peer_that_does_not_prove_itself_gets_no_thread_and_an_auth_reply(meta: dict[str, Any]) -> None:
    host = _SessionHost()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert admit(host, ours, _hello(**meta)) is None  # type: ignore[arg-type]
        f = recv_frame(theirs)
        assert f is not None and (f.op, f.reqid, f.status) == (Op.REPLY, 5, Status.AUTH)
    assert host.counts == Counter(auth_failures=1)


@pytest.mark.parametrize("meta", [
    {"role": "client", "token": "store-token"},
    {"role": "client", "token": mint_run_token("store-token", "run-1")},
    {"role": "function", "name": "sion-0", "secret": "s3cret"},
])
def test_a_peer_that_proves_itself_is_handed_its_session_and_nothing_is_sent_yet(meta: dict[str, Any]) -> None:
    host = _SessionHost()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        run = admit(host, ours, _hello(**meta))  # type: ignore[arg-type]
        assert callable(run)
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):  # the welcome is the session thread's to send
            theirs.recv(1)
    assert host.counts == Counter()


def test_a_hello_of_no_known_role_is_a_protocol_error() -> None:
    host = _SessionHost()
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(ProtocolError, match="role must be 'client' or 'function', got 'admin'"):
        admit(host, ours, _hello(role="admin", token="store-token"))  # type: ignore[arg-type]




# -- a PUT ----------------------------------------------------------------------------------
class _Storing:
    """A storage function that keeps the chunks it is sent (streamed or whole), or fails
    every one."""

    def __init__(self, index: int, *, fail: bool = False) -> None:
        self.index = index
        self.fail = fail
        self.silent = False
        self.last_died = 0.0
        self.stored: dict[str, tuple[int, int, bytes]] = {}  # chunk key -> (block, offset, bytes)

    def mark_silent(self) -> bool:
        return False

    def _answer(self, key: str, block: int, off: int, data: bytes, on_reply: Reply) -> None:
        if self.fail:
            on_reply(_reply(Status.ERROR), None)
            return
        self.stored[key] = (block, off, data)
        on_reply(_reply(), None)

    def request_put_stream(self, key: str, block: int, offset: int, crc: int, length: int,
                           write: Callable[[Any], None] | None, on_reply: Reply, *, large: bool = True,
                           payload: Any = None) -> None:
        if payload is None:
            sink = bytearray()
            write(SimpleNamespace(sendall=sink.extend))  # type: ignore[misc]
            payload = sink
        self._answer(key, block, offset, bytes(payload), on_reply)  # a copy: the view is the path's scratch

    def request(self, op: int, key: str, on_reply: Reply, *, a: int = 0, b: int = 0, crc: int = 0,
                meta: dict[str, Any] | None = None, payload: Any = None, large: bool = False) -> None:
        assert op == Op.PUT  # a chunk stored again, from the buffer
        self._answer(key, a, b, bytes(payload), on_reply)


class _Put(PutPath):
    """The PUT path over a ``PutHost`` double: the real store core (``StoreState``) and
    persistent buffer, storage functions that keep what they are sent."""

    def __init__(self, tmp: str, failing: frozenset[int] = frozenset()) -> None:
        self.config = DaemonConfig(block_size=64 << 10, function_memory_mb=128, group_size=3, max_functions=6,
                                   put_timeout_s=5.0)
        c = self.config
        self.state = StoreState(PlaceChunk(group_size=c.group_size, hardcap=c.hardcap, block_size=c.block_size,
                                           max_functions=c.max_functions, capacity=c.capacity),
                                block_size=c.block_size)
        self.buffer = PersistentBuffer(tmp, None, direct_io=False)
        self.host_link = HostLink(0.0)          # no modelled NIC
        self.functions = [_Storing(i, fail=i in failing) for i in range(c.max_functions)]
        self.counts: Counter[str] = Counter()
        self.instructions: list[Instruction] = []

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def _do(self, ev: Event) -> list[Instruction]:
        out = self.state.handle(ev)
        self.instructions += out
        return out

    def _handle(self, index: int) -> _Storing:  # type: ignore[override]
        return self.functions[index]


def _send_put(sock: socket.socket, chunks: list[bytes], ol: int) -> tuple[Frame, threading.Thread]:
    """What a client sends after its PUT frame (one stripe, d=2 + p=1), on a thread (more
    than a socket pair holds); the PUT frame, and the thread to join."""
    payload = b"".join(chunks)
    meta = {"d": 2, "p": 1, "fs": len(chunks[0]), "ol": ol, "crcs": [zlib.crc32(c) for c in chunks]}
    t = threading.Thread(target=send_frame, args=(sock, Op.STRIPE), kwargs={"meta": meta, "payload": payload})
    t.start()
    return Frame(Op.PUT, 0, 1, "r/obj", {"size": ol, "n": 1}, 0, 0, 0, 0), t


@pytest.mark.parametrize("large", [False, True], ids=["whole", "streamed"])
def test_a_put_sends_each_chunk_where_the_core_placed_it_and_keeps_it_in_the_buffer(tmp_path: Any,
                                                                                      large: bool) -> None:
    cl = 80_000 if large else 1000  # above 64 KiB a chunk streams through as it arrives
    chunks = [os.urandom(cl) for _ in range(3)]
    put = _Put(str(tmp_path))
    client, ours = socket.socketpair()
    try:
        f, sender = _send_put(client, chunks, 2 * cl)
        p = put._put_send(ours, f, bytearray(1 << 20))
        sender.join()
        assert put._put_finish(p) == {"version": p.obj.version, "size": 2 * cl}
        # the buffer holds the version's bytes (what GETs read until COS has it)
        assert [put.buffer.read(p.obj, p.obj.chunk_offset(0, i), cl) for i in range(3)] == chunks
    finally:
        client.close()
        ours.close()
        put.buffer.close()
    obj = put.state.table.latest("r/obj")
    assert obj is p.obj and obj.state == "ready"
    places = obj.stripes[0].places
    assert len({pl[0] for pl in places if pl is not None}) == 3  # three distinct functions of a group
    for i, place in enumerate(places):
        assert place is not None
        fn, block, off = place
        assert put.functions[fn].stored[chunk_key("r/obj", obj.version, 0, i)] == (block, off, chunks[i])
    assert put.counts == Counter(puts=1)
    assert any(isinstance(x, Upload) for x in put.instructions)  # readable, and handed to the uploader


def test_a_chunk_its_function_failed_is_stored_again_elsewhere_from_the_buffer(tmp_path: Any) -> None:
    chunks = [os.urandom(1000) for _ in range(3)]
    probe = _Put(str(tmp_path / "probe"))  # where the core places the first object: the failing one is its chunk 1's
    client, ours = socket.socketpair()
    with client, ours:
        f, sender = _send_put(client, chunks, 2000)
        first = probe._put_send(ours, f, bytearray(1 << 20)).obj.stripes[0].places[1]
        sender.join()
    probe.buffer.close()
    assert first is not None
    put = _Put(str(tmp_path / "put"), failing=frozenset({first[0]}))
    client, ours = socket.socketpair()
    try:
        f, sender = _send_put(client, chunks, 2000)
        p = put._put_send(ours, f, bytearray(1 << 20))
        sender.join()
        put._put_finish(p)
    finally:
        client.close()
        ours.close()
        put.buffer.close()
    place = p.obj.stripes[0].places[1]
    assert place is not None and place[0] != first[0]  # elsewhere, not on the failing function
    key = chunk_key("r/obj", p.obj.version, 0, 1)
    assert put.functions[place[0]].stored[key][2] == chunks[1]  # the bytes, read back from the buffer
    assert not put.functions[first[0]].stored
    assert put.counts == Counter(puts=1, chunk_retries=1)
