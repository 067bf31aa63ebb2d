"""Receiving a GET reply on the SDK side, shared by ``StoreClient.get``
(the whole object into one buffer) and ``StoreClient.get_stream`` (stripe
by stripe, bounded memory). Covers the buffered frame reader, the reply
head, the per-stripe first-d receive and decode (``StripeReceiver``) and the
streaming value (``GetStream``); not connections or PUT.

The daemon requests every chunk of every stripe at once and forwards them in
arrival order, so chunks of different stripes interleave (each storage
function answers in stripe order; functions race each other) and a reply
must be read in the order it comes. ``GetStream`` keeps each data chunk that
arrived ahead of its turn in a buffer of its own (nothing is allocated before
its bytes arrive, surplus chunks are dropped) and hands a stripe out once it
has ``d`` chunks and every stripe before it was handed out: its memory is the
chunks received ahead of the reader, about a stripe when the daemon sends in
order (a read from the persistent buffer), more when a slow function holds an
early stripe back while the others run ahead (nothing on this side can make
the daemon wait without stalling the chunk it waits for).
"""

from __future__ import annotations

import json
import socket
from collections import deque
from typing import Any, Callable, Protocol

from storage_functions.exceptions import ProtocolError, StorageError, StoreError
from storage_functions.protocol import HEADER, HEADER_SIZE, Frame, Op, Status, error_for, recv_into, send_frame

from ._erasure import Codec, StripeInfo

__all__ = ["FrameReader", "StripeReceiver", "GetStream", "StreamOwner", "open_get", "read_head", "read_inline",
           "DONE"]

DONE = -2  # StripeReceiver.pump(): the reply's END arrived


class StreamOwner(Protocol):
    """What a ``GetStream`` uses of the client whose connection it holds
    (``_store_client.StoreClient``): its codec, and giving the connection back
    (``_settle``: to the pool when ``exc`` is None, else closed)."""

    @property
    def codec(self) -> Codec: ...

    def _settle(self, sock: socket.socket, exc: BaseException | None) -> None: ...


class FrameReader:
    """Buffered frame reader for one reply: one ``recv`` picks up a whole
    small reply (header, meta and payload); large payloads go straight from
    the socket into their final buffer with ``recv_into``. A reply never
    runs into the next one unless the client pipelined its requests
    (``pipelined``: one reader for the replies in turn, and bytes after a
    reply are the next one's); else nothing is left over when it is clean."""

    __slots__ = ("sock", "buf", "view", "lo", "hi", "pipelined")

    def __init__(self, sock: socket.socket, size: int = 1 << 16, *, pipelined: bool = False) -> None:
        self.sock = sock
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.lo = self.hi = 0
        self.pipelined = pipelined

    def _fill(self, need: int) -> None:
        if self.hi - self.lo >= need:
            return
        if self.lo:
            n = self.hi - self.lo
            self.buf[:n] = self.buf[self.lo:self.hi]
            self.lo, self.hi = 0, n
        while self.hi < need:
            k = self.sock.recv_into(self.view[self.hi:])
            if k == 0:
                raise ProtocolError("daemon closed the connection mid-reply")
            self.hi += k

    def frame(self) -> Frame:
        self._fill(HEADER_SIZE)
        op, status, keylen, reqid, metalen, crc, a, b, paylen = HEADER.unpack_from(self.buf, self.lo)
        self.lo += HEADER_SIZE
        key, meta = "", {}
        if keylen or metalen:
            if keylen + metalen > len(self.buf):
                raise ProtocolError(f"frame op={op}: {keylen + metalen} bytes of key and meta")
            self._fill(keylen + metalen)
            key = bytes(self.view[self.lo:self.lo + keylen]).decode()
            if metalen:
                meta = json.loads(bytes(self.view[self.lo + keylen:self.lo + keylen + metalen]))
            self.lo += keylen + metalen
        return Frame(op, status, reqid, key, meta, crc, a, b, paylen)

    def read_into(self, view: memoryview) -> None:
        n = len(view)
        have = min(n, self.hi - self.lo)
        if have:
            view[:have] = self.view[self.lo:self.lo + have]
            self.lo += have
        if have < n:
            recv_into(self.sock, view[have:])

    def read(self, n: int) -> bytes:
        out = bytearray(n)
        self.read_into(memoryview(out))
        return bytes(out)

    def skip(self, n: int) -> None:
        """Read and drop ``n`` payload bytes."""
        have = min(n, self.hi - self.lo)
        self.lo += have
        n -= have
        if n:  # the buffer is empty now: reuse it as the sink
            self.lo = self.hi = 0
        while n:
            k = self.sock.recv_into(self.view, min(n, len(self.buf)))
            if k == 0:
                raise ProtocolError("daemon closed the connection mid-reply")
            n -= k

    def clean(self) -> bool:
        """Nothing after the reply just read (or, pipelined, only later replies)."""
        return self.pipelined or self.lo == self.hi

    def error(self, f: Frame) -> StorageError:
        """The exception of a non-OK frame, its message read; marked
        ``_stream_ok`` when the connection is clean for the next request."""
        exc = error_for(f.status, self.read(f.paylen).decode(errors="replace"))
        exc._stream_ok = self.clean()  # type: ignore[attr-defined]
        return exc


