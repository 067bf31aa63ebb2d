"""The daemon's per-request helpers: ``Waiter`` counts a PUT's outstanding
chunk writes, ``Collector`` runs the first-d GET of one object version
(a window of stripes at a time; request d chunks, replace failed ones from
parity at once, ask for the rest when a stripe stalls), ``NullSock`` keeps a
client stream in step when a chunk is dropped, ``scratch_view`` is a
per-thread receive buffer. The request paths that use them are in
``_server``; the client side of a GET reply is ``_outbox``.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ..protocol import Frame, Op, Status, drain, pack_header, recv_into
from ._objects import ObjectVersion, chunk_key
from ._outbox import Outbox

if TYPE_CHECKING:
    from ._server import Daemon

__all__ = ["Collector", "NullSock", "Waiter", "scratch_view"]


class NullSock:
    def sendall(self, data: Any) -> None:
        pass


class Waiter:
    """Counts outstanding chunk PUTs; collects the failed ones."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.outstanding = 0
        self.failed: list[tuple[int, int]] = []

    def add(self) -> None:
        with self.cond:
            self.outstanding += 1

    def fail(self, s: int, i: int) -> None:
        with self.cond:
            self.failed.append((s, i))
            self.outstanding -= 1
            self.cond.notify_all()

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
            with self.cond:
                if not ok:
                    self.failed.append((s, i))
                self.outstanding -= 1
                self.cond.notify_all()
        return cb

    def wait(self, timeout: float) -> list[tuple[int, int]]:
        with self.cond:
            if not self.cond.wait_for(lambda: self.outstanding <= 0, timeout):
                return sorted(set(self.failed)) or [(-1, -1)]
            return sorted(set(self.failed))


_tls = threading.local()


def scratch_view(n: int) -> memoryview:
    buf = getattr(_tls, "buf", None)
    if buf is None or len(buf) < n:
        buf = _tls.buf = bytearray(max(n, 1 << 16))
    return memoryview(buf)[:n]


_IDLE, _ASKED, _FALLBACK, _DONE = 0, 1, 2, 3  # a stripe: not requested, collecting, from buffer/COS, d chunks


