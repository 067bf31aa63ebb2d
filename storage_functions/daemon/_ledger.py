"""Physical memory accounting: what the storage functions hold, per run and
per function, over time. Pure: events carry their time (``now``), no clock
reads, no I/O; the daemon feeds it from the functions' acknowledgements.

An *entry* is one stored chunk or slice: ``length`` bytes at ``(block,
offset)`` of one function, continuing into ``block+1, ...`` when longer than
the rest of the block (the runtime's layout, ``runtime/_memory.py``). The
runtime holds a *grain* (``grain``: a whole block by default, or the grain a
block backs its memory by, ``memory_grain``) while any entry lies on it, so
the ledger counts, per function, the grains with at least one entry, and per
run the grains holding at least one of the run's entries (a run's key starts
with ``<run_id>/``). Allocated bytes are those grains times the grain; live
bytes are the entries' lengths. Both are integrated over time
(byte-seconds) and their peaks kept, per run, from the first entry of the
run until :meth:`forget`. Beside the grains, each run's *whole blocks* with at
least one of its entries are counted the same way (``block_mb_s``,
``peak_block_bytes``): the same entries in the other memory unit, so a study
can compare every policy by the grain and by the block from one run (equal to
the grain figures when the grain is the block).

Not covered: where entries go (the metadata server's allocator decides),
deleting anything (the daemon does), the runtime's own count (the daemon's
``FunctionHandle.mem``, which tests compare with :meth:`function_bytes`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from ..runtime._grains import GrainSet

__all__ = ["MemoryLedger", "RunMemory", "run_of"]


def run_of(key: str) -> str:
    """The run a store key belongs to (``<run_id>/<name>``), ``""`` for a key outside runs."""
    run, sep, _ = key.partition("/")
    return run if sep else ""


@dataclass(slots=True)
class RunMemory:
    """One run's physical memory: blocks held now, live bytes now, their
    integrals and peaks, and a bounded series of ``(t, allocated, live)``."""

    run_id: str
    first_t: float
    last_t: float
    grains: dict[str, GrainSet] = field(default_factory=dict)  # function -> the grains the run's entries lie on
    held: int = 0  # grains held, over its functions
    live_bytes: int = 0
    alloc_byte_s: float = 0.0
    live_byte_s: float = 0.0
    peak_alloc: int = 0
    peak_live: int = 0
    series: list[tuple[float, int, int]] = field(default_factory=list)
    blocks: dict[str, GrainSet] = field(default_factory=dict)  # function -> the whole blocks the entries lie on
    held_blocks: int = 0
    block_byte_s: float = 0.0
    peak_block: int = 0

    def advance(self, now: float, grain: int, block: int) -> None:
        dt = now - self.last_t
        if dt > 0:
            self.alloc_byte_s += self.held * grain * dt
            self.block_byte_s += self.held_blocks * block * dt
            self.live_byte_s += self.live_bytes * dt
            self.last_t = now

    def summary(self, grain: int, block: int) -> dict[str, Any]:
        mib = float(1 << 20)
        return {"run_id": self.run_id, "allocated_bytes": self.held * grain,
                "live_bytes": self.live_bytes, "peak_allocated_bytes": self.peak_alloc,
                "peak_live_bytes": self.peak_live, "allocated_mb_s": self.alloc_byte_s / mib,
                "live_mb_s": self.live_byte_s / mib, "block_bytes": self.held_blocks * block,
                "peak_block_bytes": self.peak_block, "block_mb_s": self.block_byte_s / mib,
                "first_t": self.first_t, "last_t": self.last_t,
                "series": [list(s) for s in self.series]}


@dataclass(slots=True)
class _Entry:
    run: str
    function: str
    length: int
    start: int  # its first byte, over the function's blocks end to end


class MemoryLedger:
    """``stored`` / ``released`` / ``function_lost`` in, figures out.

    ``max_series`` bounds each run's time series: past it, every other
    sample is dropped (the integrals stay exact; only the picture thins).
    """

    def __init__(self, block_size: int, *, grain: int | None = None, max_series: int = 4096) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.grain = block_size if not grain or grain >= block_size else grain
        if block_size % self.grain:
            raise ValueError(f"grain {grain} must divide the block size {block_size}")
        self.max_series = max(16, max_series)
        self.entries: dict[tuple[str, str], _Entry] = {}  # (function, entry key) -> entry
        self.function_grains: dict[str, GrainSet] = {}  # function -> the grains its entries lie on
        self._runs_of: dict[str, list[tuple[int, int, str]]] = {}  # function -> (start, end, key), sorted
        self.runs: dict[str, RunMemory] = {}

    # -- events ----------------------------------------------------------------------
    def stored(self, now: float, function: str, key: str, block: int, offset: int, length: int) -> None:
        """``function`` acknowledged an entry ``key`` (a chunk key ``v/s/i/<run>/<name>``
        or a store key) of ``length`` bytes at ``(block, offset)``. Storing a key again
        on the same function replaces the old entry, and an entry it overlaps is gone
        (the runtime supersedes it: the allocator reused a freed place before its drop
        arrived)."""
        if block < 0 or not 0 <= offset < self.block_size or length < 0:
            raise ValueError(f"bad entry {key!r}: block {block}, offset {offset}, length {length}")
        self.released(now, function, key)
        start = block * self.block_size + offset
        for older in self._overlapping(function, start, start + length):
            self.released(now, function, older)
        if length:
            bisect.insort(self._runs_of.setdefault(function, []), (start, start + length, key))
        run = run_of(_store_key(key))
        self.entries[(function, key)] = _Entry(run, function, length, start)
        fg = self.function_grains.get(function)
        if fg is None:
            fg = self.function_grains[function] = GrainSet(self.grain)
        fg.add(start, length)
        if not run:
            return
        rm = self.runs.get(run)
        if rm is None:
            rm = self.runs[run] = RunMemory(run, now, now)
        rm.advance(now, self.grain, self.block_size)
        rg = rm.grains.get(function)
        if rg is None:
            rg = rm.grains[function] = GrainSet(self.grain)
        rm.held += sum(len(r) for r in rg.add(start, length))
        rb = rm.blocks.get(function)
        if rb is None:
            rb = rm.blocks[function] = GrainSet(self.block_size)
        rm.held_blocks += sum(len(r) for r in rb.add(start, length))
        rm.live_bytes += length
        self._changed(rm, now)

    def released(self, now: float, function: str, key: str) -> bool:
        """The entry left the function (deleted, or replaced). Unknown entries are ignored."""
        e = self.entries.pop((function, key), None)
        if e is None:
            return False
        if e.length:
            row = self._runs_of[function]
            del row[bisect.bisect_left(row, (e.start, e.start + e.length, key))]
            if not row:
                del self._runs_of[function]
        fg = self.function_grains.get(function)
        if fg is not None and e.length:
            fg.remove(e.start, e.length)
            if not fg:
                del self.function_grains[function]
        rm = self.runs.get(e.run) if e.run else None
        if rm is not None:
            rm.advance(now, self.grain, self.block_size)
            rg = rm.grains.get(function)
            if rg is not None and e.length:
                rm.held -= sum(len(r) for r in rg.remove(e.start, e.length))
                if not rg:
                    del rm.grains[function]
            rb = rm.blocks.get(function)
            if rb is not None and e.length:
                rm.held_blocks -= sum(len(r) for r in rb.remove(e.start, e.length))
                if not rb:
                    del rm.blocks[function]
            rm.live_bytes -= e.length
            self._changed(rm, now)
        return True

    def function_lost(self, now: float, function: str) -> int:
        """The function's instance is gone with its memory; returns the entries dropped."""
        keys = [k for (fn, k) in self.entries if fn == function]
        for k in keys:
            self.released(now, function, k)
        return len(keys)

    def forget(self, run_id: str) -> None:
        """Stop reporting a run (after its report was taken)."""
        self.runs.pop(run_id, None)

    # -- queries ---------------------------------------------------------------------
    def run_summary(self, run_id: str, now: float) -> dict[str, Any] | None:
        """The run's figures integrated up to ``now`` (None when it never held a byte)."""
        rm = self.runs.get(run_id)
        if rm is None:
            return None
        rm.advance(now, self.grain, self.block_size)
        return rm.summary(self.grain, self.block_size)

    def function_bytes(self, function: str) -> int:
        """Bytes of grains ``function`` holds (what its runtime reports as ``mem``)."""
        fg = self.function_grains.get(function)
        return fg.bytes() if fg is not None else 0

    def allocated_bytes(self) -> int:
        return sum(len(g) for g in self.function_grains.values()) * self.grain

    def validate(self) -> None:
        """Check the derived counts against the entries (tests call it)."""
        fg: dict[str, GrainSet] = {}
        rg: dict[str, dict[str, GrainSet]] = {}
        live: dict[str, int] = {}
        rows: dict[str, list[tuple[int, int, str]]] = {}
        for (fn, k), e in self.entries.items():
            assert e.length >= 0 and e.start >= 0, e
            if e.length:
                rows.setdefault(fn, []).append((e.start, e.start + e.length, k))
            fg.setdefault(fn, GrainSet(self.grain)).add(e.start, e.length)
            if e.run:
                rg.setdefault(e.run, {}).setdefault(fn, GrainSet(self.grain)).add(e.start, e.length)
                live[e.run] = live.get(e.run, 0) + e.length
        for fn, row in rows.items():
            row.sort()
            assert all(a[1] <= b[0] for a, b in zip(row, row[1:])), f"entries overlap on {fn}"
        assert rows == self._runs_of, "the entries' index drifted"
        assert {f: (g.edges, g.interior) for f, g in fg.items() if len(g)} == \
            {f: (g.edges, g.interior) for f, g in self.function_grains.items() if len(g)}, "function grains drifted"
        for run, rm in self.runs.items():
            want = rg.get(run, {})
            assert {f: (g.edges, g.interior) for f, g in want.items() if len(g)} == \
                {f: (g.edges, g.interior) for f, g in rm.grains.items() if len(g)}, run
            assert rm.held == sum(len(g) for g in want.values()), (run, rm.held)
            assert rm.live_bytes == live.get(run, 0), (run, rm.live_bytes)
            assert rm.peak_alloc >= rm.held * self.grain and rm.peak_live >= rm.live_bytes
            assert rm.held_blocks == sum(len(g) for g in rm.blocks.values()), (run, rm.held_blocks)
            assert rm.held_blocks * self.block_size >= rm.held * self.grain, (run, rm.held_blocks)

    # -- internals -------------------------------------------------------------------
    def _overlapping(self, function: str, start: int, end: int) -> list[str]:
        row = self._runs_of.get(function)
        if not row or end <= start:
            return []
        out = []
        i = bisect.bisect_left(row, (end,)) - 1  # the last entry starting before this one ends
        while i >= 0 and row[i][1] > start:
            out.append(row[i][2])
            i -= 1
        return out

    def _changed(self, rm: RunMemory, now: float) -> None:
        alloc = rm.held * self.grain
        rm.peak_alloc = max(rm.peak_alloc, alloc)
        rm.peak_block = max(rm.peak_block, rm.held_blocks * self.block_size)
        rm.peak_live = max(rm.peak_live, rm.live_bytes)
        if rm.series and rm.series[-1][0] == now:
            rm.series[-1] = (now, alloc, rm.live_bytes)
        else:
            rm.series.append((now, alloc, rm.live_bytes))
        if len(rm.series) > self.max_series:
            rm.series[:] = rm.series[::2] + ([rm.series[-1]] if len(rm.series) % 2 == 0 else [])


def _store_key(entry_key: str) -> str:
    """The store key inside a chunk key ``<version>/<stripe>/<index>/<key>``; other keys as they are."""
    parts = entry_key.split("/", 3)
    if len(parts) == 4 and all(p.isdigit() for p in parts[:3]):
        return parts[3]
    return entry_key
