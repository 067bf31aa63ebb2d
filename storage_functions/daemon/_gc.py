"""SION's sliding-window garbage collection of function memory (Sec. 5.3, Fig. 4),
as pure policy: function indexes, chunk ids and times in, decisions out. No
sockets, no clock, no randomness of its own (the caller passes a ``random.Random``).

Every ``interval_s`` a GC round opens a new *GC bucket*; functions that begin
to hold data join the newest bucket, and the open functions of the newest
bucket (not sealed by the HARDCAP) are carried over into the new one, so new
data always lands in the newest bucket. A bucket lives ``active`` GC intervals
as *active* (its functions are warmed every ``active_warm_s``), then
``degraded`` intervals as *degraded* (sealed: no new data; warmed every
``degraded_warm_s``), then it is *released*: its functions leave the memory
space at once (their data stays in COS). H = ``active + degraded`` intervals.

A GET that reads a chunk on a function of a degraded bucket marks the chunk;
compaction moves the marked chunks to the newest bucket in rounds, each
taking a random ``compact_fraction`` of the marked chunks (at most
``compact_max``), so hot data is never released with its cold bucket.

Joined with FuncStore's read counts: a function of an older bucket whose
every chunk was freed (its blocks all free) leaves the pool at once without
waiting for H; the newest bucket keeps its functions (new data goes there
next, and a sealed group there reopens as it empties).

What carries the decisions out (unplacing chunks, ending invocations,
loading chunks from COS) is the store core (``_state``) and the daemon.
Not here: which function a chunk goes to (``_placement``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["GcConfig", "GcBucket", "GcWindow", "BucketState", "GcRelease", "GcSeal"]

BucketState = Literal["active", "degraded"]


@dataclass(frozen=True, slots=True)
class GcConfig:
    """The window's knobs (defaults: SION's container-registry setting, Sec. 6.1.1, with
    the Azure trace's one-minute interval: M=6, N=12, warm-ups every 1 and 5 minutes)."""

    interval_s: float = 60.0
    active: int = 6  # M: GC intervals a bucket stays active
    degraded: int = 12  # N: GC intervals it then stays degraded (H = M + N)
    active_warm_s: float = 60.0
    degraded_warm_s: float = 300.0
    compact_fraction: float = 0.5  # of the marked chunks per compaction round
    compact_max: int = 64  # chunks per round at most
    # a GC round carries over only the newest bucket's functions that hold no data (the
    # metadata server's allocator fills functions block by block and never to a HARDCAP:
    # without this nothing it placed would age), instead of every open one
    seal_held: bool = False

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.active < 1 or self.degraded < 0:
            raise ValueError(f"GC window: interval_s must be > 0, active >= 1, degraded >= 0, got {self}")
        if self.active_warm_s <= 0 or self.degraded_warm_s <= 0:
            raise ValueError(f"GC window: warm-up intervals must be > 0, got {self}")
        if not 0 < self.compact_fraction <= 1 or self.compact_max < 1:
            raise ValueError(f"GC window: compact_fraction in (0, 1] and compact_max >= 1, got {self}")

    @property
    def horizon_s(self) -> float:
        """H: how long data not read again stays in function memory."""
        return (self.active + self.degraded) * self.interval_s


@dataclass(slots=True)
class GcBucket:
    """The functions added to memory in GC interval ``slot`` (opened at ``opened_at``)."""

    slot: int
    opened_at: float
    functions: set[int] = field(default_factory=set)
    state: BucketState = "active"


@dataclass(frozen=True, slots=True)
class GcSeal:
    """These functions' bucket became degraded: no new data goes there."""

    functions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GcRelease:
    """These functions leave the memory space now; ``reason``: ``window`` (their bucket
    aged past H), ``empty`` (every chunk they held was freed) or ``lost`` (a degraded
    function's instance was lost: its cold data is not recovered)."""

    functions: tuple[int, ...]
    reason: Literal["window", "empty", "lost"]


GcInstruction = GcSeal | GcRelease


