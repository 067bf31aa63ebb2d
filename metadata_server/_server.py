"""The metadata server's socket loop: framed Thrift over one selector thread.

One thread accepts connections, reads 4-byte length-prefixed frames
(TFramedTransport), runs each through the generated processor with the
accelerated binary protocol over memory buffers (``_process``), and writes the
reply frame. Replies of one round of ready connections wait for one journal
write of everything the round applied (group commit) and then go out.
One thread means no lock convoy on the GIL and no per-connection threads; the
core is single-writer anyway. The same loop calls ``handler.tick()`` every
``tick_interval_s`` (TTLs, leases). Any standard Thrift client with framed
transport and binary protocol can talk to it.

Hostile or broken peers (DESIGN "Security"; limits in ``funcsion_rpc.limits``):

- a frame that does not decode (bad version, a string over the limit, garbage)
  closes that connection only, with one log line (``_frames.LogLimiter`` caps
  them at 10 a minute); every other connection is served on;
- a frame longer than ``max_frame_bytes`` (a setting, default
  ``DEFAULT_MAX_FRAME_BYTES``) is refused from its header before its body is
  read, and so is a frame longer than ``HANDSHAKE_BYTES`` whose header fails
  the token check: the caller gets the ``MetadataFault`` (``InvalidRequest`` /
  ``Unauthorized``) and the body is discarded as it arrives, so before
  authentication a peer makes the server hold at most a handshake's worth;
- a peer that sends requests without reading the replies stops being read
  once ``OUT_HIGH`` bytes of replies wait for it.

TLS: given ``edge`` (``sdk.cli.serve_metadata`` passes one built on
``storage_functions.tls.TlsAcceptor``; this package does not import it), every
accepted socket goes to the edge, which bounds and times its handshake and hands
back the plain end of a relay (``_deliver``, from its thread; the loop registers
it on its next wake-up). The loop itself never sees TLS.

A modelled link (``link``, ``funcsion serve metadata --host-bandwidth-mbps``: one VM per
shard in ``funcsion bench scale``): each round's replies go out once the round's bytes in
and out are through it, booked from when the round began.

``stop()`` is safe from any thread and from a signal handler; ``serve_forever``
then closes every socket before it returns. Not covered: multiple processes (the
state lives in one process), a cap on the number of connections.
"""

from __future__ import annotations

import gc
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from funcsion_rpc.errors import InvalidRequest
from funcsion_rpc.limits import DEFAULT_MAX_FRAME_BYTES, HANDSHAKE_BYTES, MAX_WDS_BYTES, MIN_MAX_FRAME_BYTES

from ._frames import NEED_MORE, LogLimiter, fault_frame, peek_head
from ._handler import MetadataHandler
from ._process import FrameProcessor

__all__ = ["MetadataServer", "tune_gc_for_serving", "Edge", "EdgeFactory", "Link"]

log = logging.getLogger("funcsion.metadata")
_LEN = struct.Struct("!i")
RECV_BYTES = 64 << 10               # one recv: what a connection may add to its buffer per round
OUT_HIGH = 1 << 20                  # replies waiting for a peer past which it is not read
_HARD_MAX_FRAME = (1 << 31) - 1
_WAKE = "wake"                      # the selector data of the wake-up socket (compared by identity)


class Edge(Protocol):
    """Where accepted sockets go when the server has an edge (TLS): ``accept`` takes one and
    later hands the plain end back to the ``deliver(sock, peer)`` the edge was made with."""

    def accept(self, sock: socket.socket) -> None: ...


#: ``factory(deliver) -> Edge``
EdgeFactory = Callable[[Callable[[socket.socket, str], None]], Edge]


class Link(Protocol):
    """A modelled network link the server's traffic holds to (``storage_functions.throttle.HostLink``,
    which ``sdk.cli.serve_metadata`` passes in; this package does not import it): ``carry`` books
    a round's bytes received and sent from when the round began and waits until they are through."""

    def carry(self, rx: int, tx: int, since: float) -> float: ...


