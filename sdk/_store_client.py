"""The SDK's data client for the ServerlessMemory store: ``StoreClient``
talks to the client daemon over the framing of
``storage_functions.protocol``. Covers erasure coding on PUT (of a value in
memory, or of a file pulled stripe by stripe: ``put_stream``), per-chunk
checksums, first-d decode on GET (into one buffer, or streamed stripe by
stripe: ``get_stream``/``get_to``, receiving in ``sdk._stream``),
pipelined PUTs and GETs of many objects (``put_many``, ``get_many``: one
round trip each way),
delete/free, the SDK's own COS objects through the daemon (``cos_put``/
``cos_get``/``cos_delete``: the daemon holds the COS credentials and checks
the token's scope), a small connection pool for thread safety; not metadata
(allocation comes from the caller, see ``put(alloc=...)``). Imports only the stdlib and pyeclib, so a task Lambda
can carry it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from storage_functions.checksum import crc32
from storage_functions.exceptions import BufferTooSmall, ObjectTooLarge, ProtocolError, StorageError, StoreError
from storage_functions import tls
from storage_functions.protocol import (Op, Status, error_for, frame_bytes, recv_exact, recv_frame, send_frame,
                                        tune_socket)

from ._erasure import Codec, StripeInfo
from ._fresh import FRESH_MIN, fresh_bytearray, fresh_bytes
from ._stream import DONE, FrameReader, GetStream, StripeReceiver, open_get, read_head, read_inline

__all__ = ["StoreClient", "PutResult", "GetStream", "PUT_HINTS"]

#: What a PUT may tell the daemon of its object, from the metadata server's grant:
#: ``expires_at_ms``, the predicted expiry (Unix ms) for the write-behind; ``readers``, the
#: read count from the workflow graph (a many-reader object's copies go to cache functions
#: before the readers' GETs arrive).
PUT_HINTS = ("expires_at_ms", "readers")

#: The metadata server's placement of an object: per chunk index (one entry for an
#: uncoded slice, d+p for a coded object), ``(function, block, offset, length)``: where
#: the chunk starts and how many bytes are reserved for it there (the daemon lays the
#: stripes' chunks end to end in them and refuses a layout that does not fit).
Alloc = Sequence[tuple[str | int, int, int, int]]


@dataclass(frozen=True, slots=True)
class PutResult:
    key: str
    version: int
    size: int
    stripes: int
    coded: bool


class StoreClient:
    """``StoreClient(("127.0.0.1", port), token)``; thread-safe (each call
    borrows a pooled connection). ``tls_ca``: the deployment CA's PEM text; given, every
    connection is TLS and the daemon's certificate must name the host dialled."""

    def __init__(self, daemon_addr: tuple[str, int] | str, token: str, *, codec: Codec | None = None,
                 max_object_bytes: int | None = None, timeout: float = 120.0, pool_size: int = 16,
                 reconnect_s: float = 30.0, alive: Callable[[], bool] | None = None, tls_ca: str = "") -> None:
        if isinstance(daemon_addr, str):
            host, _, port = daemon_addr.rpartition(":")
            daemon_addr = (host or "127.0.0.1", int(port))
        self.addr = (daemon_addr[0], int(daemon_addr[1]))
        self.token = token
        self.codec = codec or Codec()
        self.max_object_bytes = max_object_bytes
        self.timeout = timeout
        self.pool_size = pool_size
        self.reconnect_s = reconnect_s  # a daemon restart: calls wait this long for it to return
        # whether the daemon may still come back (the stack it belongs to lives): asked when a
        # call finds it gone, False ends the wait at once (a dead stack's daemon never returns)
        self.alive = alive
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._tls = tls.client_context(tls_ca) if tls_ca else None

    # -- connections ----------------------------------------------------------
    def _connect(self) -> socket.socket:
        try:
            sock = tls.connect(self.addr, self.timeout, self._tls)
        except ssl.SSLError as exc:
            raise StoreError(tls.failure(exc, "the daemon", self.addr)) from None
        try:
            tune_socket(sock)
            send_frame(sock, Op.HELLO, meta={"role": "client", "token": self.token})
            f = recv_frame(sock)
            if f is None:
                raise ProtocolError("daemon closed the connection during HELLO" + (
                    "" if self._tls else " (if it serves TLS, give its CA: Endpoints.tls_ca, --stack ...,ca=PATH)"))
            if f.status != Status.OK:
                raise error_for(f.status, recv_exact(sock, f.paylen).decode(errors="replace"))
        except BaseException:
            sock.close()
            raise
        return sock

    def _borrow_until(self, deadline: float, delay: float) -> tuple[socket.socket, float]:
        """A pooled connection, dialling again with doubling waits (from ``delay``, at most 1 s)
        while the daemon refuses (it is restarting) until ``deadline``; the connection and the
        next wait."""
        while True:
            try:
                return self._borrow(), delay
            except (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError):
                if time.monotonic() + delay > deadline or not self._may_return():
                    raise
                time.sleep(delay)  # the daemon is (re)starting
                delay = min(delay * 2, 1.0)

    def _borrow(self) -> socket.socket:
        with self._lock:
            if self._closed:
                raise StoreError("StoreClient is closed")
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(sock)
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _settle(self, sock: socket.socket, exc: BaseException | None) -> None:
        """Done with ``sock``: back to the pool after a whole reply (``exc``
        None) or an error reply that left the stream in step, else closed."""
        if exc is None or (isinstance(exc, StorageError) and getattr(exc, "_stream_ok", False)):
            self._give_back(sock)
        else:
            sock.close()

    def _call(self, fn: Any, *args: Any, again: Callable[[], tuple[Any, ...]] | None | bool = True) -> Any:
        """``fn(sock, *args)`` on a pooled connection. A daemon that cannot be reached, or that
        went away before its reply was whole (restarted: its table survives, see
        ``storage_functions.daemon._restore``), is tried again on a new connection until
        ``reconnect_s`` ran out; a request already sent is sent again only when ``again``
        allows it (True: the same arguments; a callable: fresh ones; False/None: never). With
        ``alive``, the wait ends as soon as it says the daemon's stack is gone."""
        deadline = time.monotonic() + self.reconnect_s
        delay = 0.05
        while True:
            sock, delay = self._borrow_until(deadline, delay)
            try:
                result = fn(sock, *args)
            except BaseException as exc:
                self._settle(sock, exc)
                if not again or not _connection_lost(exc) or time.monotonic() > deadline or not self._may_return():
                    raise
                if callable(again):
                    args = again()
                continue
            self._give_back(sock)
            return result

    def _may_return(self) -> bool:
        try:
            return self.alive is None or bool(self.alive())
        except Exception:  # noqa: BLE001 - a probe that fails says: gone
            return False

    # -- operations -------------------------------------------------------------
    def put(self, key: str, data: bytes | bytearray | memoryview, alloc: Alloc | None = None, *,
            hints: Mapping[str, int] | None = None) -> PutResult:
        """Store ``data`` as a new version of ``key``. ``alloc`` is the metadata
        server's placement (see :data:`Alloc`); a daemon whose placement authority
        is the metadata server refuses a PUT without it, a standalone daemon places
        chunks itself. ``hints``: what the grant says of the object (:data:`PUT_HINTS`),
        sent in the PUT's meta for the daemon."""
        size = len(memoryview(data).cast("B")) if not isinstance(data, (bytes, bytearray)) else len(data)
        self._check_size(key, size)
        return self._call(self._put, key, self.codec.stripe_pieces(data), size, alloc,  # type: ignore[no-any-return]
                          hints, again=lambda: (key, self.codec.stripe_pieces(data), size, alloc, hints))

    def put_stream(self, key: str, read: Callable[[int], Any] | Any, size: int, *,
                   prefix: bytes | bytearray | memoryview = b"", alloc: Alloc | None = None,
                   hints: Mapping[str, int] | None = None,
                   rewind: Callable[[], Callable[[int], Any] | Any] | None = None) -> PutResult:
        """Store ``prefix`` followed by ``size`` bytes pulled from ``read``
        (``read(n) -> bytes``, e.g. an open file's ``read``, or the file
        itself) as a new version of ``key``, one stripe in memory at a time.
        The stored object, its size (``PutResult.size = len(prefix) + size``)
        and its chunks are those ``put(key, prefix + data)`` would store. A
        source shorter than ``size`` raises ValueError (before anything is
        sent if it is short in its first stripe; else the PUT is abandoned
        and its connection closed). ``rewind``: a new ``read`` from the source's first byte, so
        that a PUT the daemon went away from is sent again as ``put`` is (without it, never:
        the source cannot be read again)."""
        total = len(prefix) + size
        self._check_size(key, total)

        def pieces(read: Any) -> tuple[Any, ...]:
            stripes = self.codec.stripe_pieces_from(read, size, prefix=prefix)
            first = [next(stripes)]  # the first read happens before a connection is taken
            return key, _then(first, stripes), total, alloc, hints

        again = (lambda: pieces(rewind())) if rewind is not None else False
        return self._call(self._put, *pieces(read), again=again)  # type: ignore[no-any-return]

    def _check_size(self, key: str, size: int) -> None:
        if self.max_object_bytes is not None and size > self.max_object_bytes:
            raise ObjectTooLarge(f"{key!r}: {size} bytes is over the maximum of {self.max_object_bytes} bytes")

    def _put(self, sock: socket.socket, key: str, stripes: Iterator[tuple[StripeInfo, list[Any]]], size: int,
             alloc: Alloc | None, hints: Mapping[str, int] | None = None) -> PutResult:
        n, coded = self._send_put(sock, key, stripes, size, alloc, hints)
        f = self._reply(sock)
        return PutResult(key, int(f.meta["version"]), size, n, coded)

    def _send_put(self, sock: socket.socket, key: str, stripes: Iterator[tuple[StripeInfo, list[Any]]], size: int,
                  alloc: Alloc | None, hints: Mapping[str, int] | None = None) -> tuple[int, bool]:
        """Send a PUT and its stripes; (stripes, coded). The reply is the caller's to read. A
        chunk is one buffer, or a list of the pieces it is sent as (``Codec.stripe_pieces``)."""
        plan = self.codec.plan(size)
        meta: dict[str, Any] = {"n": len(plan), "size": size}
        if alloc is not None:
            meta["alloc"] = [list(a) for a in alloc]
        for name in PUT_HINTS:
            if hints and hints.get(name) is not None:
                meta[name] = int(hints[name])
        head = frame_bytes(Op.PUT, key=key, meta=meta)  # goes out with the first stripe: one send
        coded = False
        for info, frags in stripes:
            coded = info.coded
            pieces = [c if isinstance(c, list) else [c] for c in frags]
            crcs = [_crc(c) for c in pieces]
            send_frame(sock, Op.STRIPE, meta={"d": info.d, "p": info.p, "fs": info.fs, "ol": info.ol,
                                              "crcs": crcs}, payload=[x for c in pieces for x in c], before=head)
            head = b""
        if head:  # no stripes (an empty object)
            sock.sendall(head)
        return len(plan), coded

    #: PUTs ``put_many`` sends ahead of the replies it has read: their replies (a few dozen
    #: bytes each) always fit the socket buffers, so neither side can block the other.
    PIPELINE_WINDOW = 32

    def put_many(self, items: Sequence[tuple[str, bytes | bytearray | memoryview, Alloc | None]], *,
                 hints: Mapping[str, Mapping[str, int]] | None = None) -> list[PutResult | StorageError]:
        """Store several objects (key, data, alloc) over one connection, pipelined (``hints``:
        key -> that PUT's hints, as ``put``'s): the PUTs go
        out back to back, at most ``PIPELINE_WINDOW`` ahead of the replies read, so n objects
        cost one round trip each way instead of n. The daemon answers each PUT in order and keeps
        the stream in step after a refusal; per item: its ``PutResult`` or the ``StorageError``
        the daemon answered (e.g. ``NoRoom``). A connection that breaks raises."""
        out: list[PutResult | StorageError | None] = [None] * len(items)
        todo = []
        for i, (key, data, _) in enumerate(items):
            size = len(memoryview(data).cast("B")) if not isinstance(data, (bytes, bytearray)) else len(data)
            try:
                self._check_size(key, size)
            except StorageError as exc:
                out[i] = exc
                continue
            todo.append((i, size))
        if todo:
            self._call(self._put_pipelined, items, todo, out, hints or {})
        return [r for r in out if r is not None]

    def _put_pipelined(self, sock: socket.socket, items: Sequence[tuple[str, Any, Alloc | None]],
                       todo: list[tuple[int, int]], out: list[PutResult | StorageError | None],
                       hints: Mapping[str, Mapping[str, int]]) -> None:
        sent: list[tuple[int, int, int, bool]] = []  # (item, size, stripes, coded) awaiting a reply
        done = 0

        def read_one() -> None:
            nonlocal done
            i, size, n, coded = sent[done]
            done += 1
            try:
                f = self._reply(sock)
            except StorageError as exc:
                if not getattr(exc, "_stream_ok", False):
                    raise
                out[i] = exc
                return
            out[i] = PutResult(items[i][0], int(f.meta["version"]), size, n, coded)

        for i, size in todo:
            key, data, alloc = items[i]
            n, coded = self._send_put(sock, key, self.codec.stripe_pieces(data), size, alloc, hints.get(key))
            sent.append((i, size, n, coded))
            while len(sent) - done >= self.PIPELINE_WINDOW:
                read_one()
        while done < len(sent):
            read_one()

    def _reply(self, sock: socket.socket, *, keep_payload: bool = False) -> Any:
        """The reply frame; an error reply raises; its payload is read and
        dropped unless ``keep_payload`` (then the caller reads it)."""
        f = recv_frame(sock)
        if f is None:
            raise ProtocolError("daemon closed the connection")
        if f.status != Status.OK:
            exc = error_for(f.status, recv_exact(sock, f.paylen).decode(errors="replace"))
            exc._stream_ok = True  # type: ignore[attr-defined]
            raise exc
        if f.paylen and not keep_payload:
            recv_exact(sock, f.paylen)
        return f

    def get(self, key: str, version: int | None = None) -> bytes:
        """The latest (or the given) version of ``key``; decodes from the
        first d chunks of each stripe the daemon forwards. A large object is received
        straight into the ``bytes`` object returned, on huge pages (``sdk._fresh``)."""
        return self._call(self._get_bytes, key, version)  # type: ignore[no-any-return]

    def _get_bytes(self, sock: socket.socket, key: str, version: int | None) -> bytes:
        rd, head, infos = open_get(sock, key, version)
        size = int(head.meta["size"])
        fresh = fresh_bytes(size) if size >= FRESH_MIN else None
        if fresh is None:
            return bytes(self._receive(rd, key, head, infos)[0])
        obj, view = fresh
        with view:
            self._receive(rd, key, head, infos, view)
        return obj

    def get_into(self, key: str, buffer: Any, version: int | None = None) -> int:
        """Receive the latest (or the given) version of ``key`` into ``buffer``, a
        writable bytes-like object (a reused ``bytearray``, an ``mmap``, a numpy array):
        the chunks land in place, with no allocation and no copy out. Returns the
        object's size; the bytes are ``buffer[:size]``. The way to read large objects
        repeatedly at the socket's speed: a fresh 100 MiB result costs as much in page
        faults as the transfer itself (see :meth:`get`). ``BufferTooSmall`` (with the
        object's ``size``) when it does not fit; the buffer's contents are then undefined."""
        view = memoryview(buffer)
        if view.readonly:
            raise TypeError(f"get_into({key!r}): the buffer is read-only; pass a bytearray, mmap or array")
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        return int(self._call(lambda sock: self._get_view(sock, key, version, view)))

    def _get_view(self, sock: socket.socket, key: str, version: int | None, view: memoryview) -> int:
        rd, head, infos = open_get(sock, key, version)
        size = int(head.meta["size"])
        if size > len(view):
            raise BufferTooSmall(f"get_into({key!r}): the object is {size} bytes and the buffer holds "
                                 f"{len(view)}; pass a buffer of at least {size} bytes", size)
        self._receive(rd, key, head, infos, view[:size])
        return size

    def get_buffer(self, key: str, version: int | None = None) -> bytearray:
        """Like :meth:`get`, as a ``bytearray``."""
        return self._call(self._get, key, version)  # type: ignore[no-any-return]

    def _get(self, sock: socket.socket, key: str, version: int | None) -> bytearray:
        rd, head, infos = open_get(sock, key, version)
        return self._receive(rd, key, head, infos)[0]

    def _receive(self, rd: FrameReader, key: str, head: Any, infos: list[StripeInfo] | None,
                 into: memoryview | None = None) -> tuple[bytearray, int]:
        """The rest of a GET reply whose head was read: (a new bytearray holding the
        object, its size); with ``into`` (exactly the object's size) the bytes land
        there and the bytearray returned is empty."""
        size = int(head.meta["size"])
        if into is not None:
            out = bytearray(0)
            view = into
        else:
            out = fresh_bytearray(size) if size >= FRESH_MIN else bytearray(size)
            view = memoryview(out)
        if infos is None:  # one uncoded slice, carried by the reply itself
            read_inline(rd, key, head, view)
            return out, size
        starts, off = [], 0
        for info in infos:
            starts.append(off)
            off += info.ol
        if off != size:  # the result may be uninitialised memory: every byte of it must arrive
            raise ProtocolError(f"GET {key!r}: the reply's stripes hold {off} bytes of a {size}-byte object")

        def complete(s: int, decoded: bytes | None) -> None:
            if decoded is not None:
                view[starts[s]:starts[s] + len(decoded)] = decoded

        recv = StripeReceiver(key, rd, self.codec, infos,
                              lambda s, i, n: view[starts[s] + i * infos[s].fs:starts[s] + i * infos[s].fs + n], complete)
        while recv.pump() != DONE:
            pass
        return out, size

    def get_many(self, keys: Sequence[str]) -> list[bytearray | StorageError]:
        """The latest version of each key, over one connection, pipelined: the GETs go out
        back to back, at most ``PIPELINE_WINDOW`` ahead of the replies read, and the daemon
        serves them at once and answers in order, so n objects cost one round trip each way
        instead of n. Per key: its bytes, or the ``StorageError`` the daemon answered (e.g.
        ``UnknownKey``). A connection that breaks raises (after ``reconnect_s`` of tries)."""
        keys = list(keys)
        return self._call(self._get_pipelined, keys) if keys else []

    def _get_pipelined(self, sock: socket.socket, keys: list[str]) -> list[bytearray | StorageError]:
        rd = FrameReader(sock, pipelined=True)
        out: list[bytearray | StorageError] = []
        sent = 0
        for key in keys:
            while sent < len(keys) and sent - len(out) < self.PIPELINE_WINDOW:
                send_frame(sock, Op.GET, key=keys[sent])
                sent += 1
            try:
                head, infos = read_head(rd)
                out.append(self._receive(rd, key, head, infos)[0])
            except StorageError as exc:
                if not getattr(exc, "_stream_ok", False):
                    raise
                out.append(exc)
        return out

    def get_stream(self, key: str, version: int | None = None) -> GetStream:
        """The latest (or the given) version of ``key`` as a stream: an
        iterator of its stripes' bytes in order and a readable file
        (``read``, ``readinto``, ``size``), each stripe first-d decoded as
        soon as it is complete. Memory is the chunks that arrived ahead of
        the reader (about a stripe when they come in order), not the
        object. Close it (or use ``with``) when stopping early: it holds one
        of this client's connections until the reply is received. A daemon that cannot be
        reached, or that goes away before the stream's head arrived, is tried again for
        ``reconnect_s``; one that goes away mid-stream fails the stream (its bytes were handed out)."""
        deadline = time.monotonic() + self.reconnect_s
        delay = 0.05
        while True:     # opening it is tried again as a call is (``_call``): nothing was handed out yet
            sock, delay = self._borrow_until(deadline, delay)
            try:
                return GetStream(self, sock, key, version)     # it settles the connection when it fails
            except BaseException as exc:
                if not _connection_lost(exc) or time.monotonic() > deadline or not self._may_return():
                    raise

    def get_to(self, key: str, write: Callable[[Any], Any], version: int | None = None) -> int:
        """Write ``key``'s bytes through ``write`` (e.g. an open file's
        ``write``; short writes are continued) stripe by stripe; returns the
        object's size."""
        with self.get_stream(key, version) as stream:
            for piece in stream:
                view = memoryview(piece)
                while len(view):
                    n = write(view)
                    if n is None or n >= len(view):
                        break
                    view = view[n:]
            return stream.size

    def delete(self, key: str) -> None:
        """Drop every version of ``key`` (UnknownKey if there is none)."""
        def op(sock: socket.socket) -> None:
            send_frame(sock, Op.DEL, key=key)
            self._reply(sock)
        self._call(op)

    def free(self, keys: Iterable[str]) -> int:
        """Drop every version of each key; unknown keys are ignored."""
        ks = list(keys)

        def op(sock: socket.socket) -> int:
            send_frame(sock, Op.FREE, meta={"keys": ks})
            return int(self._reply(sock).meta.get("freed", 0))
        return self._call(op)  # type: ignore[no-any-return]

    def evict(self, keys: Iterable[str]) -> int:
        """Let the chunks of each key leave function memory, the daemon keeping the object
        readable from its durable copy (the metadata server released it at its last declared
        read); returns the versions evicted."""
        ks = list(keys)

        def op(sock: socket.socket) -> int:
            send_frame(sock, Op.EVICT, meta={"keys": ks})
            return int(self._reply(sock).meta.get("evicted", 0))
        return self._call(op)  # type: ignore[no-any-return]

    # -- the SDK's COS objects, through the daemon (which checks the token's scope) ----------
    def cos_put(self, key: str, data: bytes | bytearray | memoryview, *, meta: dict[str, Any] | None = None) -> None:
        """Write COS object ``key`` (``tier/``, ``persisted/`` or ``outputs/``
        ``<run_id>/<name>``) through the daemon; ``meta={"keep_s": s}`` on a persisted copy:
        the daemon deletes it ``s`` seconds after its run ends."""
        def op(sock: socket.socket) -> None:
            send_frame(sock, Op.COS_PUT, key=key, meta=meta or None, payload=data)
            self._reply(sock)
        self._call(op)

    def cos_lifetime(self, key: str) -> bytearray:
        """The daemon's record of persisted copy ``key``'s lifetime: JSON ``{"keep_s",
        "expires_at"}``, or ``null`` for a copy kept until deleted."""
        def op(sock: socket.socket) -> bytearray:
            send_frame(sock, Op.COS_GET, key=key, meta={"lifetime": 1})
            return recv_exact(sock, self._reply(sock, keep_payload=True).paylen)
        return self._call(op)  # type: ignore[no-any-return]

    def cos_get(self, key: str) -> bytearray:
        """COS object ``key`` through the daemon (``COSNotFound`` when absent)."""
        def op(sock: socket.socket) -> bytearray:
            send_frame(sock, Op.COS_GET, key=key)
            return recv_exact(sock, self._reply(sock, keep_payload=True).paylen)
        return self._call(op)  # type: ignore[no-any-return]

    def cos_delete(self, key: str) -> None:
        """Remove COS object ``key`` through the daemon (a missing key is no error)."""
        def op(sock: socket.socket) -> None:
            send_frame(sock, Op.COS_DEL, key=key)
            self._reply(sock)
        self._call(op)

    def stats(self) -> dict[str, Any]:
        def op(sock: socket.socket) -> dict[str, Any]:
            send_frame(sock, Op.STAT)
            return dict(self._reply(sock).meta)
        return self._call(op)  # type: ignore[no-any-return]

    def memory(self, run_id: str) -> dict[str, Any]:
        """What the storage functions physically held for ``run_id``: allocated and live
        bytes now, their peaks and MB-seconds, and a series of ``[t, allocated, live]``
        (the daemon's ``MemoryLedger``; store token only)."""
        def op(sock: socket.socket) -> dict[str, Any]:
            send_frame(sock, Op.STAT, meta={"run": run_id})
            return dict(self._reply(sock).meta)
        return self._call(op)  # type: ignore[no-any-return]


def _connection_lost(exc: BaseException) -> bool:
    """The daemon's end of the connection went away (reset, or closed mid-reply)."""
    return isinstance(exc, ConnectionError) or (isinstance(exc, ProtocolError) and "closed the connection" in str(exc))


def _crc(pieces: list[Any]) -> int:
    """CRC-32 of a chunk sent as ``pieces`` back to back (ISA-L's for large pieces: ``checksum``)."""
    crc = 0
    for piece in pieces:
        crc = crc32(piece, crc)
    return crc


def _then(first: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    """``first``'s one item, then ``rest``; the item is not kept once handed
    out (a stripe's chunks are freed as soon as they are sent)."""
    yield first.pop()
    yield from rest