class GcWindow:
    """The buckets, oldest first; ``buckets[-1]`` is the newest (it takes new data)."""

    def __init__(self, config: GcConfig | None = None, *, now: float = 0.0) -> None:
        self.config = config or GcConfig()
        self.slot = 0
        self.last_gc = now
        self.buckets: list[GcBucket] = [GcBucket(0, now)]
        self.where: dict[int, GcBucket] = {}  # function -> its bucket
        self.marked: dict[Hashable, int] = {}  # chunk id -> the degraded function it was read on
        self.released: set[int] = set()  # functions released (until they hold data again)
        self.rounds = 0  # GC rounds so far
        self.compacted = 0  # chunks handed to compaction

    # -- queries -----------------------------------------------------------------
    @property
    def newest(self) -> GcBucket:
        return self.buckets[-1]

    def state_of(self, fn: int) -> BucketState | Literal["released", "none"]:
        b = self.where.get(fn)
        if b is not None:
            return b.state
        return "released" if fn in self.released else "none"

    def warm_interval(self, fn: int) -> float:
        """How often function ``fn`` is warmed: its bucket's rate (active when in none yet)."""
        b = self.where.get(fn)
        c = self.config
        return c.degraded_warm_s if b is not None and b.state == "degraded" else c.active_warm_s

    def degraded(self, fn: int) -> bool:
        b = self.where.get(fn)
        return b is not None and b.state == "degraded"

    def degraded_functions(self) -> frozenset[int]:
        return frozenset(fn for b in self.buckets if b.state == "degraded" for fn in b.functions)

    def report(self) -> dict[int, str]:
        """The functions that must not take new data as the metadata server's allocator sees
        them: those of a bucket other than the newest (``active`` or ``degraded``) and the
        released ones (``released``); a function not named takes new data (the newest bucket)."""
        out: dict[int, str] = {fn: b.state for b in self.buckets[:-1] for fn in b.functions}
        out.update((fn, "released") for fn in self.released)
        return dict(sorted(out.items()))

    def stats(self) -> dict[str, object]:
        return {"rounds": self.rounds, "slot": self.slot,
                "active_functions": sum(len(b.functions) for b in self.buckets if b.state == "active"),
                "degraded_functions": sum(len(b.functions) for b in self.buckets if b.state == "degraded"),
                "buckets": [{"slot": b.slot, "state": b.state, "functions": sorted(b.functions)}
                            for b in self.buckets],
                "marked": len(self.marked), "compacted": self.compacted, "released": len(self.released)}

    # -- events ------------------------------------------------------------------
    def joined(self, fn: int) -> None:
        """Function ``fn`` began to hold data: it belongs to the newest bucket unless it is
        in one already."""
        if fn not in self.where:
            self.released.discard(fn)
            self.newest.functions.add(fn)
            self.where[fn] = self.newest

    def left(self, fn: int) -> None:
        """Function ``fn`` left the memory space by other means (scale-in, lost and empty)."""
        b = self.where.pop(fn, None)
        if b is not None:
            b.functions.discard(fn)
        self._unmark_fn(fn)

    def emptied(self, fn: int) -> list[GcInstruction]:
        """Every chunk on ``fn`` was freed (read counts reached zero): it leaves at once,
        unless it is in the newest bucket, which takes new data next."""
        b = self.where.get(fn)
        if b is None or b is self.newest:
            return []
        self.release(fn)
        return [GcRelease((fn,), "empty")]

    def release(self, fn: int) -> None:
        """Function ``fn`` leaves the memory space now (emptied, or a degraded function whose
        instance was lost: SION removes it rather than recovering cold data)."""
        self.left(fn)
        self.released.add(fn)
        self._drop_empty_buckets()

    def read(self, chunk: Hashable, fn: int) -> bool:
        """A GET read ``chunk`` on function ``fn``; marked for compaction (True) when ``fn``
        is in a degraded bucket."""
        if not self.degraded(fn):
            return False
        self.marked[chunk] = fn
        return True

    def unmark(self, chunk: Hashable) -> None:
        """The chunk was freed or moved."""
        self.marked.pop(chunk, None)

    def step(self, now: float, open_fns: Iterable[int]) -> list[GcInstruction]:
        """Run the GC rounds due by ``now`` (one per elapsed interval): open a new bucket,
        carry the newest bucket's ``open_fns`` over into it, degrade the buckets ``active``
        intervals old (``GcSeal``) and release those ``active + degraded`` old
        (``GcRelease``)."""
        c = self.config
        out: list[GcInstruction] = []
        open_set = set(open_fns)
        while now - self.last_gc >= c.interval_s:
            self.last_gc += c.interval_s
            self.slot += 1
            self.rounds += 1
            old, new = self.newest, GcBucket(self.slot, self.last_gc)
            for fn in sorted(old.functions & open_set):
                old.functions.discard(fn)
                new.functions.add(fn)
                self.where[fn] = new
            self.buckets.append(new)
            seal: list[int] = []
            release: list[int] = []
            for b in self.buckets:
                age = self.slot - b.slot
                if b.state == "active" and age >= c.active and b is not new:
                    b.state = "degraded"
                    seal.extend(sorted(b.functions))
                if age >= c.active + c.degraded and b is not new:
                    release.extend(sorted(b.functions))
                    for fn in b.functions:
                        self.where.pop(fn, None)
                        self.released.add(fn)
                        self._unmark_fn(fn)
                    b.functions.clear()
            if seal:
                out.append(GcSeal(tuple(seal)))
            if release:
                out.append(GcRelease(tuple(release), "window"))
            self._drop_empty_buckets()
        return out

    def compaction(self, rng: random.Random) -> list[Hashable]:
        """One compaction round: a random ``compact_fraction`` of the marked chunks (at least
        one, at most ``compact_max``), unmarked; a chunk whose move fails is marked again
        by its next read."""
        if not self.marked:
            return []
        c = self.config
        k = min(c.compact_max, max(1, math.ceil(len(self.marked) * c.compact_fraction)))
        picked = rng.sample(sorted(self.marked, key=repr), k)
        for ch in picked:
            del self.marked[ch]
        self.compacted += len(picked)
        return picked

    def validate(self) -> None:
        """Assert the window's invariants (tests)."""
        seen: set[int] = set()
        assert self.buckets and self.buckets[-1].slot == self.slot, "the newest bucket is the current slot's"
        for b in self.buckets:
            assert not (b.functions & seen), f"a function is in two buckets: {b.functions & seen}"
            seen |= b.functions
            for fn in b.functions:
                assert self.where[fn] is b, fn
            assert b.state == "active" or self.slot - b.slot >= self.config.active, b
        assert set(self.where) == seen, "the function index matches the buckets"
        assert not (seen & self.released), "a released function is in a bucket"
        for fn in self.marked.values():
            assert fn in self.where, f"a marked chunk's function {fn} is in no bucket"

    # -- internals ---------------------------------------------------------------
    def _unmark_fn(self, fn: int) -> None:
        for ch in [ch for ch, f in self.marked.items() if f == fn]:
            del self.marked[ch]

    def _drop_empty_buckets(self) -> None:
        self.buckets = [b for b in self.buckets[:-1] if b.functions] + [self.buckets[-1]]
