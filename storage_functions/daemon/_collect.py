"""The daemon's per-request helpers: ``Waiter`` counts a PUT's outstanding
chunk writes, ``Collector`` runs the first-d GET of one object version
(request d chunks, replace failed ones from parity at once, ask for the rest
when a stripe stalls), ``NullSock`` keeps a client stream in step when a
chunk is dropped, ``scratch_view`` is a per-thread receive buffer. The
request paths that use them are in ``_server``.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ..protocol import Frame, Op, Status, drain, pack_header, recv_into, sendmsg_all
from ._objects import ObjectVersion, chunk_key

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

    def callback(self, s: int, i: int) -> Callable[[Frame | None, socket.socket | None], None]:
        def cb(f: Frame | None, fsock: socket.socket | None) -> None:
            if f is not None and f.paylen and fsock is not None:
                drain(fsock, f.paylen)
            ok = f is not None and f.status == Status.OK
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


class Collector:
    """First-d GET of one object version. Requests ``d`` chunks per stripe
    (plus ``get_extra``); a chunk that fails, is missing or corrupt is
    replaced by the next untried one (parity) at once, and when no chunk
    arrived for ``straggler_s`` every untried chunk of the unfinished stripes
    is requested too, so the first ``d`` good ones to arrive win. Chunks are
    forwarded to the client by the function connection's reader thread as
    they arrive (no hand-off); the thread of the last one sends END. Late,
    failed or surplus chunks are drained."""

    def __init__(self, daemon: Daemon, sock: socket.socket, wlock: threading.Lock, obj: ObjectVersion, reqid: int,
                 head: bytes) -> None:
        self.daemon = daemon
        self.sock = sock
        self.wlock = wlock
        self.obj = obj
        self.reqid = reqid
        self.head: bytes | None = head  # the REPLY frame, sent before the first chunk
        k = len(obj.stripes)
        self.cond = threading.Condition()
        self.next = [0] * k  # next chunk index to try
        self.inflight = [0] * k  # requested, not yet resolved
        self.claimed = [0] * k  # being forwarded right now
        self.sent = [0] * k
        self.closed = False
        self.sent_idx: list[set[int]] = [set() for _ in range(k)]
        self.progress = 0
        self.seen = 0
        self.last_progress = time.monotonic()
        self.deadline = math.inf
        self.client_dead = False
        self.ended = False
        self.large = [st.cl >= daemon.config.large_threshold for st in obj.stripes]
        self.inline = len(obj.stripes) == 1 and obj.stripes[0].n == 1

    # -- requests (pick under the lock, issue outside it) -------------------------
    def _pick(self, s: int, k: int) -> list[int]:
        st = self.obj.stripes[s]
        out: list[int] = []
        while k > 0 and self.next[s] < st.n:
            i = self.next[s]
            self.next[s] += 1
            if st.places[i] is None:
                self.daemon.counters["missing_chunks"] += 1
                continue
            out.append(i)
            k -= 1
        self.inflight[s] += len(out)
        return out

    def _issue(self, s: int, idxs: list[int]) -> None:
        obj = self.obj
        st = obj.stripes[s]
        for i in idxs:
            place = st.places[i]
            cb = self.callback(s, i)
            if place is None:  # its function was lost meanwhile
                cb(None, None)
                continue
            self.daemon.handles[place[0]].request(Op.GET, chunk_key(obj.key, obj.version, s, i), cb,
                                                  b=1 if self.inline else 0, large=self.large[s])

    def start(self, extra: int | None) -> None:
        picks = []
        with self.cond:
            for s, st in enumerate(self.obj.stripes):
                picks.append(self._pick(s, st.n if extra is None else min(st.n, st.d + extra)))
        for s, idxs in enumerate(picks):
            self._issue(s, idxs)

    def _need(self, s: int) -> int:
        return self.obj.stripes[s].d - self.sent[s] - self.claimed[s] - self.inflight[s]

    def flush_head_locked(self) -> None:
        """Send the REPLY head if no chunk carried it yet (caller holds wlock)."""
        if self.head is not None:
            head, self.head = self.head, None
            try:
                self.sock.sendall(head)
            except OSError:
                self.client_dead = True

    # -- replies (on function reader threads) -----------------------------------------
    def callback(self, s: int, i: int) -> Callable[[Frame | None, socket.socket | None], None]:
        def cb(f: Frame | None, fsock: socket.socket | None) -> None:
            ok = f is not None and f.status == Status.OK and fsock is not None
            more: list[int] = []
            kick = False
            with self.cond:
                claim = ok and not self.closed and self.sent[s] + self.claimed[s] < self.obj.stripes[s].d \
                    and not self.client_dead
                if claim:
                    self.claimed[s] += 1
                else:
                    self.inflight[s] -= 1
                    if not ok:
                        kind = "corrupt_chunks" if f is not None and f.status == Status.CORRUPT else "missing_chunks"
                        self.daemon.counters[kind] += 1
                        if not self.closed and self._need(s) > 0:
                            more = self._pick(s, self._need(s))
                        if not more and self._settled(s):
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
            view = scratch_view(f.paylen)
            try:
                recv_into(fsock, view)
            except BaseException:
                with self.cond:
                    self.claimed[s] -= 1
                    self.inflight[s] -= 1
                    self.daemon.counters["missing_chunks"] += 1
                    more = self._pick(s, self._need(s)) if not self.closed and self._need(s) > 0 else []
                    kick = not more and self._settled(s)
                    self.cond.notify_all()
                if more:
                    self._issue(s, more)
                if kick:
                    self.daemon._kick()
                raise
            stripes = self.obj.stripes
            with self.wlock:
                with self.cond:
                    self.claimed[s] -= 1
                    self.inflight[s] -= 1
                    self.sent[s] += 1
                    self.sent_idx[s].add(i)
                    self.progress += 1
                    last = not self.ended and all(self.sent[k] >= st.d for k, st in enumerate(stripes))
                    if last:
                        self.ended = True
                        self.closed = True
                    self.cond.notify_all()
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
                if not self.client_dead:
                    try:
                        sendmsg_all(self.sock, pieces)
                    except OSError:
                        with self.cond:
                            self.client_dead = True
                            self.cond.notify_all()
        return cb

    def _settled(self, s: int) -> bool:
        st = self.obj.stripes[s]
        if self.sent[s] >= st.d:
            return True
        return self.claimed[s] == 0 and self.inflight[s] == 0 and self.next[s] >= st.n

    def check(self, now: float, straggler_s: float) -> str:
        """Watchdog step: "done", "finish" (short or out of time), or "wait"
        (after asking stragglers' replacements when nothing arrived)."""
        k = len(self.obj.stripes)
        extra: list[tuple[int, list[int]]] = []
        with self.cond:
            if self.ended or self.client_dead:
                return "done"
            if now >= self.deadline or all(self._settled(s) for s in range(k)):
                return "finish"
            if self.progress != self.seen:
                self.seen, self.last_progress = self.progress, now
            elif now - self.last_progress >= straggler_s:
                self.last_progress = now
                for s in range(k):
                    if not self._settled(s):
                        extra.append((s, self._pick(s, self.obj.stripes[s].n)))
        for s, idxs in extra:
            if idxs:
                self.daemon.counters["chunk_retries"] += len(idxs)
                self._issue(s, idxs)
        return "wait"

    def close(self, timeout: float) -> list[int]:
        """Stop forwarding; returns the stripes short of d chunks."""
        k = len(self.obj.stripes)
        with self.cond:
            self.closed = True
            # claims already in progress finish (their bytes are on the way)
            self.cond.wait_for(lambda: all(self.claimed[s] == 0 for s in range(k)), timeout)
            return [s for s in range(k) if self.sent[s] < self.obj.stripes[s].d]