def open_get(sock: socket.socket, key: str, version: int | None) -> tuple[FrameReader, Frame, list[StripeInfo] | None]:
    """Send GET and read the REPLY head: (reader, head, stripes), stripes
    None for an inline reply (one uncoded slice in the head's payload, read
    it with :func:`read_inline`)."""
    send_frame(sock, Op.GET, key=key, meta={"version": version} if version is not None else None)
    rd = FrameReader(sock)
    head, infos = read_head(rd)
    return rd, head, infos


def read_head(rd: FrameReader) -> tuple[Frame, list[StripeInfo] | None]:
    """A GET reply's REPLY head and its stripes (None: inline); an error reply raises."""
    head = rd.frame()
    if head.status != Status.OK:
        raise rd.error(head)
    if head.meta.get("inline"):
        return head, None
    if head.paylen:
        rd.skip(head.paylen)
    return head, [StripeInfo(int(s["d"]), int(s["p"]), int(s["fs"]), int(s["ol"]), int(s["cl"]))
                  for s in head.meta["stripes"]]


def read_inline(rd: FrameReader, key: str, head: Frame, view: memoryview) -> None:
    """Receive an inline reply's object into ``view`` (its size)."""
    if head.paylen != len(view):
        raise ProtocolError(f"GET {key!r}: inline reply of {head.paylen} bytes for a {len(view)}-byte object")
    rd.read_into(view)
    if not rd.clean():
        raise ProtocolError(f"GET {key!r}: bytes after the reply")


