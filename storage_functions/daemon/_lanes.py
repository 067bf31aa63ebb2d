"""Replies to one client connection in the order of its requests, while
several GETs of that connection are served at once (a client pipelines
``get_many``: it sends a window of GETs, then reads their replies in turn).

Each request gets a :class:`Lane` when the session reads it. The lane at the
head writes through the connection's :class:`~._outbox.Outbox`; a lane
behind it keeps what it is handed (a copy, or the pool buffer it came in)
until every lane before it has finished its reply, then hands it over in
order. A GET behind the head therefore stalls after its first window of
stripes (the collector moves its window only as its chunks are written), so
what a connection's waiting lanes hold is bounded by :class:`Lanes`' byte
budget for the objects behind the head: a request that would pass it waits
until the lanes before it have finished. Not here: what the frames mean
(``_collect``), the socket writes (``_outbox``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ._outbox import Outbox

__all__ = ["Lane", "Lanes"]

Done = Callable[[], None]


def _run(dones: list[Done]) -> None:
    for d in dones:
        d()


class Lane:
    """One request's reply on a shared connection: the :class:`Outbox`
    interface a ``Collector`` writes through (``lock``, ``send_locked``,
    ``busy``, ``dead``), plus :meth:`finish_locked` when the reply is over."""

    __slots__ = ("lanes", "out", "lock", "size", "head", "finished", "_held")

    def __init__(self, lanes: Lanes, size: int) -> None:
        self.lanes = lanes
        self.out = lanes.out
        self.lock = lanes.out.lock
        self.size = size
        self.head = False
        self.finished = False
        self._held: list[tuple[list[Any], Done | None]] = []

    @property
    def dead(self) -> bool:
        return self.out.dead

    @property
    def busy(self) -> bool:
        """What is handed over now may not be written now (a lane behind the head
        keeps it): take a buffer of its own rather than a borrowed one."""
        return not self.head or self.out.busy

    def send_locked(self, pieces: list[Any], done: Done | None = None, *, copy: bool = True) -> bool:
        """As :meth:`Outbox.send_locked` (the caller holds :attr:`lock`); a lane
        behind the head keeps the frame (copied when borrowed) and returns False:
        ``done`` runs once it was written."""
        if self.head:
            return self.out.send_locked(pieces, done, copy=copy)
        if self.out.dead:
            return False
        if copy:
            pieces = [b"".join(memoryview(p).cast("B") for p in pieces if len(p))]
        self._held.append((pieces, done))
        return False

    def finish_locked(self) -> list[Done]:
        """The reply is complete (its last frame was handed over): the next lanes
        take the head in turn. Returns the ``done`` callbacks of frames written
        now, for the caller to run after releasing :attr:`lock`."""
        if self.finished:
            return []
        self.finished = True
        return self.lanes._advance_locked()

    def finish(self) -> None:
        with self.lock:
            dones = self.finish_locked()
        _run(dones)

    def send_last(self, pieces: list[Any], *, copy: bool = True) -> None:
        """Hand over a whole reply of one frame (e.g. an error) and finish."""
        with self.lock:
            now = self.send_locked(pieces, copy=copy)
            dones = self.finish_locked()
        del now
        _run(dones)

    def wait_head(self, timeout: float) -> bool:
        """Block until this lane is at the head and the outbox idle (every earlier
        reply written): for a reply its caller writes to the socket itself."""
        return self.lanes._wait_head(self, timeout)


class Lanes:
    """The open lanes of one connection, oldest first (see the module
    docstring). ``max_lanes`` and ``max_bytes`` bound the requests served
    ahead of the one being written and the object bytes they may hold; the
    session thread blocks in :meth:`open` until a new one fits."""

    def __init__(self, out: Outbox, *, max_lanes: int = 64, max_bytes: int = 16 << 20) -> None:
        self.out = out
        self.max_lanes = max_lanes
        self.max_bytes = max_bytes
        self._open: deque[Lane] = deque()
        self._behind = 0  # object bytes of the open lanes behind the head
        self._cond = out.cond  # woken also when the connection dies

    def open(self, size: int = 0, timeout: float | None = None) -> Lane:
        """A lane for the next request (``size``: the bytes its reply may hold back
        while it waits). Waits while the lanes open ahead of it are at their bounds
        (the first request behind the head is always admitted, whatever its size)."""
        with self._cond:
            self._cond.wait_for(lambda: self.out.dead or not self._open or (
                len(self._open) < self.max_lanes
                and (len(self._open) == 1 or self._behind + size <= self.max_bytes)), timeout)
            lane = Lane(self, size)
            if not self._open:
                lane.head = True
            else:
                self._behind += size
            self._open.append(lane)
            return lane

    def idle(self) -> bool:
        with self._cond:
            return not self._open

    def wait_closed(self, timeout: float) -> bool:
        """Until every open lane has finished its reply (or the connection died)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._open or self.out.dead, timeout)

    def _advance_locked(self) -> list[Done]:
        dones: list[Done] = []
        while self._open and self._open[0].finished:
            self._open.popleft()
            if not self._open:
                break
            nxt = self._open[0]
            nxt.head = True
            self._behind -= nxt.size
            held, nxt._held = nxt._held, []
            for pieces, done in held:
                if self.out.send_locked(pieces, done, copy=False) and done is not None:
                    dones.append(done)
        self._cond.notify_all()
        return dones

    def _wait_head(self, lane: Lane, timeout: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: lane.head or self.out.dead, timeout):
                return False
        return self.out.wait_idle(timeout)
