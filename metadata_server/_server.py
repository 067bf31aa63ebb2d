"""The metadata server's socket loop: framed Thrift over one selector thread.

One thread accepts connections, reads 4-byte length-prefixed frames
(TFramedTransport), runs each through the generated processor with the
accelerated binary protocol over memory buffers, and writes the reply frame.
Replies of one round of ready
connections wait for one journal transaction (group commit) and then go out.
One thread means no lock convoy on the GIL and no per-connection threads; the
core is single-writer anyway. The same loop calls ``handler.tick()`` every
``tick_interval_s`` (TTLs, leases). Any standard Thrift client with framed
transport and binary protocol can talk to it.

``stop()`` is safe from any thread and from a signal handler; ``serve_forever``
then closes every socket before it returns. Not covered: TLS, multiple
processes (the state lives in one process).
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
import time

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc.gen.metadata import Metadata

from ._handler import MetadataHandler

__all__ = ["MetadataServer"]

log = logging.getLogger("funcsion.metadata")
_LEN = struct.Struct("!i")
MAX_FRAME = 64 << 20


class _Conn:
    __slots__ = ("sock", "inbuf", "outbuf", "writing")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.writing = False


class MetadataServer:
    def __init__(self, handler: MetadataHandler, host: str = "127.0.0.1", port: int = 0, *,
                 tick_interval_s: float = 1.0) -> None:
        self.handler = handler
        self.processor = Metadata.Processor(handler)
        self.tick_interval_s = tick_interval_s
        self._listen = socket.create_server((host, port), backlog=1024)
        self._listen.setblocking(False)
        self.host, self.port = self._listen.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> MetadataServer:
        """Serve in a background thread (tests, the local stack)."""
        self._thread = threading.Thread(target=self.serve_forever, name="metadata-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self.stop()
        self.join(10)
        if not self._closed:
            self._close_all()

    def __enter__(self) -> MetadataServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop -------------------------------------------------------------------
    def serve_forever(self) -> None:
        sel = self._sel
        sel.register(self._listen, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        next_tick = time.monotonic() + self.tick_interval_s
        self.handler.defer_journal = True
        ready: list[_Conn] = []
        try:
            while not self._stop:
                timeout = max(0.0, next_tick - time.monotonic())
                for key, mask in sel.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        try:
                            self._wake_r.recv(4096)
                        except BlockingIOError:
                            pass
                    else:
                        conn: _Conn = key.data
                        if mask & selectors.EVENT_READ:
                            self._read(conn)
                        if conn.outbuf:
                            ready.append(conn)
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.tick_interval_s
                    try:
                        self.handler.tick()
                    except Exception:  # pragma: no cover - a bug in the core
                        log.exception("tick failed")
                # group commit: one journal transaction for everything applied in this round,
                # before any of its replies is sent
                self.handler.flush_journal()
                for conn in ready:
                    if conn.sock.fileno() >= 0:
                        self._flush(conn)
                ready.clear()
        finally:
            self.handler.flush_journal()
            self.handler.defer_journal = False
            self._close_all()

    def _close_all(self) -> None:
        if self._closed:
            return
        self._closed = True
        for key in list(self._sel.get_map().values()):
            if isinstance(key.data, _Conn):
                key.data.sock.close()
        self._sel.close()
        self._listen.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _drop(self, conn: _Conn) -> None:
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        buf = conn.inbuf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n < 0 or n > MAX_FRAME:
                log.warning("dropping a connection that sent a %d-byte frame", n)
                self._drop(conn)
                return
            if len(buf) - pos - 4 < n:
                break
            frame = bytes(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
            conn.outbuf += self._process(frame)
        if pos:
            del buf[:pos]

    def _process(self, frame: bytes) -> bytes:
        itrans = TMemoryBuffer(frame)
        otrans = TMemoryBuffer()
        self.processor.process(TBinaryProtocolAccelerated(itrans), TBinaryProtocolAccelerated(otrans))
        out = otrans.getvalue()
        return _LEN.pack(len(out)) + out

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(conn)
            return
        del conn.outbuf[:sent]
        want_write = bool(conn.outbuf)
        if want_write != conn.writing:
            conn.writing = want_write
            self._sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0), conn)