class Collector:
    """First-d GET of one object version, ``window`` stripes at a time:
    stripe ``k + window`` is requested only once stripe ``k`` and every one
    before it was written to the client (0: all at once), so a slow function
    or a slow reader holds back at most a window, in the daemon and in the
    client. Per requested stripe ``d`` chunks are asked (plus ``extra``,
    None: all d+p); a chunk that fails, is missing or corrupt is replaced by
    the next untried one (parity) at once; a stripe without a chunk for
    ``straggler_s`` asks every untried chunk, so the first ``d`` good ones
    to arrive win, and the functions it was waiting for go last in the
    stripes requested after it. A stripe that runs out of chunks or time
    (``timeout_s`` from its request: function time, not the client's) is
    finished from the buffer or COS (``Daemon._fallback_stripe``).

    Chunks are received by the function connection's reader thread and
    handed to the client's :class:`Outbox` (written at once while the client
    keeps up, else queued; the reader never blocks on the client); the
    thread of the last chunk appends END. Late, failed or surplus chunks are
    drained."""

    def __init__(self, daemon: Daemon, out: Outbox, obj: ObjectVersion, reqid: int, head: bytes, *,
                 window: int = 0, extra: int | None = 0) -> None:
        self.daemon = daemon
        self.out = out
        self.obj = obj
        self.reqid = reqid
        self.head: bytes | None = head  # the REPLY frame, sent before the first chunk
        k = len(obj.stripes)
        self.window = window if window > 0 else max(1, k)
        self.extra = extra
        self.cond = threading.Condition()
        self.state = bytearray(k)
        self.order: list[list[int] | None] = [None] * k  # chunk indices in the order to try them
        self.next = [0] * k  # position in order of the next chunk to try
        self.inflight = [0] * k  # requested, not yet resolved
        self.claimed = [0] * k  # being received right now
        self.got = [0] * k  # handed to the client
        self.got_idx: list[set[int]] = [set() for _ in range(k)]
        self.written = [0] * k  # written to the client's socket
        self.asked_at = [0.0] * k
        self.moved = [0.0] * k  # last request or chunk of the stripe
        self.waiting: dict[tuple[int, int], int] = {}  # (stripe, chunk) -> function, requested and unanswered
        self.slow: set[int] = set()  # functions a stripe of this GET straggled on
        self.hung: set[int] = set()  # functions a stripe of this GET timed out on
        self.fall_next: list[int] = []  # stripes for the watchdog to finish from the buffer or COS
        self.lo = 0  # first stripe not wholly written
        self.hi = 0  # stripes requested so far
        self.left = k  # stripes short of d chunks
        self.ended = False
        self.large = [st.cl >= daemon.config.large_threshold for st in obj.stripes]
        self.inline = k == 1 and obj.stripes[0].n == 1

    # -- requests (pick under the lock, issue outside it) -------------------------
    def _order(self, s: int) -> list[int]:
        places = self.obj.stripes[s].places

        handles = self.daemon.handles

        def late(i: int) -> tuple[bool, bool]:
            # a function that is not connected (killed, or starting) answers only after a cold
            # start: its chunk comes after those whose function is up, when there are enough
            pl = places[i]
            return pl is not None and pl[0] in self.slow, pl is not None and handles[pl[0]].state != "active"

        idx = list(range(len(places)))
        keys = [late(i) for i in idx]
        if any(k != (False, False) for k in keys) and sum(1 for k in keys if k == (False, False)) >= \
                self.obj.stripes[s].d:
            idx.sort(key=lambda i: keys[i])
        elif self.slow:
            idx.sort(key=lambda i: keys[i][0])
        return idx

    def _pick(self, s: int, k: int) -> list[int]:
        order = self.order[s]
        if order is None:
            order = self.order[s] = self._order(s)
        out: list[int] = []
        while k > 0 and self.next[s] < len(order):
            i = order[self.next[s]]
            self.next[s] += 1
            fn = self._holder(s, i)
            if fn is None:
                self.daemon.counters["missing_chunks"] += 1
                continue
            self.waiting[(s, i)] = fn
            out.append(i)
            k -= 1
        self.inflight[s] += len(out)
        return out

    def _holder(self, s: int, i: int) -> int | None:
        """The function to ask for chunk ``i``: where it is placed, or while it is being
        recovered, a recovery function holding a copy (SION Sec. 5.5.2)."""
        place = self.obj.stripes[s].places[i]
        if place is not None:
            return place[0]
        fn = self.daemon.recovery.route(self.obj, s, i)
        if fn is not None:
            self.daemon.counters["rerouted_gets"] = self.daemon.counters.get("rerouted_gets", 0) + 1
        return fn

    def _issue(self, s: int, idxs: list[int]) -> None:
        obj = self.obj
        for i in idxs:
            fn = self._holder(s, i)
            cb = self.callback(s, i)
            if fn is None:  # its function was lost meanwhile
                cb(None, None)
                continue
            self.daemon.handles[fn].request(Op.GET, chunk_key(obj.key, obj.version, s, i), cb,
                                                  b=1 if self.inline else 0, large=self.large[s])

    def _advance_locked(self) -> list[tuple[int, list[int]]]:
        """Request the stripes the window now allows: (stripe, chunks) to issue."""
        stripes = self.obj.stripes
        k = len(stripes)
        while self.lo < k and self.written[self.lo] >= stripes[self.lo].d:
            self.lo += 1
        picks: list[tuple[int, list[int]]] = []
        if self.out.dead:
            return picks
        now = time.monotonic()
        while self.hi < min(k, self.lo + self.window):
            s = self.hi
            self.hi += 1
            st = stripes[s]
            self.asked_at[s] = self.moved[s] = now
            if self.hung and sum(1 for pl in st.places if pl is not None and pl[0] not in self.hung) < st.d:
                # it cannot complete without a function another stripe timed out on: no second wait
                self.state[s] = _FALLBACK
                self.fall_next.append(s)
                continue
            self.state[s] = _ASKED
            picks.append((s, self._pick(s, st.n if self.extra is None else min(st.n, st.d + self.extra))))
        return picks

    def start(self) -> None:
        if not self.obj.stripes:
            self._end(Status.OK, b"")
            return
        with self.cond:
            picks = self._advance_locked()
        for s, idxs in picks:
            self._issue(s, idxs)

    def _need(self, s: int) -> int:
        return self.obj.stripes[s].d - self.got[s] - self.claimed[s] - self.inflight[s]

    def _written(self, s: int) -> None:
        """A chunk of stripe ``s`` was written to the client: move the window."""
        with self.cond:
            self.written[s] += 1
            picks = self._advance_locked() if s == self.lo else []
        if self.fall_next:
            self.daemon._kick()
        for st, idxs in picks:
            self._issue(st, idxs)

    def _written_cb(self, s: int, buf: bytearray | None) -> Callable[[], None] | None:
        """What runs once a chunk of stripe ``s`` (in ``buf``) was written:
        the buffer goes back to the pool and the window moves (None: nothing
        to do, every stripe was requested)."""
        more = self.hi < len(self.obj.stripes)
        if buf is None:
            return (lambda: self._written(s)) if more else None
        pool = self.daemon.pool

        def done() -> None:
            pool.give(buf)
            if more:
                self._written(s)
        return done

    # -- replies (on function reader threads) -----------------------------------------
    def callback(self, s: int, i: int) -> Callable[[Frame | None, socket.socket | None], None]:
        def cb(f: Frame | None, fsock: socket.socket | None) -> None:
            ok = f is not None and f.status == Status.OK and fsock is not None
            more: list[int] = []
            kick = False
            with self.cond:
                self.waiting.pop((s, i), None)
                claim = ok and self.state[s] == _ASKED and self.got[s] + self.claimed[s] < self.obj.stripes[s].d \
                    and not self.out.dead
                if claim:
                    self.claimed[s] += 1
                else:
                    self.inflight[s] -= 1
                    if not ok:
                        kind = "corrupt_chunks" if f is not None and f.status == Status.CORRUPT else "missing_chunks"
                        self.daemon.counters[kind] += 1
                        if self.obj.stripes[s].places[i] is None:  # a recovery function's copy is gone
                            self.daemon.recovery.unroute(self.obj, s, i)
                        if self.state[s] == _ASKED and self._need(s) > 0:
                            more = self._pick(s, self._need(s))
                        if not more and self._short(s):
                            kick = True
                    self.cond.notify_all()
            if more:
                self._issue(s, more)
            if kick:
                self.daemon._kick()
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
                buf, view = self.daemon.pool.take(f.paylen)
            try:
                recv_into(fsock, view)
            except BaseException:
                with self.cond:
                    self.claimed[s] -= 1
                    self.inflight[s] -= 1
                    self.daemon.counters["missing_chunks"] += 1
                    more = self._pick(s, self._need(s)) if self.state[s] == _ASKED and self._need(s) > 0 else []
                    kick = not more and self._short(s)
                    self.cond.notify_all()
                if more:
                    self._issue(s, more)
                if kick:
                    self.daemon._kick()
                raise
            self.forward(s, i, view, claimed=True, copy=borrowed, buf=buf)
        return cb

    def forward(self, s: int, i: int, view: Any, *, claimed: bool = False, copy: bool = False,
                buf: bytearray | None = None) -> None:
        """Hand chunk ``i`` of stripe ``s`` to the client (``claimed``: a
        function's, received under a claim; else a fallback's); the last
        chunk of the reply carries END. ``buf`` (holding ``view``) goes back
        to the daemon's pool once written."""
        out = self.out
        stripes = self.obj.stripes
        with out.lock:
            with self.cond:
                if claimed:
                    self.claimed[s] -= 1
                    self.inflight[s] -= 1
                # dropped: a claim that outlasted its fallback's wait (the stripe is complete without it)
                drop = self.ended or self.got[s] >= stripes[s].d or i in self.got_idx[s]
                if not drop:
                    self.got[s] += 1
                    self.got_idx[s].add(i)
                    self.moved[s] = time.monotonic()
                    if self.got[s] == stripes[s].d:
                        self.state[s] = _DONE
                        self.left -= 1
                last = not drop and self.left == 0
                if last:
                    self.ended = True
                self.cond.notify_all()
            if drop:
                if buf is not None:
                    self.daemon.pool.give(buf)
                return
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
        if now and done is not None:
            done()


    def _end(self, status: int, message: bytes) -> None:
        """End the reply early (an error, or an object of no stripes)."""
        with self.out.lock:
            with self.cond:
                if self.ended:
                    return
                self.ended = True
                self.cond.notify_all()
            pieces: list[Any] = [self.head] if self.head is not None else []
            self.head = None
            pieces += [pack_header(Op.END, reqid=self.reqid, status=status, paylen=len(message)), message]
            self.out.send_locked(pieces, copy=False)

    def fail(self, status: int, message: bytes) -> None:
        """A stripe could not be completed: END with ``status``."""
        self._end(status, message)

    # -- the watchdog and fallbacks ------------------------------------------------------
    def _short(self, s: int) -> bool:
        """Requested, short of d chunks and nothing more can come from the functions."""
        return (self.state[s] == _ASKED and self.claimed[s] == 0 and self.inflight[s] == 0
                and self.next[s] >= self.obj.stripes[s].n)

    def check(self, now: float, straggler_s: float, timeout_s: float) -> tuple[bool, list[int]]:
        """Watchdog step: (done, stripes to finish from the buffer or COS);
        asks stragglers' replacements when a stripe got nothing for
        ``straggler_s``. Only stripes waiting on functions are looked at:
        a GET waiting on its client is left alone."""
        extra: list[tuple[int, list[int]]] = []
        with self.cond:
            if self.ended or self.out.dead:
                return True, []
            fall, self.fall_next = self.fall_next, []
            for s in range(self.lo, self.hi):
                if self.state[s] != _ASKED:
                    continue
                if self._short(s) or now >= self.asked_at[s] + timeout_s:
                    if not self._short(s):
                        self.hung.update(fn for (ws, _), fn in self.waiting.items() if ws == s)
                    self.state[s] = _FALLBACK
                    fall.append(s)
                elif now - self.moved[s] >= straggler_s:
                    self.moved[s] = now
                    self.slow.update(fn for (ws, _), fn in self.waiting.items() if ws == s)
                    extra.append((s, self._pick(s, self.obj.stripes[s].n)))
        for s, idxs in extra:
            if idxs:
                self.daemon.counters["chunk_retries"] += len(idxs)
                self._issue(s, idxs)
        return False, fall

    def full(self, s: int) -> bool:
        """Stripe ``s`` has its ``d`` chunks (or the reply is over)."""
        with self.cond:
            return self.ended or self.got[s] >= self.obj.stripes[s].d

    def take_over(self, s: int, timeout: float) -> set[int] | None:
        """For the fallback of stripe ``s`` (marked by :meth:`check`): wait
        for chunks being received now, then the chunk indices the client
        has; None if the reply is over."""
        with self.cond:
            self.cond.wait_for(lambda: self.claimed[s] == 0 or self.ended, timeout)
            if self.ended or self.out.dead:
                return None
            return set(self.got_idx[s])