def tune_gc_for_serving() -> None:
    """For a process that is a metadata server (``funcsion serve metadata``), once its journal
    is replayed: what exists now (the replayed state, the imported code) is moved out of the
    cyclic collector's reach (``gc.freeze``), and young objects are collected every 50,000
    allocations instead of 700, so the temporaries of a large batch are seldom promoted and
    rarely trigger a full scan of the state. Process-wide: not for processes that embed the
    server among other work."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


class _BadPeer(Exception):
    """The peer broke the protocol; its connection is closed."""


class _Conn:
    __slots__ = ("sock", "peer", "inbuf", "outbuf", "events", "skip", "admitted")

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.events = selectors.EVENT_READ
        self.skip = 0               # body bytes of a refused frame still to discard
        self.admitted = False       # the large frame being read passed its header check


class MetadataServer:
    def __init__(self, handler: MetadataHandler, host: str = "127.0.0.1", port: int = 0, *,
                 tick_interval_s: float = 1.0, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 edge: EdgeFactory | None = None, link: Link | None = None) -> None:
        if not MIN_MAX_FRAME_BYTES <= max_frame_bytes <= _HARD_MAX_FRAME:
            raise ValueError(f"max_frame_bytes must be {MIN_MAX_FRAME_BYTES:,} to {_HARD_MAX_FRAME:,} (a register "
                             f"call with the largest WDS, {MAX_WDS_BYTES:,} bytes, must fit), got {max_frame_bytes:,}")
        self.handler = handler
        self._frames = FrameProcessor(handler, string_length_limit=max_frame_bytes)
        self.processor = self._frames.processor
        self.tick_interval_s = tick_interval_s
        self.max_frame_bytes = max_frame_bytes
        self.bad_peers = 0          # connections closed for breaking the protocol
        self._bad_log = LogLimiter()
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
        self._edge = edge(self._deliver) if edge is not None else None
        self._arrived: list[tuple[socket.socket, str]] = []     # plain ends the edge handed over, for the loop
        self._arrived_lock = threading.Lock()
        self._link = link
        self._rx = self._tx = 0     # bytes this round read and replied (what ``link`` is given)

    @property
    def tls(self) -> bool:
        """Whether connections go through an edge (TLS)."""
        return self._edge is not None

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
        sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        next_tick = time.monotonic() + self.tick_interval_s
        self.handler.defer_journal = True
        ready: list[_Conn] = []
        try:
            while not self._stop:
                timeout = max(0.0, next_tick - time.monotonic())
                events = sel.select(timeout)
                began = time.monotonic()
                for key, mask in events:
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        try:
                            self._wake_r.recv(4096)
                        except BlockingIOError:
                            pass
                        self._register_arrived()
                    else:
                        conn: _Conn = key.data
                        if mask & selectors.EVENT_READ:
                            try:
                                self._read(conn)
                            except _BadPeer as exc:
                                self._bad(conn, str(exc))
                            except Exception as exc:  # a bug here must not stop the loop for everyone
                                log.exception("metadata server: error serving %s", conn.peer)
                                self._bad(conn, f"server error {exc!r}")
                        if conn.outbuf:
                            ready.append(conn)
                now = time.monotonic()
                if now >= next_tick:
                    next_tick = now + self.tick_interval_s
                    try:
                        self.handler.tick()
                    except Exception:  # pragma: no cover - a bug in the core
                        log.exception("tick failed")
                # group commit: one journal transaction for everything applied in this round,
                # before any of its replies is sent
                self.handler.flush_journal()
                if self._link is not None and (self._rx or self._tx):
                    self._link.carry(self._rx, self._tx, began)
                    self._rx = self._tx = 0
                for conn in ready:
                    if conn.sock.fileno() >= 0:
                        self._flush(conn)
                ready.clear()
        finally:
            try:
                self.handler.flush_journal(touches=True)
            except Exception:  # the journal failed (disk full?): no reply of the round went out
                log.exception("metadata server: could not write the journal while stopping")
            finally:
                self.handler.defer_journal = False
                self._close_all()

    def _close_all(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._arrived_lock:
            arrived, self._arrived = self._arrived, []
        for s, _ in arrived:
            s.close()
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
                sock, addr = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:    # out of descriptors: the backlog waits for the next round
                self._warn(f"cannot accept connections: {exc}")
                return
            if self._edge is not None:
                self._edge.accept(sock)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock, peer))

    def _deliver(self, sock: socket.socket, peer: str) -> None:
        """The edge's thread: a connection whose handshake completed (its plain end)."""
        with self._arrived_lock:
            if self._closed:
                sock.close()
                return
            self._arrived.append((sock, peer))
        try:
            self._wake_w.send(b"x")
        except OSError:  # the wake-up pipe is full (the loop wakes anyway) or closed (stopping)
            pass

    def _register_arrived(self) -> None:
        with self._arrived_lock:
            arrived, self._arrived = self._arrived, []
        for sock, peer in arrived:
            sock.setblocking(False)
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock, peer))

    def _drop(self, conn: _Conn) -> None:
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        conn.inbuf.clear()
        conn.outbuf.clear()

    def _bad(self, conn: _Conn, reason: str) -> None:
        """Close a connection that broke the protocol; one (rate-limited) log line."""
        self.bad_peers += 1
        self._warn(f"closed the connection from {conn.peer}: {reason}")
        self._drop(conn)

    def _warn(self, message: str) -> None:
        emit, held = self._bad_log.allow(time.monotonic())
        if emit:
            log.warning("metadata server: %s%s", message,
                        f" ({held} similar lines held back)" if held else "")

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        self._rx += len(data)
        buf = conn.inbuf
        if not buf and not conn.skip and len(data) >= 4:
            (n,) = _LEN.unpack_from(data, 0)
            if 0 <= n <= HANDSHAKE_BYTES and len(data) == 4 + n:   # the usual case: one whole small frame
                conn.outbuf += self._process(data[4:])
                return
        buf += data
        pos = 0
        while True:
            if conn.skip:
                k = min(conn.skip, len(buf) - pos)
                pos += k
                conn.skip -= k
                if conn.skip:
                    break
            if len(buf) - pos < 4:
                break
            (n,) = _LEN.unpack_from(buf, pos)
            if n < 0:
                raise _BadPeer(f"a frame of length {n}")
            avail = len(buf) - pos - 4
            if n > HANDSHAKE_BYTES and not conn.admitted:
                verdict = self._admit(n, bytes(buf[pos + 4:pos + 4 + min(avail, HANDSHAKE_BYTES)]))
                if verdict is None:
                    break                           # the header is not in yet
                if verdict is not True:
                    conn.outbuf += verdict          # refused: answer now, discard the body
                    conn.skip = n
                    pos += 4
                    continue
                conn.admitted = True
            if avail < n:
                break
            frame = bytes(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
            conn.admitted = False
            conn.outbuf += self._process(frame)
        if pos:
            del buf[:pos]

    def _admit(self, n: int, prefix: bytes) -> bytes | Literal[True] | None:
        """A frame of ``n`` > HANDSHAKE_BYTES bytes, from its first bytes: True (read it),
        the fault reply (refused), None (wait for more of the header)."""
        head = peek_head(prefix, HANDSHAKE_BYTES)
        if head == NEED_MORE:
            if len(prefix) < HANDSHAKE_BYTES:
                return None
            raise _BadPeer(f"a {n:,}-byte frame whose header is over {HANDSHAKE_BYTES:,} bytes")
        if head is None or isinstance(head, str):
            raise _BadPeer(f"a {n:,}-byte frame that is no call of the metadata service")
        error = self.handler.check_caller(head.method, head.token, head.run_id)
        if error is None and n > self.max_frame_bytes:
            error = InvalidRequest(f"a {head.method} request of {n:,} bytes is over this server's frame limit of "
                                   f"{self.max_frame_bytes:,} bytes (funcsion serve metadata --max-frame-bytes); "
                                   f"a workflow's WDS may be at most {MAX_WDS_BYTES:,} bytes")
        if error is None:
            return True
        reply = fault_frame(head.method, head.seqid, error)
        if reply is None:
            raise _BadPeer(f"a {n:,}-byte {head.method!r} frame ({error.message})")
        return reply

    def _process(self, frame: bytes) -> bytes:
        try:
            out = self._frames.process(frame)
        except Exception as exc:  # noqa: BLE001 - a frame that does not decode closes that peer only
            text = str(exc)
            raise _BadPeer(f"a {len(frame):,}-byte frame that does not decode ({type(exc).__name__}"
                           f"{': ' + text[:200] if text else ''})") from None
        self._tx += 4 + len(out)
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
        # write while replies wait; stop reading a peer that does not read its replies
        events = ((selectors.EVENT_READ if len(conn.outbuf) < OUT_HIGH else 0)
                  | (selectors.EVENT_WRITE if conn.outbuf else 0))
        if events != conn.events:
            conn.events = events
            self._sel.modify(conn.sock, events, conn)
