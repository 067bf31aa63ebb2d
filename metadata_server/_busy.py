"""Busy storage functions, as the daemon's load reports show them: a candidate filter of
the allocator's coded placement (SION Fig. 5, ``TestAndPlace``'s queue test, on the
metadata-placed path). Pure: loads and times in, a short-lived set out; no clock, no I/O.

The daemon reports, with each ``fetch_instructions``, the storage functions it has
requests queued or in flight to (``queued``) and the bytes of PUT chunks among them not
yet stored (``inflight_bytes``); a function it does not name is idle. A function is
*busy* for ``hold_s`` after the last report that said ``queued >= queue_depth`` (and, with
``relative`` > 0, at least ``relative`` times the mean queue of the pool's ``population``
functions, the unnamed ones idle), or ``inflight_bytes >= busy_bytes``. The relative test
would keep a burst that queues on every function of a group from marking them all (then
every stride is busy and placement falls back to its first function, a straggler too); it is
off by default: on a loaded 2-core machine it let more PUTs back onto the straggler of
``tests/integration/test_busy_placement.py`` (32-34 of 48 against at most 24). Reports of it idle do not end the mark early: its queue
drains *because* placement goes around it, and a mark that ended with the first short
queue would send the next PUTs straight back (the set would flicker with every report).
Silence (a daemon that stopped reporting) ends every mark when its hold runs out, so a
lost daemon never leaves functions shunned.

:class:`BusyFunctions` is a *soft* filter: the allocator skips a busy function as it skips
a full one (chunk ``i`` goes to the next function of its stride ``i, i+n, ...``), but when
every candidate of a chunk's stride is busy the object is placed without the filter (a
busy function is slow, not out of room). Slices are not filtered: a slice goes to a shared
block of the owner's, and its one small request costs a busy function little.

Every change of the set is an event the journal keeps (``ReportLoad``), so a replay takes
the allocator's decisions the live server took. ``changes`` says whether a report would
change anything, so the handler journals only those (a daemon reports every 20 ms).

Not covered: the report's transport (``_handler``, ``storage_functions.daemon._control``),
which functions are full (``_allocator``), GC buckets (``_buckets``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BusyFunctions", "BUSY_QUEUE_DEPTH", "BUSY_BYTES", "BUSY_HOLD_S", "BUSY_RELATIVE"]

#: Requests queued or in flight to a function that make it busy: SION's request queue
#: holds one request a function is serving and one behind it; a third waits for both.
BUSY_QUEUE_DEPTH = 3
#: PUT bytes in flight to a function that make it busy: 8 MiB is ~0.1 s at Lambda's
#: ~75 MB/s sustained (SION Sec. 6), longer than a chunk of a 100 MB object takes there.
BUSY_BYTES = 8 << 20
#: How long a function stays busy after the last report that said so (seconds): several of
#: the daemon's reports (every 20 ms when idle) and short next to a run.
BUSY_HOLD_S = 1.0
#: A busy function's queue is at least this many times the pool's mean queue (0: off).
BUSY_RELATIVE = 0.0


@dataclass(slots=True)
class BusyFunctions:
    """The busy set: function name -> the time its busy mark runs out."""

    queue_depth: int = BUSY_QUEUE_DEPTH
    busy_bytes: int = BUSY_BYTES
    hold_s: float = BUSY_HOLD_S
    relative: float = BUSY_RELATIVE
    until: dict[str, float] = field(default_factory=dict)
    #: reports that made or kept a function busy, by function (for stats)
    marked: dict[str, int] = field(default_factory=dict)
    strict = False

    def __post_init__(self) -> None:
        if self.queue_depth < 1 or self.busy_bytes < 1 or self.hold_s <= 0:
            raise ValueError(f"busy functions: queue_depth and busy_bytes must be >= 1 and hold_s > 0, got "
                             f"{self.queue_depth}, {self.busy_bytes}, {self.hold_s}")

    def busy_in(self, loads: Mapping[str, tuple[int, int]], population: int = 0) -> set[str]:
        """The functions ``loads`` ((queued, in-flight bytes) by name) says are busy, in a pool
        of ``population`` functions (at least those named)."""
        mean = sum(q for q, _ in loads.values()) / max(1, population, len(loads))
        return {fn for fn, (q, b) in loads.items()
                if (q >= self.queue_depth and (self.relative <= 0 or q >= self.relative * mean))
                or b >= self.busy_bytes}

    def changes(self, now: float, loads: Mapping[str, tuple[int, int]], population: int = 0) -> bool:
        """Whether ``report(now, loads)`` would change the set beyond what time does by itself:
        a function becomes busy, or a busy one's mark is past half its hold."""
        return any(self.until.get(fn, now) - now < self.hold_s / 2 for fn in self.busy_in(loads, population))

    def report(self, now: float, loads: Mapping[str, tuple[int, int]], population: int = 0) -> None:
        """A load report at ``now``: the busy functions in it are busy until ``now + hold_s``;
        the marks of the others run on."""
        self.advance(now)
        busy = self.busy_in(loads, population)
        for fn in sorted(busy):
            self.until[fn] = now + self.hold_s
            self.marked[fn] = self.marked.get(fn, 0) + 1

    def advance(self, now: float) -> None:
        """Time is ``now``: marks that ran out go."""
        if any(t <= now for t in self.until.values()):
            self.until = {fn: t for fn, t in self.until.items() if t > now}

    def admits(self, function: str) -> bool:
        """The allocator may place a chunk on ``function`` (call ``advance`` first)."""
        return function not in self.until

    def forget(self, function: str) -> None:
        """``function`` left the pool."""
        self.until.pop(function, None)
        self.marked.pop(function, None)
