"""SION chunk placement (Fig. 5, PlaceChunk) and per-function block
allocation, as pure classes: sizes and indexes in, decisions out; no sockets,
no clock. Covers which function, block and offset each chunk of an object
gets, function groups, scale-out by one group, sealing at the HARDCAP;
not invoking anything (the daemon carries the decisions out).

Functions are numbered in the order they joined the pool (oldest first).
``place`` walks a function pointer per chunk as in the paper: chunk ``i``
starts at open function ``i`` and steps by the object's chunk count, so no
two chunks of one object share a function; when the pointer runs past the
open functions the pool scales out by one function group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["BlockAllocator", "FunctionSlot", "PlaceChunk", "Placement", "PoolExhausted", "BadPlacement"]


class PoolExhausted(Exception):
    """Every function of the configured pool is sealed or taken."""


class BadPlacement(ValueError):
    """An allocation made elsewhere names a function, block or offset outside the pool."""


@dataclass
class BlockAllocator:
    """Bump allocation of (block, offset) in one function's memory; a block
    is free again when every entry in it was freed."""

    block_size: int
    next_block: int = 0
    cur: int | None = None
    cur_off: int = 0
    refs: dict[int, int] = field(default_factory=dict)

    def used(self) -> int:
        return len(self.refs) * self.block_size

    def cost(self, size: int) -> int:
        """Bytes of new blocks ``alloc(size)`` would take."""
        if size == 0:
            return 0
        if self.cur is not None and self.cur_off + size <= self.block_size:
            return 0
        return math.ceil(size / self.block_size) * self.block_size

    def alloc(self, size: int) -> tuple[int, int]:
        if size == 0:
            return 0, 0
        bs = self.block_size
        if self.cur is not None and self.cur_off + size <= bs:
            block, off = self.cur, self.cur_off
            self.cur_off += size
            self.refs[block] = self.refs.get(block, 0) + 1
            return block, off
        n = math.ceil(size / bs)
        block = self.next_block
        self.next_block += n
        for b in range(block, block + n):
            self.refs[b] = self.refs.get(b, 0) + 1
        tail = size - (n - 1) * bs
        self.cur, self.cur_off = (block + n - 1, tail) if tail < bs else (None, 0)
        return block, 0

    def free(self, block: int, offset: int, size: int) -> None:
        left, b, off = size, block, offset
        while left > 0:
            take = min(left, self.block_size - off)
            r = self.refs.get(b, 0) - 1
            if r <= 0:
                self.refs.pop(b, None)
                if b == self.cur:
                    self.cur, self.cur_off = None, 0
            else:
                self.refs[b] = r
            left -= take
            b, off = b + 1, 0

    def reset(self) -> None:
        self.refs.clear()
        self.cur, self.cur_off = None, 0


@dataclass
class FunctionSlot:
    index: int
    alloc: BlockAllocator
    sealed: bool = False
    held: bool = False  # sealed by the GC window (degraded bucket): frees never reopen it
    retired: bool = False  # released by the GC window: reused only by a later scale-out


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each chunk goes: (function index, block, offset) per chunk, and
    how many functions joined the pool to make room."""

    places: tuple[tuple[int, int, int], ...]
    scaled_out: int


