"""The daemon's connections before they authenticate: one thread (``HelloGate``)
reads the HELLO of every pending connection at once, with a selector, and hands a
connection on (``on_hello``) only once its whole HELLO is in; so a peer that never
authenticates costs no thread, and at most ``HEADER_SIZE + HELLO_LIMIT`` bytes.

A connection whose HELLO is not whole by ``timeout_s`` after it was accepted is
closed (``hello_timeouts``); one whose HELLO is malformed gets an error reply and is
closed (``bad_frames``); past ``max_pending`` connections waiting at once, the
oldest is closed (``hello_evicted``): a flood of idle connections cannot keep a new
peer out for longer than it takes to send its HELLO. The gate reads no byte past a
HELLO, so whatever a peer sent after it is left on the socket for its session.

Not here: accepting (``_server.Daemon._accept_loop``) and what a HELLO proves and
what follows it (``_session.admit``)."""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..exceptions import ProtocolError
from ..protocol import HEADER_SIZE, HELLO_LIMIT, Frame, Op, Status, frame_bytes, parse_frame

__all__ = ["HelloGate"]

log = logging.getLogger("storage_functions.daemon")


@dataclass(slots=True)
class _Pending:
    sock: socket.socket
    deadline: float  # monotonic
    buf: bytearray = field(default_factory=bytearray)
    need: int = HEADER_SIZE  # bytes of the HELLO known so far to be needed in all


class HelloGate:
    """``add(sock)`` a connection just accepted; ``on_hello(sock, hello)`` runs on the
    gate's thread with its whole HELLO (the socket blocking again) and must not block:
    it authenticates and starts the connection's thread, or refuses it (it may raise
    ``ProtocolError``: an error reply and the connection closed). ``count(name)`` adds
    to the daemon's counters."""

    def __init__(self, on_hello: Callable[[socket.socket, Frame], None], count: Callable[[str], None], *,
                 timeout_s: float, max_pending: int, clock: Callable[[], float] = time.monotonic) -> None:
        if max_pending < 1:
            raise ValueError(f"HelloGate: max_pending must be >= 1, got {max_pending}")
        self._on_hello = on_hello
        self._count = count
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._clock = clock
        # by deadline: every connection waits the same timeout, so in the order they came
        self._pending: dict[socket.socket, _Pending] = {}
        self._new: list[_Pending] = []  # added by the accepting thread, taken by the gate's
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sion-hello")
        self._sel = selectors.DefaultSelector()
        # the gate's wake-up: opened by start() (a socket never closed would warn), closed by stop()
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None

    def start(self) -> None:
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._thread.start()

    def stop(self) -> None:
        """Close every pending connection; the gate's thread ends."""
        with self._lock:
            self._stopping = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            left = [p.sock for p in self._new] + list(self._pending)
            self._new.clear()
            self._pending.clear()
        for sock in left:
            sock.close()
        self._sel.close()
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()

    def add(self, sock: socket.socket) -> None:
        """A connection just accepted: its HELLO is due within the timeout from now."""
        with self._lock:
            if self._stopping:
                sock.close()
                return
            self._new.append(_Pending(sock, self._clock() + self._timeout_s))
        self._wake()

    def pending(self) -> int:
        """Connections waiting for their HELLO now."""
        with self._lock:
            return len(self._pending) + len(self._new)

    def _wake(self) -> None:
        if self._wake_w is None:  # not started
            return
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # full: the gate is woken already; closed: it is stopping
            pass

    # -- the gate's thread ----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                new, self._new = self._new, []
            try:
                self._step(new)
            except Exception:  # noqa: BLE001 - a bug: without this thread no connection is served
                self._count("conn_errors")
                log.exception("HELLO gate: a step failed")

    def _step(self, new: list[_Pending]) -> None:
        """Take the connections just added, wait for bytes (until the first deadline at
        most), read what came, and close the connections past their deadline."""
        for p in new:
            self._admit(p)
        first = next(iter(self._pending.values()), None)
        wait = None if first is None else max(0.0, first.deadline - self._clock())
        for key, _ in self._sel.select(wait):
            if key.fileobj is self._wake_r:
                assert self._wake_r is not None
                try:
                    while self._wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            else:
                p = self._pending.get(key.fileobj)  # type: ignore[call-overload]
                if p is not None:
                    self._read(p)
        self._expire(self._clock())

    def _admit(self, p: _Pending) -> None:
        """Start waiting for ``p``'s HELLO; past ``max_pending``, the oldest is closed."""
        while len(self._pending) >= self._max_pending:
            oldest = next(iter(self._pending.values()))
            self._drop(oldest)
            self._count("hello_evicted")
            log.debug("connection closed: %d others wait for their HELLO", self._max_pending)
        try:
            p.sock.setblocking(False)
            self._sel.register(p.sock, selectors.EVENT_READ)
        except (OSError, ValueError) as exc:  # gone already
            log.debug("connection ended before its HELLO: %r", exc)
            p.sock.close()
            return
        self._pending[p.sock] = p

    def _expire(self, now: float) -> None:
        while self._pending:
            p = next(iter(self._pending.values()))
            if p.deadline > now:
                return
            self._drop(p)
            self._count("hello_timeouts")
            log.debug("connection closed: no whole HELLO within %.1f s", self._timeout_s)

    def _drop(self, p: _Pending) -> None:
        del self._pending[p.sock]
        try:
            self._sel.unregister(p.sock)
        except (KeyError, ValueError):
            pass
        p.sock.close()

    def _read(self, p: _Pending) -> None:
        """Read what ``p``'s HELLO still needs (never past it) until the socket has no more
        for now; hand it on once whole. (Reading on until then, not once per wake-up: a
        socket that decrypts (TLS) may hold bytes the selector does not see.)"""
        while True:
            try:
                data = p.sock.recv(p.need - len(p.buf))
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as exc:
                log.debug("connection ended before its HELLO: %r", exc)
                self._drop(p)
                return
            if not data:  # the peer closed before a whole HELLO
                self._drop(p)
                return
            p.buf += data
            if len(p.buf) < p.need:
                continue
            try:
                got = parse_frame(p.buf, max_meta=HELLO_LIMIT, max_payload=0)
                if isinstance(got, int):
                    p.need = got
                    continue
                del self._pending[p.sock]
                self._sel.unregister(p.sock)
                p.sock.setblocking(True)
                if got.op != Op.HELLO:
                    raise ProtocolError(f"first frame must be HELLO, got op {got.op}")
                self._on_hello(p.sock, got)
            except ProtocolError as exc:
                self._count("bad_frames")
                self._refuse(p.sock, str(exc))
            except Exception:  # noqa: BLE001 - a bug: this connection ends, the gate serves on
                self._count("conn_errors")
                log.exception("connection failed at its HELLO")
                self._pending.pop(p.sock, None)
                p.sock.close()
            return

    def _refuse(self, sock: socket.socket, message: str) -> None:
        """Best effort, without blocking: the error reply, then close."""
        self._pending.pop(sock, None)
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        try:
            sock.setblocking(False)
            sock.send(frame_bytes(Op.REPLY, status=Status.PROTOCOL, payload=message.encode()))
        except OSError:
            pass
        sock.close()
