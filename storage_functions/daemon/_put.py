"""The daemon's PUT path (I/O shell): read a PUT's stripes from the client,
stream each chunk to its function and to the persistent buffer at once (memory
and a segment for a small version, a file for a large one: ``_buffer``), retry
the chunks whose function failed, and make the version readable. Where the
chunks go and what is counted is the store core's (``_state.StoreState``,
driven through ``Daemon._do``); this module only moves bytes. Mixed into
``_server.Daemon``.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..exceptions import ObjectTooLarge, ProtocolError, StorageError, StoreError
from ..protocol import Frame, Op, drain, recv_frame, recv_into
from ._checks import alloc_chunks, meta_int, stripe_places, stripe_shape
from ._collect import NullSock, Waiter
from ._objects import ObjectVersion, chunk_key, trailer
from ._store_events import (Begun, ChunkFailed, ChunkStored, Degraded, Place, PutAbandoned, PutBegun, PutReady,
                            PutRetry, SendChunk, StripeBegun)

if TYPE_CHECKING:
    from ._buffer import BufferReader, BufferWriter, PersistentBuffer
    from ._config import DaemonConfig
    from ._functions import FunctionHandle
    from ._store_events import Event, Instruction
    from ..throttle import HostLink

__all__ = ["PutPath", "PutHost", "PendingPut"]

_STRIPE_META = 64 << 10  # a STRIPE's meta: d, p, sizes and one CRC per chunk
#: a chunk up to this size is received whole before it goes to its function with its header
#: in one send (the function wakes once); larger ones stream through as they arrive
_WHOLE_CHUNK = 64 << 10


def _pad(fsock: socket.socket, n: int) -> None:
    """Send ``n`` zero bytes, or give up quietly (the connection's reader sees it gone)."""
    zeros = memoryview(bytes(min(n, 1 << 20)))
    try:
        while n:
            k = min(n, len(zeros))
            fsock.sendall(zeros[:k])
            n -= k
    except OSError:
        pass


@dataclass(slots=True)
class PendingPut:
    """A PUT whose chunks went out (``PutPath._put_send``), waiting for its functions'
    replies; ``PutPath._put_finish`` completes it."""

    key: str
    obj: ObjectVersion
    size: int
    waiter: Waiter
    deadline: float  # monotonic: the functions' replies are given up on after it
    began: float  # monotonic: when its first chunk could go out


class PutHost(Protocol):
    """What the PUT path uses of the daemon: the config, the persistent buffer, the
    counters, the store core (``_do``: where chunks go, what is readable) and function
    ``index``'s connection (``_handle``)."""

    config: DaemonConfig
    buffer: PersistentBuffer
    host_link: HostLink

    def count(self, name: str, n: int = 1) -> None: ...

    def _do(self, ev: Event) -> list[Instruction]: ...

    def _handle(self, index: int) -> FunctionHandle: ...


if TYPE_CHECKING:
    _Host = PutHost
else:  # at run time a plain mixin: the Protocol's stubs never enter Daemon's method order
    _Host = object


class PutPath(_Host):
    """PUT: ``_put_send`` then ``_put_finish`` (apart, so that a client's pipelined
    PUTs overlap), called by a client connection's thread (``_session``). A mixin of
    ``_server.Daemon``: its methods use the daemon only through ``PutHost``."""

    def _put_send(self, sock: socket.socket, f: Frame, scratch: bytearray,
                  refuse: StorageError | None = None) -> PendingPut:
        """Read a PUT's stripes and send each chunk to its function and to the buffer;
        the functions' replies are awaited by :meth:`_put_finish`. ``refuse`` (or a size
        over the maximum) reads and drops them and raises it, touching nothing."""
        what = f"PUT {f.key!r}"
        size = meta_int(f.meta, "size", what, default=0)
        n = meta_int(f.meta, "n", what, default=0, hi=max(1, size))
        alloc = f.meta.get("alloc")
        error = refuse
        if error is None and size > self.config.max_object_bytes:
            error = ObjectTooLarge(f"{f.key!r}: {size} bytes is over the store's maximum of "
                                   f"{self.config.max_object_bytes} bytes")
        if error is not None:
            left = size
            for s in range(n):
                sf = self._next_stripe(sock, f.key, s, n)
                left -= stripe_shape(f.key, sf, s, left).ol
                drain(sock, sf.paylen, scratch)
            raise error
        began = time.monotonic()
        (begun,) = self._do(PutBegun(key=f.key, size=size, now=began))
        assert isinstance(begun, Begun)
        obj = begun.obj
        waiter = Waiter()
        expires = f.meta.get("expires_at_ms")
        readers = f.meta.get("readers")
        if isinstance(readers, int) and not isinstance(readers, bool) and readers > 0:
            obj.readers = readers
        fh = self.buffer.writer(obj, size, int(expires) if isinstance(expires, (int, float)) and expires > 0 else None)
        used: list[int] = []
        wire = 0  # the coded bytes that came in from the client (and go out to the functions)
        try:
            file_off = 0
            left = size
            for s in range(n):
                sf = self._next_stripe(sock, f.key, s, n)
                shape = stripe_shape(f.key, sf, s, left)
                left -= shape.ol
                wire += sf.paylen
                if error is not None:
                    drain(sock, sf.paylen, scratch)
                    continue
                try:
                    places = None
                    if alloc is not None:
                        if obj.alloc is None:
                            obj.alloc = alloc_chunks(f.key, alloc, shape.n)
                            used = [0] * shape.n
                        elif len(obj.alloc) != shape.n:
                            raise ProtocolError(f"PUT {f.key!r}: stripe {s} has {shape.n} chunks, the allocation "
                                                f"{len(obj.alloc)}")
                        places = tuple((self._index_of(fn), block, off) for fn, block, off in
                                       stripe_places(f.key, obj.alloc, used, shape.cl, self.config.block_size))
                    elif self.config.placement == "metadata":
                        raise StoreError(f"PUT {f.key!r} carries no placement: this daemon stores chunks only where "
                                         "the metadata server placed them (sdk.Client passes its begin_put grant)")
                    self._do(StripeBegun(obj=obj, shape=shape, offset=file_off, places=places, now=time.monotonic()))
                except StorageError as exc:
                    error = exc
                    drain(sock, sf.paylen, scratch)
                    continue
                for i in range(shape.n):
                    self._stream_chunk(sock, fh, scratch, obj, s, i, waiter)
                file_off += sf.paylen
            if error is not None:
                raise error
            fh.finish(trailer(obj))  # held: in memory and a segment, or in its own file
        except BaseException:
            fh.abort()
            self._abandon(obj)
            raise
        if self.host_link.mbps > 0:  # the modelled NIC: answered once its bytes' turn is through
            self.host_link.carry(wire, wire, began)
        return PendingPut(f.key, obj, size, waiter, time.monotonic() + self.config.put_timeout_s, began)

    def _put_finish(self, p: PendingPut, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the functions' replies to a sent PUT (``timeout``, by default
        ``put_timeout_s``), store again the chunks that failed, and make the version
        readable; the reply's meta (or StoreError)."""
        obj = p.obj
        failed = p.waiter.wait(self.config.put_timeout_s if timeout is None else timeout)
        self._mark_silent(obj, p.waiter)
        if failed:
            failed = self._retry_chunks(obj, failed)
        if failed and obj.alloc is not None:
            (dg,) = self._do(ChunkFailed(obj=obj, failed=tuple(failed), died=self._died(p, failed),
                                         now=time.monotonic()))
            assert isinstance(dg, Degraded)
            if dg.ok:  # every stripe has d chunks in memory; parity, the buffer and COS cover the rest
                self.count("degraded_puts")
                failed = []
        if failed:
            self.buffer.drop(obj)
            self._abandon(obj)
            raise StoreError(f"PUT {p.key!r}: {len(failed)} chunk(s) could not be stored in any function")
        return self._put_done(p)

    def _mark_silent(self, obj: ObjectVersion, waiter: Waiter) -> None:
        """The functions of chunks still unanswered past the PUT's timeout are silent
        (``FunctionHandle.silent``): later chunks go elsewhere until they answer."""
        for s, i in waiter.silent():
            place = obj.stripes[s].places[i] if s < len(obj.stripes) else None
            if place is not None and self._handle(place[0]).mark_silent():
                self.count("silent_functions")

    def _died(self, p: PendingPut, failed: list[tuple[int, int]]) -> tuple[tuple[int, int, Place], ...]:
        """The failed chunks (with their places) whose function was reached and whose
        instance then died while the PUT ran."""
        died = []
        for s, i in failed:
            place = self._planned(p.obj, s, i)
            if self._handle(place[0]).last_died >= p.began:
                died.append((s, i, place))
        return tuple(died)

    def _put_done(self, p: PendingPut) -> dict[str, Any]:
        """Make a PUT whose chunks are all stored readable; the reply's meta. Quick and
        non-blocking: it may run on a function's reader thread (an armed PUT, ``_session``)."""
        self._do(PutReady(obj=p.obj, now=time.monotonic()))  # readable, and handed to the uploader
        self.count("puts")
        return {"version": p.obj.version, "size": p.size}

    @staticmethod
    def _next_stripe(sock: socket.socket, key: str, s: int, n: int) -> Frame:
        sf = recv_frame(sock, max_meta=_STRIPE_META)
        if sf is None or sf.op != Op.STRIPE:
            raise ProtocolError(f"PUT {key!r}: expected stripe {s} of {n}")
        return sf

    def _index_of(self, fn: Any) -> int:
        if isinstance(fn, int) and not isinstance(fn, bool):
            return fn
        prefix = self.config.function_prefix + "-"
        if isinstance(fn, str) and fn.startswith(prefix) and fn[len(prefix):].isdigit():
            return int(fn[len(prefix):])
        me = f"daemon {self.config.daemon_id!r}" if self.config.daemon_id else "this daemon"
        raise StoreError(f"allocation names function {fn!r}, not one of {me}'s ({prefix}N): the placement is "
                         "another daemon's (a deployment's daemons own disjoint functions); send the PUT to the "
                         "daemon its grant names")

    def _acked(self, obj: ObjectVersion, s: int, i: int, place: Place) -> Any:
        """What runs when a function acknowledges chunk ``i`` of stripe ``s`` at ``place``."""
        return lambda: self._do(ChunkStored(obj=obj, stripe=s, index=i, place=place, now=time.monotonic()))

    def _stream_chunk(self, sock: socket.socket, fh: BufferWriter, scratch: bytearray, obj: ObjectVersion, s: int,
                      i: int, waiter: Waiter) -> None:
        st = obj.stripes[s]
        place = st.places[i]
        cl = st.cl
        view = memoryview(scratch)
        fn_ok = [True]

        ring = fh.ring  # a large version: receive into the buffer's slots, written off this thread

        def write(fsock: socket.socket) -> None:
            left = cl
            try:
                while left:
                    into = ring.space() if ring is not None else view
                    k = sock.recv_into(into, min(left, len(into)))
                    if k == 0:
                        raise ConnectionError("client closed mid-PUT")
                    piece = into[:k]
                    if ring is None:
                        fh.write(piece)
                    if fn_ok[0]:
                        try:
                            fsock.sendall(piece)
                        except OSError:
                            fn_ok[0] = False
                    if ring is not None:
                        ring.advance(k)
                    left -= k
            except BaseException:
                if fn_ok[0] and left:  # keep the function's stream in step: the chunk fails its CRC there
                    _pad(fsock, left)
                raise

        payload = None
        if ring is None and cl <= min(len(view), _WHOLE_CHUNK):  # small: whole first, then one send
            payload = view[:cl]
            recv_into(sock, payload)
            fh.write(payload)
        waiter.add(s, i)
        if place is None:  # its function was lost since placement (or the version freed): buffer only
            if payload is None:
                write(NullSock())  # type: ignore[arg-type]
            waiter.fail(s, i)
            return
        fn, block, off = place
        ckey = chunk_key(obj.key, obj.version, s, i)
        if self._handle(fn).silent:  # it let a chunk go unanswered: this one goes elsewhere, at once
            self.count("chunks_not_sent_to_silent")
            if payload is None:
                write(NullSock())  # type: ignore[arg-type]
            waiter.fail(s, i)
            return
        try:
            self._handle(fn).request_put_stream(ckey, block, off, st.crcs[i], cl, write if payload is None else None,
                                                waiter.callback(s, i, self._acked(obj, s, i, place)),
                                                large=cl >= self.config.large_threshold, payload=payload)
        except TimeoutError:
            if payload is None:
                write(NullSock())  # type: ignore[arg-type]  # keep the client stream in step; the chunk is retried
            waiter.fail(s, i)

    def _planned(self, obj: ObjectVersion, s: int, i: int) -> Place:
        """Where the metadata server placed chunk ``i`` of stripe ``s``."""
        assert obj.alloc is not None
        fn, block, off, _ = obj.alloc[i]
        start = off + sum(obj.stripes[k].cl for k in range(s))
        bs = self.config.block_size
        return self._index_of(fn), block + start // bs, start % bs

    def _retry_chunks(self, obj: ObjectVersion, failed: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Store again, from the buffer, chunks whose function failed: where the
        metadata server placed them (the function's next instance) when it is the
        placement authority, else on another function (``PutRetry``)."""
        if not obj.stripes:
            return failed
        chunks = tuple(failed)
        planned = tuple(self._planned(obj, s, i) for s, i in chunks) if obj.alloc is not None else None
        sends = self._do(PutRetry(obj=obj, failed=chunks, planned=planned, now=time.monotonic()))
        waiter = Waiter()
        r = self.buffer.open(obj)
        assert r is not None
        with r:
            for x in sends:
                assert isinstance(x, SendChunk)
                self._resend(r, obj, x.stripe, x.index, x.place, waiter)
        return waiter.wait(self.config.put_timeout_s)

    def _resend(self, r: BufferReader, obj: ObjectVersion, s: int, i: int, place: Place, waiter: Waiter) -> None:
        st = obj.stripes[s]
        data = r.read(obj.chunk_offset(s, i), st.cl)
        self.count("chunk_retries")
        waiter.add(s, i)
        fn, block, off = place
        if self._handle(fn).silent:  # (its planned place, on a silent function): failed at once
            self.count("chunks_not_sent_to_silent")
            waiter.fail(s, i)
            return
        ckey = chunk_key(obj.key, obj.version, s, i)
        self._handle(fn).request(Op.PUT, ckey, waiter.callback(s, i, self._acked(obj, s, i, place)),
                                 a=block, b=off, crc=st.crcs[i], payload=data,
                                 large=st.cl >= self.config.large_threshold)

    def _abandon(self, obj: ObjectVersion) -> None:
        self._do(PutAbandoned(obj=obj, now=time.monotonic()))
