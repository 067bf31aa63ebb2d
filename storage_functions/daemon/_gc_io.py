"""The daemon's side of the GC window (``_gc``, ``_gc_core``): building the window from
the config, and carrying out its instructions: ``Retire`` ends a released function's
invocation (it is warmed no more; its chunks were deleted by the ``Release`` before it),
``Migrate`` has the newest bucket's function load a compacted chunk from COS (a
RECOVER request, as local recovery does) and reports ``Migrated`` to the core.
Function handles note the chunks GETs ask of them (``ReadNotes``: a deque, no lock
on the GET path); the warm-up tick hands them to the core, which marks those on
degraded functions for compaction. What it uses of the daemon is ``GcHost``: the
counters, the store core (``_do``) and a function's connection (``GcFunction``)."""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..protocol import Frame, Op, Status, drain
from ._gc import GcConfig, GcWindow
from ._objects import ObjectVersion, chunk_key
from ._store_events import Event, Instruction, Migrate, Migrated, Retire

if TYPE_CHECKING:
    from ._config import DaemonConfig

__all__ = ["gc_window", "ReadNotes", "carry_out", "GcHost", "GcFunction"]


class GcFunction(Protocol):
    """A storage function's connection as the GC window uses it
    (``_functions.FunctionHandle``): end its invocation, send it a request."""

    def release(self) -> bool: ...

    def request(self, op: int, key: str, on_reply: Callable[[Frame | None, socket.socket | None], None], *, a: int = 0,
                b: int = 0, crc: int = 0, meta: dict[str, Any] | None = None, payload: Any = None,
                large: bool = False) -> None: ...


class GcHost(Protocol):
    """What carrying out a GC instruction uses of the daemon: the counters, function
    ``index``'s connection, and the store core (``_do``: the ``Migrated`` report)."""

    def count(self, name: str, n: int = 1) -> None: ...

    def _handle(self, index: int) -> GcFunction: ...

    def _do(self, ev: Event) -> list[Instruction]: ...


def gc_window(c: DaemonConfig, now: float) -> GcWindow | None:
    """The window the config asks for (``gc_interval_s`` 0: none, one warm-up rate)."""
    if c.gc_interval_s <= 0:
        return None
    return GcWindow(GcConfig(interval_s=c.gc_interval_s, active=c.gc_active, degraded=c.gc_degraded,
                             active_warm_s=c.warm_interval_s, degraded_warm_s=c.degraded_warm_interval_s,
                             compact_fraction=c.compact_fraction, compact_max=c.compact_max,
                             seal_held=c.placement == "metadata"), now=now)


class ReadNotes:
    """(function, chunk key) of the chunk GETs asked of a function in ``watch`` (the degraded
    ones, as of the last tick) since the last tick, each once: only those can be marked."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.watch: frozenset[int] = frozenset()  # replaced whole after each tick: read without a lock
        self._q: deque[tuple[int, str]] = deque()

    def note(self, fn: int, ckey: str) -> None:
        """A GET asked function ``fn`` for ``ckey`` (-1: found it without a place)."""
        if self.on and (fn in self.watch or fn < 0):
            self._q.append((fn, ckey))  # atomic: no lock on the GET path

    def placeless(self, obj: ObjectVersion) -> None:
        """A GET of ``obj`` begins: in each stripe short of ``d`` placed chunks (a released
        function's are placeless), as many placeless chunks as it lacks are noted for
        on-demand migration (daemon-placed versions COS holds only): what reads need, not
        the parity."""
        if not self.on or obj.alloc is not None or not obj.uploaded:
            return
        for s, st in enumerate(obj.stripes):
            short = st.d - sum(1 for pl in st.places if pl is not None)
            for i in [i for i, pl in enumerate(st.places) if pl is None][:max(0, short)]:
                self._q.append((-1, chunk_key(obj.key, obj.version, s, i)))

    def take(self) -> tuple[tuple[int, str], ...]:
        seen: dict[tuple[int, str], None] = {}
        while self._q:
            seen[self._q.popleft()] = None
        return tuple(seen)


def carry_out(d: GcHost, ins: Instruction) -> bool:
    """Carry out a GC instruction; False when ``ins`` is not one."""
    if isinstance(ins, Retire):
        d.count("gc_released_functions")
        if ins.reason == "empty":
            d.count("gc_emptied_functions")
        d._handle(ins.fn).release()
        return True
    if isinstance(ins, Migrate):
        _migrate(d, ins)
        return True
    return False


def _migrate(d: GcHost, m: Migrate) -> None:
    obj, s, i, (fn, block, off) = m.obj, m.stripe, m.index, m.place
    st = obj.stripes[s]

    def replied(f: Frame | None, sock: Any) -> None:
        if f is not None and f.paylen and sock is not None:
            drain(sock, f.paylen)
        ok = f is not None and f.status == Status.OK
        d.count("compacted_chunks" if ok else "compaction_failures")
        d._do(Migrated(obj=obj, stripe=s, index=i, place=m.place, ok=ok, now=time.monotonic()))

    d.count("compaction_cos_reads")  # the function's own COS GET (its record carries it to the cost account)
    d._handle(fn).request(Op.RECOVER, chunk_key(obj.key, obj.version, s, i), replied, a=block, b=off,
                          crc=st.crcs[i], meta=dict(zip(("src", "off"), obj.cos_range(s, i)), len=st.cl),
                          large=True)
