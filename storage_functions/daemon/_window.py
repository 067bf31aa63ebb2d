"""The first-d window of one GET, as pure state: one record per stripe and the
transitions a GET goes through. No sockets, no threads, no clock: the I/O shell
(``_collect.Collector``) calls these under its lock, with the time, and issues
the chunk requests, writes and fallbacks they return.

A stripe is ``idle`` (not requested), ``asked`` (collecting chunks from
functions), ``fallback`` (to be finished from the buffer or COS) or ``done``
(``d`` chunks handed to the client). Stripe ``k + window`` is requested only
once stripe ``k`` and every one before it was written to the client. Per
requested stripe ``d`` chunks are asked (plus ``extra``; None: all d+p); a
chunk that fails is replaced by the next untried one at once; a stripe without
a chunk for ``straggler_s`` asks every untried chunk and the functions it was
waiting for go last in later stripes; a stripe that runs out of chunks or of
``timeout_s`` since its request falls back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

from ._objects import Stripe

__all__ = ["GetWindow", "StripeRec", "StripeStateName", "Picks"]

StripeStateName = Literal["idle", "asked", "fallback", "done"]
Picks = list[tuple[int, list[int]]]  # (stripe, chunk indices to request)


@dataclass(slots=True)
class StripeRec:
    """One stripe of the GET."""

    d: int
    n: int
    state: StripeStateName = "idle"
    order: list[int] | None = None  # chunk indices in the order to try them
    next: int = 0  # position in ``order`` of the next chunk to try
    inflight: int = 0  # requested, not yet resolved
    claimed: int = 0  # being received right now
    got: set[int] = field(default_factory=set)  # chunk indices handed to the client
    written: int = 0  # chunks written to the client's socket
    asked_at: float = 0.0
    moved: float = 0.0  # last request or chunk

    def need(self) -> int:
        return self.d - len(self.got) - self.claimed - self.inflight

    def short(self) -> bool:
        """Requested, short of d chunks and nothing more can come from the functions."""
        return self.state == "asked" and self.claimed == 0 and self.inflight == 0 and self.next >= self.n


class GetWindow:
    """The stripes of one object version being read (``stripes``: their places are
    read live, a lost function's chunks have none). ``route(s, i)``: the function
    holding a recovery copy of a chunk that has no place (SION Sec. 5.5.2), or None;
    ``ready(fn)``: function ``fn`` is connected and not busy downloading (recovering).
    A chunk on a function that is not ready (killed, starting, recovering) or only on a
    recovery function is asked after the chunks on ready functions when ``d`` of those
    suffice: a read never waits a cold start behind a killed instance, nor queues
    behind a recovery's downloads."""

    def __init__(self, stripes: Sequence[Stripe], *, window: int = 0, extra: int | None = 0,
                 route: Callable[[int, int], int | None] | None = None,
                 ready: Callable[[int], bool] | None = None) -> None:
        self.stripes = stripes
        self.route = route
        self.ready = ready
        k = len(stripes)
        self.recs = [StripeRec(st.d, st.n) for st in stripes]
        self.window = window if window > 0 else max(1, k)
        self.extra = extra
        self.waiting: dict[tuple[int, int], int] = {}  # (stripe, chunk) -> function, requested and unanswered
        self.slow: set[int] = set()  # functions a stripe of this GET straggled on
        self.hung: set[int] = set()  # functions a stripe of this GET timed out on
        self.fall_next: list[int] = []  # stripes for the watchdog to finish from the buffer or COS
        self.lo = 0  # first stripe not wholly written
        self.hi = 0  # stripes requested so far
        self.left = k  # stripes short of d chunks
        self.ended = False
        self.missing = 0  # chunks found without a place since the shell last took the count
        self.rerouted = 0  # chunks asked of a recovery copy since the shell last took the count

    # -- requests ------------------------------------------------------------------------
    def _order(self, s: int) -> list[int]:
        places = self.stripes[s].places
        ready = self.ready

        def late(i: int) -> tuple[bool, bool]:
            pl = places[i]
            if pl is None:  # a recovery function's copy, if any
                return False, self.route is not None
            return pl[0] in self.slow, ready is not None and not ready(pl[0])

        idx = list(range(len(places)))
        keys = [late(i) for i in idx]
        if any(k != (False, False) for k in keys) and sum(1 for k in keys if k == (False, False)) >= \
                self.recs[s].d:
            idx.sort(key=lambda i: keys[i])
        elif self.slow:
            idx.sort(key=lambda i: keys[i][0])
        return idx

    def holder(self, s: int, i: int) -> tuple[int | None, bool]:
        """(the function to ask for chunk ``i`` of stripe ``s``, it is a recovery copy):
        where the chunk is placed, else a recovery function holding a copy."""
        place = self.stripes[s].places[i]
        if place is not None:
            return place[0], False
        fn = self.route(s, i) if self.route is not None else None
        return fn, fn is not None

    def pick(self, s: int, k: int) -> list[int]:
        """The next ``k`` chunks of stripe ``s`` to request (skipping those without a place)."""
        r = self.recs[s]
        if r.order is None:
            r.order = self._order(s)
        out: list[int] = []
        while k > 0 and r.next < len(r.order):
            i = r.order[r.next]
            r.next += 1
            fn, routed = self.holder(s, i)
            if fn is None:
                self.missing += 1
                continue
            self.rerouted += routed
            self.waiting[(s, i)] = fn
            out.append(i)
            k -= 1
        r.inflight += len(out)
        return out

    def advance(self, now: float, dead: bool) -> Picks:
        """Request the stripes the window now allows (none once the client is ``dead``)."""
        k = len(self.recs)
        while self.lo < k and self.recs[self.lo].written >= self.recs[self.lo].d:
            self.lo += 1
        picks: Picks = []
        if dead:
            return picks
        while self.hi < min(k, self.lo + self.window):
            s = self.hi
            self.hi += 1
            r = self.recs[s]
            r.asked_at = r.moved = now
            places = self.stripes[s].places
            if self.hung and sum(1 for pl in places if pl is not None and pl[0] not in self.hung) < r.d:
                # it cannot complete without a function another stripe timed out on: no second wait
                r.state = "fallback"
                self.fall_next.append(s)
                continue
            r.state = "asked"
            picks.append((s, self.pick(s, r.n if self.extra is None else min(r.n, r.d + self.extra))))
        return picks

    def written(self, s: int, now: float, dead: bool) -> Picks:
        """A chunk of stripe ``s`` was written to the client: move the window."""
        self.recs[s].written += 1
        return self.advance(now, dead) if s == self.lo else []

    def more_to_ask(self) -> bool:
        return self.hi < len(self.recs)

    # -- replies -------------------------------------------------------------------------
    def reply(self, s: int, i: int, ok: bool, dead: bool) -> tuple[bool, list[int], bool]:
        """A function answered for chunk ``i`` of stripe ``s``: (claim it and receive it,
        chunks to request instead, stripe short: kick the watchdog)."""
        r = self.recs[s]
        self.waiting.pop((s, i), None)
        if ok and r.state == "asked" and len(r.got) + r.claimed < r.d and not dead:
            r.claimed += 1
            return True, [], False
        r.inflight -= 1
        if ok:
            return False, [], False
        more = self.pick(s, r.need()) if r.state == "asked" and r.need() > 0 else []
        return False, more, not more and r.short()

    def receive_failed(self, s: int) -> tuple[list[int], bool]:
        """A claimed chunk's bytes did not arrive: (chunks to request instead, kick)."""
        r = self.recs[s]
        r.claimed -= 1
        r.inflight -= 1
        self.missing += 1
        more = self.pick(s, r.need()) if r.state == "asked" and r.need() > 0 else []
        return more, not more and r.short()

    def arrived(self, s: int, i: int, now: float, *, claimed: bool) -> tuple[bool, bool]:
        """Chunk ``i`` of stripe ``s`` is to go to the client (``claimed``: a function's,
        received under a claim; else a fallback's): (drop it, it is the reply's last)."""
        r = self.recs[s]
        if claimed:
            r.claimed -= 1
            r.inflight -= 1
        # dropped: a claim that outlasted its fallback's wait (the stripe is complete without it)
        drop = self.ended or len(r.got) >= r.d or i in r.got
        if not drop:
            r.got.add(i)
            r.moved = now
            if len(r.got) == r.d:
                r.state = "done"
                self.left -= 1
        last = not drop and self.left == 0
        if last:
            self.ended = True
        return drop, last

    def end(self) -> bool:
        """End the reply early; False if it was over already."""
        if self.ended:
            return False
        self.ended = True
        return True

    # -- the watchdog and fallbacks ---------------------------------------------------------
    def check(self, now: float, straggler_s: float, timeout_s: float) -> tuple[list[int], Picks]:
        """Watchdog step: (stripes to finish from the buffer or COS, chunks to request
        for stripes that got nothing for ``straggler_s``). Only stripes waiting on
        functions are looked at: a GET waiting on its client is left alone."""
        fall, self.fall_next = self.fall_next, []
        extra: Picks = []
        for s in range(self.lo, self.hi):
            r = self.recs[s]
            if r.state != "asked":
                continue
            if r.short() or now >= r.asked_at + timeout_s:
                if not r.short():
                    self.hung.update(fn for (ws, _), fn in self.waiting.items() if ws == s)
                r.state = "fallback"
                fall.append(s)
            elif now - r.moved >= straggler_s:
                r.moved = now
                self.slow.update(fn for (ws, _), fn in self.waiting.items() if ws == s)
                extra.append((s, self.pick(s, r.n)))
        return fall, extra

    def full(self, s: int) -> bool:
        """Stripe ``s`` has its ``d`` chunks (or the reply is over)."""
        return self.ended or len(self.recs[s].got) >= self.recs[s].d