class StripeReceiver:
    """The CHUNK frames of one coded GET reply. The payload bytes of data
    chunk ``i`` of stripe ``s`` land straight in ``chunk_view(s, i, n)``
    (``n`` = its share of the stripe's ``ol`` bytes, 0 for pure padding);
    when stripe ``s`` has its first ``d`` chunks, ``complete(s, decoded)``
    is called, ``decoded`` the stripe's bytes if a parity chunk was among
    them (else None: the data chunks' views hold it). Chunks past ``d`` are
    dropped, and a stripe's state is freed once it is complete."""

    __slots__ = ("key", "rd", "codec", "infos", "chunk_view", "complete", "data", "parity", "done", "left")

    def __init__(self, key: str, rd: FrameReader, codec: Codec, infos: list[StripeInfo],
                 chunk_view: Callable[[int, int, int], memoryview],
                 complete: Callable[[int, bytes | None], None]) -> None:
        self.key, self.rd, self.codec, self.infos = key, rd, codec, infos
        self.chunk_view, self.complete = chunk_view, complete
        k = len(infos)
        self.data: list[dict[int, tuple[bytes, memoryview, bytes]] | None] = [None] * k  # (header, payload, tail)
        self.parity: list[dict[int, bytes]] = [{} for _ in infos]
        self.done = bytearray(k)
        self.left = k  # stripes not yet complete

    def pending(self) -> int:
        """Chunk bytes still to come for the incomplete stripes."""
        return sum((info.d - len(self.data[s] or ()) - len(self.parity[s])) * info.cl
                   for s, info in enumerate(self.infos) if not self.done[s])

    def pump(self) -> int:
        """Receive one frame: the stripe it completed, -1 if none, or
        :data:`DONE` at a good END (an END with an error status raises)."""
        rd = self.rd
        f = rd.frame()
        if f.op == Op.END:
            if f.status != Status.OK:
                raise rd.error(f)
            if f.paylen:
                rd.skip(f.paylen)
            if self.left:
                s = self.done.index(0)
                have = len(self.data[s] or ()) + len(self.parity[s])
                raise ProtocolError(f"GET {self.key!r}: stripe {s} arrived with {have} of {self.infos[s].d} chunks")
            if not rd.clean():
                raise ProtocolError(f"GET {self.key!r}: bytes after END")
            return DONE
        s, i = f.a, f.b
        if f.op != Op.CHUNK or s >= len(self.infos):
            raise ProtocolError(f"GET {self.key!r}: unexpected frame op={f.op}")
        info = self.infos[s]
        if f.paylen != info.cl or i >= info.d + info.p:
            raise ProtocolError(f"GET {self.key!r}: chunk {s}/{i} is {f.paylen} bytes, expected {info.cl}")
        if self.done[s]:  # a surplus chunk
            rd.skip(f.paylen)
            return -1
        data, parity = self.data[s], self.parity[s]
        if data is None:
            data = self.data[s] = {}
        if not info.coded:
            view = self.chunk_view(s, 0, info.ol)
            rd.read_into(view)
            data[0] = (b"", view, b"")
        elif i < info.d:
            hdr = rd.read(info.header)
            n = max(0, min(info.fs, info.ol - i * info.fs))
            view = self.chunk_view(s, i, n)
            if n:
                rd.read_into(view)
            data[i] = (hdr, view, rd.read(info.fs - n) if info.fs > n else b"")
        else:
            parity[i] = rd.read(f.paylen)
        if len(data) + len(parity) < info.d:
            return -1
        decoded = None
        if parity:
            frags: dict[int, bytes | bytearray] = dict(parity)
            for j, (hdr, view, tail) in data.items():
                frags[j] = hdr + bytes(view) + tail
            decoded = self.codec.decode(info, frags)
        self.data[s], self.parity[s] = None, {}
        self.done[s] = 1
        self.left -= 1
        self.complete(s, decoded)
        return s


