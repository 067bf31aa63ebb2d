"""The daemon's per-request helpers: ``Waiter`` keeps a PUT's outstanding
chunk writes, ``Collector`` runs the first-d GET of one object version:
the I/O shell (requests to functions, reader-thread callbacks, writes to the
client's outbox) around its pure window of stripes (``_window.GetWindow``), ``NullSock`` keeps a
client stream in step when a chunk is dropped, ``scratch_view`` is a
per-thread receive buffer. The request paths that use them are in
``_server``; the client side of a GET reply is ``_outbox``.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

from ..protocol import Frame, Op, Status, drain, pack_header, recv_into
from ._host import GetHost
from ._lanes import Lane
from ._objects import ObjectVersion, chunk_key
from ._window import GetWindow, Picks

__all__ = ["Collector", "NullSock", "Waiter", "scratch_view"]


class NullSock:
    def sendall(self, data: Any) -> None:
        pass


class Waiter:
    """Keeps the chunk PUTs whose replies are outstanding; collects the failed ones. A PUT may be armed
    (:meth:`then`) so that its last reply completes it where it arrives instead of
    waking the thread that sent it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: set[tuple[int, int]] = set()  # chunks sent, their replies outstanding
        self.failed: list[tuple[int, int]] = []
        self._then: Callable[[bool], None] | None = None
        self.done = False  # the armed completion ran to its end

    def add(self, s: int, i: int) -> None:
        """Chunk ``i`` of stripe ``s`` went out: its reply (or :meth:`fail`) is awaited."""
        with self.cond:
            self.waiting.add((s, i))

    def fail(self, s: int, i: int) -> None:
        self._settle(s, i, False)

    def callback(self, s: int, i: int, on_ok: Callable[[], None] | None = None
                 ) -> Callable[[Frame | None, socket.socket | None], None]:
        """The reply callback of chunk ``i`` of stripe ``s``; ``on_ok`` runs when the
        function stored it."""
        def cb(f: Frame | None, fsock: socket.socket | None) -> None:
            if f is not None and f.paylen and fsock is not None:
                drain(fsock, f.paylen)
            ok = f is not None and f.status == Status.OK
            if ok and on_ok is not None:
                on_ok()
            self._settle(s, i, ok)
        return cb

    def _settle(self, s: int, i: int, ok: bool) -> None:
        run, stored = None, False
        with self.cond:
            if not ok:
                self.failed.append((s, i))
            self.waiting.discard((s, i))
            if not self.waiting and self._then is not None:
                run, self._then = self._then, None
                stored = not self.failed
            self.cond.notify_all()
        if run is None:
            return
        if stored:
            run(True)  # quick and non-blocking: here, on the thread of the last reply
        else:  # chunks to store again: it blocks, and this may be a function's reader thread
            threading.Thread(target=run, args=(False,), name="sion-put-retry", daemon=True).start()

    def then(self, complete: Callable[[bool], None]) -> bool:
        """Arm: once every reply is in, ``complete(True)`` runs on the thread of the last
        one when every chunk was stored, else ``complete(False)`` on a thread of its own
        (it may block to store chunks again). False, and nothing armed, when every reply
        is in already: the caller completes the PUT itself."""
        with self.cond:
            if not self.waiting:
                return False
            self._then = complete
            return True

    def take(self) -> Callable[[bool], None] | None:
        """The armed completion if it has not started; it will not now (the caller runs it)."""
        with self.cond:
            run, self._then = self._then, None
            return run

    def finished(self) -> None:
        """The armed completion ran to its end."""
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def wait_done(self, timeout: float | None) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.done, timeout)

    def silent(self) -> list[tuple[int, int]]:
        """The chunks whose replies are still outstanding."""
        with self.cond:
            return sorted(self.waiting)

    def wait(self, timeout: float) -> list[tuple[int, int]]:
        """The chunks that failed, once every reply is in; past ``timeout``, also the
        chunks whose replies are still outstanding (their functions did not answer)."""
        with self.cond:
            if not self.cond.wait_for(lambda: not self.waiting, timeout):
                return sorted(set(self.failed) | self.waiting)
            return sorted(set(self.failed))


