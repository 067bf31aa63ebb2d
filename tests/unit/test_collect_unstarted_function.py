"""A GET whose chunks are placed on functions the daemon has not started (a
restarted daemon's restored places, before its functions are up): the
collector counts them as missing and the stripe falls back, the watchdog's
straggler step included (it used to index past the function list and kill
the watchdog thread, hanging every later GET)."""

from __future__ import annotations

import socket
from typing import Any

from storage_functions.daemon._collect import Collector
from storage_functions.daemon._config import DaemonConfig
from storage_functions.daemon._gc_io import ReadNotes
from storage_functions.daemon._lanes import Lanes
from storage_functions.daemon._objects import ObjectVersion, Stripe
from storage_functions.daemon._outbox import BufferPool, Outbox


class _NoRecovery:
    def route(self, obj: ObjectVersion, s: int, i: int) -> int | None:
        return None

    def busy(self, fn: int) -> bool:
        return False

    def unroute(self, obj: ObjectVersion, s: int, i: int) -> None:
        pass


class _Host:
    """A daemon with no function started yet."""

    def __init__(self) -> None:
        self.config = DaemonConfig()
        self.pool = BufferPool()
        self.handles: list[Any] = []
        self.recovery = _NoRecovery()
        self.reads = ReadNotes(False)
        self.cache_functions = None
        self.counters: dict[str, int] = {}
        self.kicks = 0

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def kick(self) -> None:
        self.kicks += 1


def test_chunks_on_unstarted_functions_are_missing_and_the_stripe_falls_back() -> None:
    ours, client = socket.socketpair()
    out = Outbox(ours)
    host = _Host()
    st = Stripe(d=2, p=1, fs=8, ol=16, cl=8, crcs=[0, 0, 0], places=[(3, 0, 0), (4, 0, 0), (5, 0, 0)])
    obj = ObjectVersion(key="k", version=1, size=16, stripes=[st], state="ready")
    col = Collector(host, Lanes(out).open(16), obj, 7, b"head", window=0, extra=0, clock=lambda: 100.0)
    col.start()  # asks the chunks: none of their functions exists
    assert host.counters == {"missing_chunks": 3}
    assert col.check(100.2, 0.5, 10.0) == (False, [0])  # the watchdog finishes it from the buffer or COS
    assert col.win.recs[0].state == "fallback"
    out.close()
    ours.close()
    client.close()


class _Function:
    """A started function that records the requests it is sent."""

    def __init__(self) -> None:
        self.state = "active"
        self.silent = False
        self.asked: list[tuple[int, str, Any]] = []

    def request(self, op: int, key: str, cb: Any, **kw: Any) -> None:
        self.asked.append((op, key, cb))


def test_a_chunk_moved_while_its_get_was_in_flight_is_asked_of_its_new_place() -> None:
    """GC compaction swapped the chunk's place and deleted the old copy before the old function
    answered: the GET asks the new place instead of counting a miss and falling back to COS."""
    from storage_functions.protocol import Frame, Op, Status

    ours, client = socket.socketpair()
    out = Outbox(ours)
    host = _Host()
    host.handles = [_Function(), _Function()]
    st = Stripe(d=1, p=0, fs=8, ol=8, cl=8, crcs=[0], places=[(0, 0, 0)])
    obj = ObjectVersion(key="k", version=1, size=8, stripes=[st], state="ready")
    col = Collector(host, Lanes(out).open(8), obj, 7, b"head", window=0, extra=0, clock=lambda: 100.0)
    col.start()
    ((op, key, cb),) = host.handles[0].asked
    st.places[0] = (1, 0, 0)                     # the move landed; the old copy went
    cb(Frame(Op.GET, Status.NOT_FOUND, 7, key, {}, 0, 0, 0, 0), None)
    assert [(o, k) for o, k, _ in host.handles[1].asked] == [(op, key)]
    assert host.counters == {"gets_after_move": 1} and col.win.recs[0].state != "fallback"
    ((_, _, cb2),) = host.handles[1].asked
    cb2(Frame(Op.GET, Status.NOT_FOUND, 7, key, {}, 0, 0, 0, 0), None)  # missing where it is: a real miss
    assert host.counters.get("missing_chunks") == 1 and len(host.handles[1].asked) == 1
    out.close()
    ours.close()
    client.close()