class GetStream:
    """One object being read from the store, stripe by stripe: iterate it
    for its bytes as bytes-like pieces in order (a stripe's data chunks, or
    its decoded bytes; each a fresh buffer the caller may keep), or
    ``read``/``readinto`` it like a file. ``size`` is the object's total
    size, ``version`` its version. A stripe's pieces are handed out once the
    stripe is complete; chunks of later stripes that the daemon forwards
    early are kept as they arrived (nothing is allocated before its bytes
    do). Holds one of the client's connections until the reply is received
    or the stream is closed; closing early drains a short remainder (the
    connection goes back to the pool) or closes the connection. Not
    thread-safe."""

    _DRAIN_MAX = 1 << 20  # close rather than drain when more is still to come

    def __init__(self, client: StreamOwner, sock: socket.socket, key: str, version: int | None) -> None:
        self._client = client
        self._sock: socket.socket | None = None
        self._recv: StripeReceiver | None = None
        self._chunks: dict[int, dict[int, bytearray]] = {}  # data chunks of incomplete stripes
        self._ready: dict[int, list[Any]] = {}  # pieces of complete stripes not yet handed out
        self._pieces: deque[Any] = deque()  # the current stripe's pieces left
        self._piece: memoryview | None = None  # what read() left of the current piece
        self._next = self._nstripes = 0
        self._closed = False
        self.key = key
        try:
            rd, head, infos = open_get(sock, key, version)
            self.size = int(head.meta["size"])
            self.version = int(head.meta.get("version", 0))
            if infos is None:
                buf = bytearray(self.size)
                read_inline(rd, key, head, memoryview(buf))
                self._ready[0], self._nstripes = [buf], 1
            else:
                self._nstripes = len(infos)
                self._recv = StripeReceiver(key, rd, client.codec, infos, self._chunk_view, self._complete)
        except BaseException as exc:
            client._settle(sock, exc)
            raise
        if infos is None:
            client._settle(sock, None)
        else:
            self._sock = sock

    def _chunk_view(self, s: int, i: int, n: int) -> memoryview:
        buf = bytearray(n)
        self._chunks.setdefault(s, {})[i] = buf
        return memoryview(buf)

    def _complete(self, s: int, decoded: bytes | None) -> None:
        chunks = self._chunks.pop(s, {})
        self._ready[s] = [decoded] if decoded is not None else [chunks[i] for i in sorted(chunks)]

    # -- the connection ------------------------------------------------------------
    def _release(self, exc: BaseException | None) -> None:
        """Done with the connection: back to the pool if ``exc`` left it
        clean (None: the reply was received whole), else closed."""
        sock, self._sock, self._recv = self._sock, None, None
        self._chunks.clear()
        if sock is not None:
            self._client._settle(sock, exc)

    def _pump(self) -> None:
        recv = self._recv
        if recv is None:
            raise StoreError(f"GET {self.key!r}: the stream is closed")
        try:
            s = recv.pump()
            while recv.left == 0 and s != DONE:  # END follows the last chunk: free the connection now
                s = recv.pump()
        except BaseException as exc:
            self._release(exc)
            raise
        if s == DONE:
            self._release(None)

    def _take(self) -> Any:
        """The next non-empty piece, or None at the end."""
        while not self._pieces:
            k = self._next
            if k >= self._nstripes:
                return None
            while k not in self._ready:
                self._pump()
            self._next += 1
            self._pieces.extend(p for p in self._ready.pop(k) if len(p))
        return self._pieces.popleft()

    # -- iterator ------------------------------------------------------------------
    def __iter__(self) -> GetStream:
        return self

    def __next__(self) -> Any:
        piece, self._piece = self._piece, None
        if piece is None:
            piece = self._take()
            if piece is None:
                raise StopIteration
        return piece

    # -- file ----------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def readinto(self, b: Any) -> int:
        """Fill ``b`` as far as the object goes; 0 at the end."""
        if self._closed:
            raise ValueError("read from a closed GetStream")
        out = memoryview(b).cast("B")
        got = 0
        while got < len(out):
            piece = self._piece
            if piece is None:
                buf = self._take()
                if buf is None:
                    break
                piece = memoryview(buf)
            k = min(len(piece), len(out) - got)
            out[got:got + k] = piece[:k]
            got += k
            self._piece = piece[k:] if k < len(piece) else None
        return got

    def read(self, n: int | None = -1) -> bytes:
        """``n`` bytes (fewer only at the end), or everything left."""
        if self._closed:
            raise ValueError("read from a closed GetStream")
        if n is None or n < 0:
            return b"".join(list(self))
        piece = self._piece
        if piece is not None and len(piece) > n:
            self._piece = piece[n:]
            return bytes(piece[:n])
        buf = bytearray(n)
        del buf[self.readinto(buf):]
        return bytes(buf)

    def close(self) -> None:
        """Stop reading and drop what is buffered. The connection goes back
        to the pool if little of the reply is left (it is drained), else it
        is closed."""
        self._closed = True
        self._ready.clear()
        self._pieces.clear()
        self._piece = None
        self._next = self._nstripes
        recv = self._recv
        if recv is None or recv.pending() > self._DRAIN_MAX:
            self._release(ProtocolError("closed mid-reply"))
            return
        try:
            while recv.pump() != DONE:
                self._ready.clear()
        except (StorageError, OSError) as exc:  # the caller stopped reading: no error to report
            self._release(exc)
            return
        except BaseException as exc:
            self._release(exc)
            raise
        self._release(None)

    def __enter__(self) -> GetStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None:
            self._sock = None
            sock.close()