class PlaceChunk:
    """``capacity`` (default ``hardcap``) is what a function holds in blocks:
    the bound of the allocations ``reserve`` accepts from the metadata server,
    which may fill a function past the HARDCAP that ``place`` stops at."""

    def __init__(self, *, group_size: int, hardcap: int, block_size: int, max_functions: int,
                 capacity: int | None = None) -> None:
        if group_size < 1 or hardcap < block_size or max_functions < group_size:
            raise ValueError("PlaceChunk needs group_size >= 1, hardcap >= block_size, max_functions >= group_size")
        self.group_size = group_size
        self.hardcap = hardcap
        self.block_size = block_size
        self.max_functions = max_functions
        self.capacity = max(hardcap, capacity or 0)
        self.slots: list[FunctionSlot] = []

    # -- queries ------------------------------------------------------------
    def open_functions(self) -> list[int]:
        return [s.index for s in self.slots if not s.sealed]

    def group_of(self, index: int) -> int:
        return index // self.group_size

    def used(self, index: int) -> int:
        return self.slots[index].alloc.used()

    # -- decisions ----------------------------------------------------------
    def scale_out(self) -> list[int]:
        """Add one function group; returns the new indexes."""
        start = len(self.slots)
        if start + self.group_size > self.max_functions:
            reused = self._reuse_group()
            if reused:
                return reused
            raise PoolExhausted(f"function pool of {self.max_functions} exhausted "
                                f"({len(self.open_functions())} open, hardcap {self.hardcap} bytes)")
        for i in range(start, start + self.group_size):
            self.slots.append(FunctionSlot(i, BlockAllocator(self.block_size)))
        return list(range(start, start + self.group_size))

    def place(self, sizes: list[int], busy: Callable[[int], bool] | None = None,
              exclude: frozenset[int] = frozenset()) -> Placement:
        """Place the chunks of one object (``sizes[i]`` bytes for chunk i),
        never on a function in ``exclude`` (those holding its other chunks
        when one chunk is placed again)."""
        n = len(sizes)
        opened = self.open_functions()
        scaled = 0
        chosen: list[tuple[int, int, int]] = []
        taken: set[int] = set(exclude)
        try:
            for cid, size in enumerate(sizes):
                ptr = cid
                while True:
                    while ptr >= len(opened):  # GetOpenFuncs: scale out by whole groups
                        opened.extend(self.scale_out())
                        scaled += self.group_size
                    fn = opened[ptr]
                    if fn not in taken and self._test(fn, size, busy):
                        block, off = self.slots[fn].alloc.alloc(size)
                        chosen.append((fn, block, off))
                        taken.add(fn)
                        break
                    ptr += max(n, 1)
        except PoolExhausted:  # all or nothing: the chunks placed so far give their blocks back
            for (fn, block, off), size in zip(chosen, sizes):
                self.slots[fn].alloc.free(block, off, size)
            raise
        for fn in taken - exclude:
            if self.slots[fn].alloc.used() >= self.hardcap:
                self._seal_group(self.group_of(fn))
        return Placement(tuple(chosen), scaled)

    def _reuse_group(self) -> list[int]:
        """The functions of one group (the oldest that has any) that the GC window released
        and that hold nothing, open again; or []."""
        for g in range(-(-len(self.slots) // self.group_size)):
            members = [m for m in self.slots[g * self.group_size:(g + 1) * self.group_size]
                       if m.retired and not m.alloc.refs]
            if members:
                for m in members:
                    m.alloc.reset()
                    m.sealed = m.held = m.retired = False
                return [m.index for m in members]
        return []

    def hold(self, fns: list[int] | tuple[int, ...]) -> None:
        """The GC window degraded these functions' bucket: sealed for good (SION Sec. 5.3.1:
        degraded buckets take no new data)."""
        for fn in fns:
            if fn < len(self.slots):
                self.slots[fn].sealed = self.slots[fn].held = True

    def retire(self, fns: list[int] | tuple[int, ...]) -> None:
        """The GC window released these functions: sealed until a scale-out reuses their
        whole group once it holds nothing (``max_functions`` bounds the pool, so released
        functions come back as the newest bucket's)."""
        for fn in fns:
            if fn < len(self.slots):
                s = self.slots[fn]
                s.sealed = s.held = s.retired = True

    def _test(self, fn: int, size: int, busy: Callable[[int], bool] | None) -> bool:
        slot = self.slots[fn]
        if slot.sealed or (busy is not None and busy(fn)):
            return False
        return slot.alloc.used() + slot.alloc.cost(size) <= self.hardcap

    def _seal_group(self, group: int) -> None:
        for s in self.slots[group * self.group_size:(group + 1) * self.group_size]:
            s.sealed = True

    # -- reconciliation -----------------------------------------------------
    def free(self, fn: int, block: int, offset: int, size: int) -> None:
        """A chunk left function ``fn``; a sealed group reopens once every
        member is below half the HARDCAP (FuncStore frees often, unlike
        SION's GC buckets)."""
        if size == 0 or fn >= len(self.slots):
            return
        self.slots[fn].alloc.free(block, offset, size)
        g = self.group_of(fn)
        members = self.slots[g * self.group_size:(g + 1) * self.group_size]
        if members[0].sealed and not any(m.held for m in members) and \
                all(m.alloc.used() < self.hardcap // 2 for m in members):
            for m in members:
                m.sealed = False

    def lost(self, fn: int) -> None:
        """Function ``fn``'s instance was reclaimed: its memory is empty."""
        if fn < len(self.slots):
            self.slots[fn].alloc.reset()

    def check(self, fn: int, block: int, offset: int, size: int) -> None:
        """Raise ``BadPlacement`` unless ``size`` bytes at (``block``, ``offset``)
        of function ``fn`` lie inside the pool: ``0 <= fn < max_functions``,
        ``0 <= offset < block_size`` and every block it spans below
        ``capacity // block_size``."""
        blocks = self.capacity // self.block_size
        if not 0 <= fn < self.max_functions:
            raise BadPlacement(f"function {fn} is outside the pool of {self.max_functions} functions")
        if not 0 <= offset < self.block_size:
            raise BadPlacement(f"offset {offset} is outside a block of {self.block_size} bytes")
        if size < 0:
            raise BadPlacement(f"chunk size {size} is negative")
        end = block + (offset + size + self.block_size - 1) // self.block_size if size else block + 1
        if block < 0 or end > blocks:
            raise BadPlacement(f"block {block} (+{size} bytes at offset {offset}) is outside function {fn}'s "
                               f"{blocks} blocks (blocks 0..{blocks - 1})")

    def reserve(self, fn: int, block: int, offset: int, size: int) -> None:
        """Account an allocation made by the caller (metadata server); one
        outside the pool raises ``BadPlacement`` and changes nothing."""
        self.check(fn, block, offset, size)
        while fn >= len(self.slots):  # slot by slot: the caller's pool need not be whole groups
            self.slots.append(FunctionSlot(len(self.slots), BlockAllocator(self.block_size)))
        a = self.slots[fn].alloc
        left, b, off = size, block, offset
        while left > 0:
            take = min(left, self.block_size - off)
            a.refs[b] = a.refs.get(b, 0) + 1
            left -= take
            b, off = b + 1, 0
        a.next_block = max(a.next_block, b + (1 if off else 0))
