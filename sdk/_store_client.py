"""The SDK's data client for the ServerlessMemory store: ``StoreClient``
talks to the client daemon over the framing of
``storage_functions.protocol``. Covers erasure coding on PUT, per-chunk
checksums, first-d decode on GET, delete/free, a small connection pool for
thread safety; not metadata (allocation comes from the caller, see
``put(alloc=...)``). Imports only the stdlib and pyeclib, so a task Lambda
can carry it.
"""

from __future__ import annotations

import json
import socket
import threading
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from storage_functions.exceptions import ObjectTooLarge, ProtocolError, StoreError
from storage_functions.protocol import (HEADER, HEADER_SIZE, Frame, Op, Status, error_for, recv_exact, recv_frame, recv_into,
                                        send_frame, tune_socket)

from ._erasure import Codec, StripeInfo

__all__ = ["StoreClient", "PutResult"]


@dataclass(frozen=True, slots=True)
class PutResult:
    key: str
    version: int
    size: int
    stripes: int
    coded: bool


class StoreClient:
    """``StoreClient(("127.0.0.1", port), token)``; thread-safe (each call
    borrows a pooled connection)."""

    def __init__(self, daemon_addr: tuple[str, int] | str, token: str, *, codec: Codec | None = None,
                 max_object_bytes: int | None = None, timeout: float = 120.0, pool_size: int = 16) -> None:
        if isinstance(daemon_addr, str):
            host, _, port = daemon_addr.rpartition(":")
            daemon_addr = (host or "127.0.0.1", int(port))
        self.addr = (daemon_addr[0], int(daemon_addr[1]))
        self.token = token
        self.codec = codec or Codec()
        self.max_object_bytes = max_object_bytes
        self.timeout = timeout
        self.pool_size = pool_size
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._scratch: bytearray | None = None

    # -- connections ----------------------------------------------------------
    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.addr, timeout=self.timeout)
        try:
            tune_socket(sock)
            send_frame(sock, Op.HELLO, meta={"role": "client", "token": self.token})
            f = recv_frame(sock)
            if f is None:
                raise ProtocolError("daemon closed the connection during HELLO")
            if f.status != Status.OK:
                raise error_for(f.status, recv_exact(sock, f.paylen).decode(errors="replace"))
        except BaseException:
            sock.close()
            raise
        return sock

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

    def _call(self, fn: Any, *args: Any) -> Any:
        sock = self._borrow()
        try:
            result = fn(sock, *args)
        except BaseException as exc:
            if isinstance(exc, StoreError) and getattr(exc, "_stream_ok", False):
                self._give_back(sock)
            else:
                sock.close()
            raise
        self._give_back(sock)
        return result

    # -- operations -------------------------------------------------------------
    def put(self, key: str, data: bytes | bytearray | memoryview,
            alloc: Sequence[Sequence[tuple[int | str, int, int]]] | None = None) -> PutResult:
        """Store ``data`` as a new version of ``key``. ``alloc`` (optional) is
        the metadata server's placement: per stripe, per chunk,
        (function, block, offset); without it the daemon places chunks."""
        size = len(memoryview(data).cast("B")) if not isinstance(data, (bytes, bytearray)) else len(data)
        if self.max_object_bytes is not None and size > self.max_object_bytes:
            raise ObjectTooLarge(f"{key!r}: {size} bytes is over the maximum of {self.max_object_bytes} bytes")
        return self._call(self._put, key, data, size, alloc)  # type: ignore[no-any-return]

    def _put(self, sock: socket.socket, key: str, data: Any, size: int, alloc: Any) -> PutResult:
        plan = self.codec.plan(size)
        meta: dict[str, Any] = {"n": len(plan), "size": size}
        if alloc is not None:
            meta["alloc"] = [[list(a) for a in stripe] for stripe in alloc]
        send_frame(sock, Op.PUT, key=key, meta=meta)
        coded = False
        for info, frags in self.codec.stripes(data):
            coded = info.coded
            crcs = [zlib.crc32(f) for f in frags]
            send_frame(sock, Op.STRIPE, meta={"d": info.d, "p": info.p, "fs": info.fs, "ol": info.ol,
                                              "crcs": crcs}, payload=list(frags))
        f = self._reply(sock)
        return PutResult(key, int(f.meta["version"]), size, len(plan), coded)

    def _reply(self, sock: socket.socket) -> Any:
        f = recv_frame(sock)
        if f is None:
            raise ProtocolError("daemon closed the connection")
        if f.status != Status.OK:
            exc = error_for(f.status, recv_exact(sock, f.paylen).decode(errors="replace"))
            exc._stream_ok = True  # type: ignore[attr-defined]
            raise exc
        if f.paylen:
            recv_exact(sock, f.paylen)
        return f

    def get(self, key: str, version: int | None = None) -> bytes:
        """The latest (or the given) version of ``key``; decodes from the
        first d chunks of each stripe the daemon forwards."""
        scratch = self._take_scratch()
        try:
            out, size = self._call(self._get_into, key, version, scratch)
            if out is scratch:
                with memoryview(out) as v:
                    return bytes(v[:size])
            return bytes(out)
        finally:
            self._give_scratch(scratch)

    def get_buffer(self, key: str, version: int | None = None) -> bytearray:
        """Like :meth:`get` without the final copy into ``bytes``."""
        return self._call(self._get, key, version)  # type: ignore[no-any-return]

    # A fresh 100 MiB buffer costs ~50 ms of page faults on a small VM, as
    # much as the transfer itself: get() receives large objects into one
    # reused, already-faulted scratch buffer and copies out only the bytes
    # object it returns (get_buffer hands its buffer to the caller, so it
    # cannot reuse one).
    _SCRATCH_MIN = 1 << 20
    _SCRATCH_MAX = 256 << 20

    def _take_scratch(self) -> bytearray | None:
        with self._lock:
            buf, self._scratch = self._scratch, None
        return buf if buf is not None else bytearray(0)

    def _give_scratch(self, buf: bytearray | None) -> None:
        if buf is None or len(buf) > self._SCRATCH_MAX:
            return
        with self._lock:
            if self._scratch is None or len(self._scratch) < len(buf):
                self._scratch = buf

    def _get(self, sock: socket.socket, key: str, version: int | None) -> bytearray:
        return self._get_into(sock, key, version, None)[0]

    def _get_into(self, sock: socket.socket, key: str, version: int | None,
                  scratch: bytearray | None) -> tuple[bytearray, int]:
        """(buffer, size): a new bytearray, or ``scratch`` (grown as needed)
        holding the object in its first ``size`` bytes."""
        send_frame(sock, Op.GET, key=key, meta={"version": version} if version is not None else None)
        rd = _Reader(sock)
        head = rd.frame()
        if head.status != Status.OK:
            exc = error_for(head.status, rd.read(head.paylen).decode(errors="replace"))
            exc._stream_ok = rd.clean()  # type: ignore[attr-defined]
            raise exc
        size = int(head.meta["size"])
        if scratch is not None and self._SCRATCH_MIN <= size <= self._SCRATCH_MAX:
            if len(scratch) < size:
                scratch.extend(bytes(size - len(scratch)))
            out = scratch
            view = memoryview(out)[:size]
        else:
            out = bytearray(size)
            view = memoryview(out)
        if head.meta.get("inline"):  # one uncoded slice, carried by the reply itself
            if head.paylen != size:
                raise ProtocolError(f"GET {key!r}: inline reply of {head.paylen} bytes for a {size}-byte object")
            rd.read_into(view)
            if not rd.clean():
                raise ProtocolError(f"GET {key!r}: bytes after the reply")
            return out, size
        if head.paylen:
            rd.read(head.paylen)
        infos = [StripeInfo(int(s["d"]), int(s["p"]), int(s["fs"]), int(s["ol"]), int(s["cl"]))
                 for s in head.meta["stripes"]]
        starts, off = [], 0
        for info in infos:
            starts.append(off)
            off += info.ol
        got: list[dict[int, tuple[bytes, bytes]]] = [{} for _ in infos]  # data chunks: header, tail
        extra: list[dict[int, bytes]] = [{} for _ in infos]
        while True:
            f = rd.frame()
            if f.op == Op.END:
                if f.status != Status.OK:
                    exc = error_for(f.status, rd.read(f.paylen).decode(errors="replace"))
                    exc._stream_ok = rd.clean()  # type: ignore[attr-defined]
                    raise exc
                if f.paylen:
                    rd.read(f.paylen)
                break
            if f.op != Op.CHUNK or f.a >= len(infos):
                raise ProtocolError(f"GET {key!r}: unexpected frame op={f.op}")
            s, i = f.a, f.b
            info = infos[s]
            if f.paylen != info.cl:
                raise ProtocolError(f"GET {key!r}: chunk {s}/{i} is {f.paylen} bytes, expected {info.cl}")
            if not info.coded:
                rd.read_into(view[starts[s]:starts[s] + info.ol])
                got[s][0] = (b"", b"")
            elif i < info.d:
                hdr = rd.read(info.header)
                lo = i * info.fs
                n = max(0, min(info.fs, info.ol - lo))
                if n:
                    rd.read_into(view[starts[s] + lo:starts[s] + lo + n])
                tail = rd.read(info.fs - n) if info.fs > n else b""
                got[s][i] = (hdr, tail)
            else:
                extra[s][i] = rd.read(f.paylen)
        if not rd.clean():
            raise ProtocolError(f"GET {key!r}: bytes after END")
        for s, info in enumerate(infos):
            have = len(got[s])
            if have >= info.d:
                continue
            frags: dict[int, bytes | bytearray] = dict(extra[s])
            for i, (hdr, tail) in got[s].items():
                lo = i * info.fs
                n = max(0, min(info.fs, info.ol - lo))
                frags[i] = hdr + bytes(view[starts[s] + lo:starts[s] + lo + n]) + tail
            if len(frags) < info.d:
                raise ProtocolError(f"GET {key!r}: stripe {s} arrived with {len(frags)} of {info.d} chunks")
            view[starts[s]:starts[s] + info.ol] = self.codec.decode(info, frags)
        return out, size

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

    def stats(self) -> dict[str, Any]:
        def op(sock: socket.socket) -> dict[str, Any]:
            send_frame(sock, Op.STAT)
            return dict(self._reply(sock).meta)
        return self._call(op)  # type: ignore[no-any-return]


class _Reader:
    """Buffered frame reader for one reply: one ``recv`` picks up a whole
    small reply (header, meta and payload); large payloads go straight from
    the socket into their final buffer with ``recv_into``. A reply never
    runs into the next one (the daemon answers one request at a time per
    connection), so nothing is left over when it is clean."""

    __slots__ = ("sock", "buf", "view", "lo", "hi")

    def __init__(self, sock: socket.socket, size: int = 1 << 16) -> None:
        self.sock = sock
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.lo = self.hi = 0

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

    def clean(self) -> bool:
        return self.lo == self.hi
