"""The SDK's data client for the ServerlessMemory store: ``StoreClient``
talks to the client daemon over the framing of
``storage_functions.protocol``. Covers erasure coding on PUT, per-chunk
checksums, first-d decode on GET, delete/free, a small connection pool for
thread safety; not metadata (allocation comes from the caller, see
``put(alloc=...)``). Imports only the stdlib and pyeclib, so a task Lambda
can carry it.
"""

from __future__ import annotations

import socket
import threading
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from storage_functions.exceptions import ObjectTooLarge, ProtocolError, StoreError
from storage_functions.protocol import Op, Status, error_for, recv_exact, recv_frame, recv_into, send_frame, tune_socket

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
        return bytes(self._call(self._get, key, version))

    def get_buffer(self, key: str, version: int | None = None) -> bytearray:
        """Like :meth:`get` without the final copy into ``bytes``."""
        return self._call(self._get, key, version)  # type: ignore[no-any-return]

    def _get(self, sock: socket.socket, key: str, version: int | None) -> bytearray:
        send_frame(sock, Op.GET, key=key, meta={"version": version} if version is not None else None)
        head = self._reply(sock)
        size = int(head.meta["size"])
        infos = [StripeInfo(int(s["d"]), int(s["p"]), int(s["fs"]), int(s["ol"]), int(s["cl"]))
                 for s in head.meta["stripes"]]
        out = bytearray(size)
        view = memoryview(out)
        starts, off = [], 0
        for info in infos:
            starts.append(off)
            off += info.ol
        got: list[dict[int, tuple[bytes, bytes]]] = [{} for _ in infos]  # data chunks: header, tail
        extra: list[dict[int, bytes]] = [{} for _ in infos]
        hbuf = bytearray(40)
        while True:
            f = recv_frame(sock, hbuf)
            if f is None:
                raise ProtocolError(f"GET {key!r}: daemon closed the connection mid-object")
            if f.op == Op.END:
                if f.status != Status.OK:
                    exc = error_for(f.status, recv_exact(sock, f.paylen).decode(errors="replace"))
                    exc._stream_ok = True  # type: ignore[attr-defined]
                    raise exc
                break
            if f.op != Op.CHUNK or f.a >= len(infos):
                raise ProtocolError(f"GET {key!r}: unexpected frame op={f.op}")
            s, i = f.a, f.b
            info = infos[s]
            if f.paylen != info.cl:
                raise ProtocolError(f"GET {key!r}: chunk {s}/{i} is {f.paylen} bytes, expected {info.cl}")
            if not info.coded:
                recv_into(sock, view[starts[s]:starts[s] + info.ol])
                got[s][0] = (b"", b"")
            elif i < info.d:
                hdr = bytes(recv_exact(sock, info.header))
                lo = i * info.fs
                n = max(0, min(info.fs, info.ol - lo))
                if n:
                    recv_into(sock, view[starts[s] + lo:starts[s] + lo + n])
                tail = bytes(recv_exact(sock, info.fs - n)) if info.fs > n else b""
                got[s][i] = (hdr, tail)
            else:
                extra[s][i] = bytes(recv_exact(sock, f.paylen))
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
        return out

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