_tls = threading.local()


#: where a GET was served from, in the order that decides it: one chunk from COS makes the GET a
#: COS read (a miss), else one from the daemon's persistent buffer a buffer read, else one from a
#: cache function a cache read; a GET whose chunks all came from the functions holding them is
#: served from function memory
SERVED_FROM = ("cos", "buffer", "cache", "functions")


def count_served(host: Any, served: set[str]) -> None:
    """Count one GET under ``gets_from_<where>`` (``SERVED_FROM``) of the sources its chunks came from."""
    host.count("gets_from_" + next((w for w in SERVED_FROM if w in served), "functions"))


def scratch_view(n: int) -> memoryview:
    buf = getattr(_tls, "buf", None)
    if buf is None or len(buf) < n:
        buf = _tls.buf = bytearray(max(n, 1 << 16))
    return memoryview(buf)[:n]


class Collector:
    """First-d GET of one object version: the I/O shell around its pure
    :class:`GetWindow` (which stripes to request, which chunks to claim,
    when to fall back; see ``_window``). A stripe that runs out of chunks or
    time is finished from the buffer or COS (``Daemon._fallback_stripe``).

    Chunks are received by the function connection's reader thread and
    handed to the client's outbox through this request's :class:`Lane`
    (written at once while the client keeps up, else queued; held while an
    earlier request of the connection is still answered; the reader never
    blocks on the client); the thread of the last chunk appends END and
    finishes the lane. Late, failed or surplus chunks are drained."""

    def __init__(self, host: GetHost, out: Lane, obj: ObjectVersion, reqid: int, head: bytes, *,
                 window: int = 0, extra: int | None = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.out = out
        self.obj = obj
        self.reqid = reqid
        self.head: bytes | None = head  # the REPLY frame, sent before the first chunk
        self.clock = clock
        handles = host.handles
        self.win = GetWindow(obj.stripes, window=window, extra=extra,
                             route=lambda s, i: host.recovery.route(obj, s, i),
                             ready=lambda fn: fn < len(handles) and handles[fn].state == "active"
                             and not handles[fn].silent
                             and not host.recovery.busy(fn))
        self.cache = host.cache_functions  # the daemon's cache functions (``_burst_io``), if any
        self.cond = threading.Condition()
        self.large = [st.cl >= host.config.large_threshold for st in obj.stripes]
        self.inline = len(obj.stripes) == 1 and obj.stripes[0].n == 1
        self.cached: set[tuple[int, int]] = set()  # chunks asked of a cache function (under the lock)
        self.served: set[str] = set()  # where the chunks handed to the client came from

    # -- requests (picked under the lock, issued outside it) ------------------------
    def _counted(self) -> None:
        """Move the window's count of chunks found without a place to the counters (locked)."""
        if self.win.missing:
            self.host.count("missing_chunks", self.win.missing)
            self.win.missing = 0
        if self.win.rerouted:
            self.host.count("rerouted_gets", self.win.rerouted)
            self.win.rerouted = 0

    def _issue(self, s: int, idxs: list[int]) -> None:
        obj = self.obj
        for i in idxs:
            fn, routed = self.win.holder(s, i)
            cb = self.callback(s, i, fn)
            if fn is None or fn >= len(self.host.handles):
                # its function was lost meanwhile (and no recovery function has a copy), or is
                # not started yet (a restarted daemon's restored places): a missing chunk
                cb(None, None)
                continue
            meta = None
            if self.cache is not None and not routed:  # its function's queue is full: a cache function
                h, meta, cb = self.cache.route(obj, s, i, fn, cb)
                if meta is not None:             # routed to a cache function, not to the chunk's own
                    with self.cond:
                        self.cached.add((s, i))
            else:
                h = self.host.handles[fn]
            h.request(Op.GET, chunk_key(obj.key, obj.version, s, i), cb, b=1 if self.inline else 0,
                      large=self.large[s], meta=meta)

    def _issue_all(self, picks: Picks) -> None:
        for s, idxs in picks:
            self._issue(s, idxs)

    def start(self) -> None:
        self.host.reads.placeless(self.obj)
        if not self.obj.stripes:
            self._end(Status.OK, b"")
            return
        with self.cond:
            picks = self.win.advance(self.clock(), self.out.dead)
            self._counted()
        self._issue_all(picks)

    def _written(self, s: int) -> None:
        """A chunk of stripe ``s`` was written to the client: move the window."""
        with self.cond:
            picks = self.win.written(s, self.clock(), self.out.dead)
            self._counted()
            kick = bool(self.win.fall_next)
        if kick:
            self.host.kick()
        self._issue_all(picks)

    def _written_cb(self, s: int, buf: bytearray | None) -> Callable[[], None] | None:
        """What runs once a chunk of stripe ``s`` (in ``buf``) was written:
        the buffer goes back to the pool and the window moves (None: nothing
        to do, every stripe was requested)."""
        more = self.win.more_to_ask()
        if buf is None:
            return (lambda: self._written(s)) if more else None
        pool = self.host.pool

        def done() -> None:
            pool.give(buf)
            if more:
                self._written(s)
        return done

    # -- replies (on function reader threads) -----------------------------------------
    def callback(self, s: int, i: int, asked: int | None = None
                 ) -> Callable[[Frame | None, socket.socket | None], None]:
        def cb(f: Frame | None, fsock: socket.socket | None) -> None:
            ok = f is not None and f.status == Status.OK and fsock is not None
            if not ok and asked is not None and self._moved(s, i, asked, f, fsock):
                return
            with self.cond:
                claim, more, kick = self.win.reply(s, i, ok, self.out.dead)
                if not ok:
                    kind = "corrupt_chunks" if f is not None and f.status == Status.CORRUPT else "missing_chunks"
                    self.host.count(kind)
                    if self.obj.stripes[s].places[i] is None:  # a recovery function's copy is gone
                        self.host.recovery.unroute(self.obj, s, i)
                self._counted()
                self.cond.notify_all()
            self._issue(s, more)
            if kick:
                self.host.kick()
            if f is None or fsock is None:
                return
            if not claim:
                if f.paylen:
                    drain(fsock, f.paylen)
                return
            # a client that keeps up takes the chunk at once from the scratch buffer; one that is
            # behind gets it queued, so receive it into a buffer of its own (no copy later)
            borrowed = not self.out.busy
            if borrowed:
                buf, view = None, scratch_view(f.paylen)
            else:
                buf, view = self.host.pool.take(f.paylen)
            try:
                recv_into(fsock, view)
            except BaseException:
                with self.cond:
                    more, kick = self.win.receive_failed(s)
                    self._counted()
                    self.cond.notify_all()
                self._issue(s, more)
                if kick:
                    self.host.kick()
                raise
            self.forward(s, i, view, claimed=True, copy=borrowed, buf=buf)
        return cb

    def _moved(self, s: int, i: int, asked: int, f: Frame | None, fsock: socket.socket | None) -> bool:
        """Chunk (``s``, ``i``) was not found on function ``asked`` because GC compaction moved it
        meanwhile (its copy landed elsewhere and the old one went, ``_gc_core``): ask its new
        place instead (True), so a GET racing a move reads from one place or the other."""
        place = self.obj.stripes[s].places[i]
        if place is None or place[0] == asked or place[0] >= len(self.host.handles):
            return False
        if f is not None and f.paylen and fsock is not None:
            drain(fsock, f.paylen)
        self.host.count("gets_after_move")
        self.host.handles[place[0]].request(Op.GET, chunk_key(self.obj.key, self.obj.version, s, i),
                                            self.callback(s, i, place[0]), b=1 if self.inline else 0,
                                            large=self.large[s])
        return True

    def forward(self, s: int, i: int, view: Any, *, claimed: bool = False, copy: bool = False,
                buf: bytearray | None = None, source: str = "") -> None:
        """Hand chunk ``i`` of stripe ``s`` to the client (``claimed``: a
        function's, received under a claim; else a fallback's, read from
        ``source``: ``buffer`` or ``cos``); the last chunk of the reply carries
        END, and the GET is counted once by where it was served from
        (``count_served``). ``buf`` (holding ``view``) goes back to the
        daemon's pool once written."""
        out = self.out
        with out.lock:
            with self.cond:
                drop, last = self.win.arrived(s, i, self.clock(), claimed=claimed)
                if not drop:
                    self.served.add(source or ("cache" if (s, i) in self.cached else "functions"))
                served = set(self.served) if last and not drop else None
                self.cond.notify_all()
            if drop:
                if buf is not None:
                    self.host.pool.give(buf)
                return
            if served is not None:
                count_served(self.host, served)
            pieces: list[Any]
            if self.head is not None and last and self.inline:
                # a single uncoded slice: one frame, REPLY{inline} + the bytes, no CHUNK/END
                self.head = None
                pieces = [pack_header(Op.REPLY, reqid=self.reqid, meta=self.obj.head_json(inline=True),
                                      paylen=len(view)), view]
            else:
                pieces = []
                if self.head is not None:
                    pieces.append(self.head)
                    self.head = None
                pieces.append(pack_header(Op.CHUNK, a=s, b=i, paylen=len(view)))
                pieces.append(view)
                if last:  # the last chunk's thread ends the reply: no hand-off back to the client thread
                    pieces.append(pack_header(Op.END, reqid=self.reqid))
            done = self._written_cb(s, buf)
            now = out.send_locked(pieces, done, copy=copy)
            after = out.finish_locked() if last else []
        if now and done is not None:
            done()
        for d in after:
            d()

    def _end(self, status: int, message: bytes) -> None:
        """End the reply early (an error, or an object of no stripes)."""
        with self.out.lock:
            with self.cond:
                ended = self.win.end()
                self.cond.notify_all()
            if not ended:
                return
            pieces: list[Any] = [self.head] if self.head is not None else []
            self.head = None
            pieces += [pack_header(Op.END, reqid=self.reqid, status=status, paylen=len(message)), message]
            self.out.send_locked(pieces, copy=False)
            after = self.out.finish_locked()
        for d in after:
            d()

    def fail(self, status: int, message: bytes) -> None:
        """A stripe could not be completed: END with ``status``."""
        self._end(status, message)

    # -- the watchdog and fallbacks ------------------------------------------------------
    @property
    def got(self) -> list[int]:
        """Chunks handed to the client, per stripe."""
        with self.cond:
            return [len(r.got) for r in self.win.recs]

    def check(self, now: float, straggler_s: float, timeout_s: float) -> tuple[bool, list[int]]:
        """Watchdog step: (done, stripes to finish from the buffer or COS);
        asks stragglers' replacements (``GetWindow.check``)."""
        with self.cond:
            if self.win.ended or self.out.dead:
                return True, []
            fall, extra = self.win.check(now, straggler_s, timeout_s)
            self._counted()
        for s, idxs in extra:
            if idxs:
                self.host.count("chunk_retries", len(idxs))
                self._issue(s, idxs)
        return False, fall

    def full(self, s: int) -> bool:
        """Stripe ``s`` has its ``d`` chunks (or the reply is over)."""
        with self.cond:
            return self.win.full(s)

    def take_over(self, s: int, timeout: float) -> set[int] | None:
        """For the fallback of stripe ``s`` (marked by :meth:`check`): wait
        for chunks being received now, then the chunk indices the client
        has; None if the reply is over."""
        r = self.win.recs[s]
        with self.cond:
            self.cond.wait_for(lambda: r.claimed == 0 or self.win.ended, timeout)
            if self.win.ended or self.out.dead:
                return None
            return set(r.got)
