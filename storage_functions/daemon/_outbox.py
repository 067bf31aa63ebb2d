"""What the daemon sends to one SDK client connection while a GET is in
flight: :class:`Outbox` takes frames from any thread (function reader
threads, fallbacks) and writes them to the client in the order they were
handed over, without ever blocking the thread that hands them over on the
client's socket. Covers the non-blocking fast path, the queue behind it and
its writer thread; not what the frames mean (``_collect``).

A frame handed over while nothing is queued is written at once with a
non-blocking ``sendmsg`` (a client that keeps up: no hand-off, no copy).
What the kernel does not take (the client reads slowly, its socket buffers
are full) is queued and written by the connection's writer thread, which
alone blocks on the client; while it has anything queued every later frame
queues behind it. Callers bound the queue themselves (a GET requests only a
window of stripes ahead of what was written, see ``Collector``): the
``done`` callback of a frame runs once its last byte was written.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from typing import Any, Callable

from ..protocol import sendmsg_all

__all__ = ["Outbox", "BufferPool"]

log = logging.getLogger("storage_functions.daemon")

Done = Callable[[], None]


def _skip(views: list[memoryview], sent: int) -> list[memoryview]:
    """``views`` without their first ``sent`` bytes."""
    while views and sent >= len(views[0]):
        sent -= len(views.pop(0))
    if sent:
        views[0] = views[0][sent:]
    return views


class BufferPool:
    """Receive buffers for chunks that queue behind a slow client, reused
    (a fresh one costs its page faults, about what the transfer does).
    ``take(n)`` is a view of ``n`` bytes of a buffer rounded up to
    ``grain``; ``give`` returns it (kept while under ``max_bytes``)."""

    def __init__(self, max_bytes: int = 64 << 20, grain: int = 64 << 10) -> None:
        self.max_bytes = max_bytes
        self.grain = grain
        self._free: dict[int, list[bytearray]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> tuple[bytearray, memoryview]:
        size = -(-max(n, 1) // self.grain) * self.grain
        with self._lock:
            free = self._free.get(size)
            if free:
                buf = free.pop()
                self._bytes -= size
            else:
                buf = None
        if buf is None:
            buf = bytearray(size)
        return buf, memoryview(buf)[:n]

    def give(self, buf: bytearray) -> None:
        with self._lock:
            if self._bytes + len(buf) <= self.max_bytes:
                self._free.setdefault(len(buf), []).append(buf)
                self._bytes += len(buf)


class Outbox:
    """Ordered, non-blocking sends to one client socket (see the module
    docstring). ``lock`` orders hand-overs: hold it while deciding what
    comes next and call :meth:`send_locked` under it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._queue: deque[tuple[list[Any], Done | None]] = deque()
        self.busy = False  # the writer thread owns the socket (something is queued or being written)
        self.dead = False  # a send failed or the connection closed: everything is dropped
        self.queued_bytes = 0
        self.peak_bytes = 0  # most bytes ever queued at once (tests, stats)
        self._closing = False
        self._thread: threading.Thread | None = None

    def send_locked(self, pieces: list[Any], done: Done | None = None, *, copy: bool = True) -> bool:
        """Hand over one frame's ``pieces`` (bytes-like); the caller holds
        :attr:`lock`. True: written now, the caller runs ``done`` itself
        (after releasing the lock). False: queued (the writer thread runs
        ``done`` once written) or dropped (:attr:`dead`). ``copy``: the
        pieces are borrowed (a scratch buffer), queue a copy of them."""
        if self.dead:
            return False
        views = [memoryview(p).cast("B") for p in pieces if len(p)]
        if not self.busy:
            try:
                views = self._send_nowait(views)
            except OSError:
                self._die_locked()
                return False
            if not views:
                return True
        if copy:
            views = [memoryview(b"".join(views))] if len(views) > 1 else [memoryview(bytes(views[0]))]
        self._queue.append((views, done))
        self.queued_bytes += sum(len(v) for v in views)
        self.peak_bytes = max(self.peak_bytes, self.queued_bytes)
        if not self.busy:
            self.busy = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="sion-client-writer")
                self._thread.start()
            else:
                self._cond.notify()
        return False

    @property
    def cond(self) -> threading.Condition:
        """The condition (on :attr:`lock`) notified whenever the outbox goes idle or dies."""
        return self._cond

    def send(self, pieces: list[Any], *, copy: bool = True) -> None:
        """:meth:`send_locked` for a caller that holds nothing."""
        with self.lock:
            self.send_locked(pieces, copy=copy)

    def _send_nowait(self, views: list[memoryview]) -> list[memoryview]:
        """Write what the kernel takes now; the rest of ``views``."""
        while views:
            try:
                sent = self.sock.sendmsg(views[:512], [], socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            views = _skip(views, sent)
        return views

    def _die_locked(self) -> None:
        self.dead = True
        self._queue.clear()
        self.queued_bytes = 0
        self._cond.notify_all()

    def _run(self) -> None:
        """The writer thread: write what is queued, blocking on the client."""
        while True:
            with self.lock:
                while not self._queue and not self._closing:
                    self.busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                if not self._queue:
                    self.busy = False
                    self._cond.notify_all()
                    return
                batch = list(self._queue)
                self._queue.clear()
            views = [v for vs, _ in batch for v in vs]
            n = sum(len(v) for v in views)
            try:
                sendmsg_all(self.sock, views)
            except OSError:
                with self.lock:
                    self._die_locked()
                    self.busy = False
                return
            with self.lock:
                self.queued_bytes = max(0, self.queued_bytes - n)
            for _, done in batch:
                if done is not None:
                    try:
                        done()
                    except Exception:  # noqa: BLE001 - the writer must go on for the next frames
                        log.exception("after a write to a client")

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything handed over was written (or dropped)."""
        with self.lock:
            return self._cond.wait_for(lambda: not self.busy or self.dead, timeout)

    def close(self) -> None:
        """The connection is over: drop what is queued and stop the writer
        (the caller closes the socket afterwards)."""
        with self.lock:
            self._closing = True
            self._die_locked()
            thread = self._thread
        if thread is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)  # a writer blocked on the client returns
            except OSError:
                pass
            thread.join(5)
