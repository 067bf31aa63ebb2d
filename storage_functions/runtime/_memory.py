"""Function memory: real blocks (``bytearray`` of the block size) holding
chunks and slices at the offsets the allocator chose. Covers allocation of
blocks on first touch, the key index, freeing a block when its last entry
goes; not placement (the daemon or metadata server decides block/offset) and
not persistence.

An entry starts at ``(block, offset)`` and, when longer than the rest of that
block, continues at offset 0 of ``block+1``, ``block+2``, ... The memory
never moves data; entries are written with ``recv_into`` straight into the
block and served from memoryviews of it.

Grains: with a ``grain`` below the block size (a multiple of the page size
that divides the block), a block is an anonymous mapping whose pages are
backed only where an entry lies: the grains an entry covers are populated when
it is reserved, and a grain no entry covers any more is given back to the
kernel (``MADV_DONTNEED``) while its block stays. ``used()`` (what every reply
reports as the function's memory) counts the grains held; ``grain ==
block_size`` holds whole blocks (populated in one go), as Pocket's and Jiffy's
block stores do. Capacity is still counted in whole blocks. A grain freed while
a GET still sends from this memory (``get(pin=True)`` / :meth:`unpin`) is given back
when the last such GET is done.

Entries never overlap: the allocator reuses the space of a freed entry (a hole,
or a whole block) once the metadata server freed it, which can be before this
function heard of the drop. A PUT at such a place supersedes the older entries
it overlaps (they are dead: the allocator placed new data there), which
``reserve`` reports; a recovery there is refused (``Overlap``): the chunk it
would restore is the dead one.
"""

from __future__ import annotations

import bisect
import mmap
import threading
from dataclasses import dataclass
from typing import Any

from ._grains import GrainSet

__all__ = ["Entry", "BlockMemory", "MemoryFull", "Overlap", "grain_of"]


class MemoryFull(Exception):
    pass


class Overlap(ValueError):
    """A reservation that would overlap a committed entry, where it may not supersede it."""


@dataclass(slots=True)
class Entry:
    key: str
    block: int
    offset: int
    length: int
    crc: int

    def spans(self, block_size: int) -> list[tuple[int, int, int]]:
        """(block, offset, length) pieces this entry occupies."""
        out = []
        block, offset, left = self.block, self.offset, self.length
        while left > 0:
            take = min(left, block_size - offset)
            out.append((block, offset, take))
            left -= take
            block, offset = block + 1, 0
        return out


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: ``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14): back a range's pages in one call
_MADV_POPULATE_WRITE = 23


def grain_of(block_size: int, grain: int | None) -> int:
    """The grain a memory of ``block_size`` blocks holds: ``grain`` when it is below the
    block (it must then be a multiple of the page size that divides the block), else
    the whole block; blocks under a page are always whole."""
    if grain is None or grain >= block_size or block_size < mmap.PAGESIZE:
        return block_size
    if grain <= 0 or grain % mmap.PAGESIZE or block_size % grain:
        raise ValueError(f"memory grain {grain} must be a multiple of the page size ({mmap.PAGESIZE}) "
                         f"that divides the block size {block_size}")
    return grain


def _new_block(size: int, populate: bool = True) -> Any:
    """A zeroed block: an anonymous mapping the kernel fills in one go (``MAP_POPULATE``),
    where ``bytearray(size)`` zeroes it page fault by page fault and the chunk's receive
    then writes it again (~20% of a function's CPU per large chunk received here).
    ``populate=False``: pages are backed grain by grain (``BlockMemory._back``)."""
    if size >= mmap.PAGESIZE:
        try:
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (_POPULATE if populate else 0))
        except OSError:
            pass
    return bytearray(size)


def _advise(buf: Any, option: int, start: int, length: int) -> bool:
    try:
        buf.madvise(option, start, length)
        return True
    except (OSError, ValueError, AttributeError):  # an old kernel, or a closed or bytearray block
        return False


class BlockMemory:
    def __init__(self, block_size: int, capacity: int, grain: int | None = None) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.grain = grain_of(block_size, grain)
        self.blocks: dict[int, Any] = {}  # block -> its memory (see ``_new_block``)
        self.refs: dict[int, int] = {}
        self.held = GrainSet(self.grain)  # the grains entries lie on (grain < block_size)
        self._pins = 0  # GETs sending from this memory (``pin``)
        self._unbacked: list[range] = []  # grains freed while pinned: given back at the last unpin
        self.index: dict[str, Entry] = {}
        self._spans: dict[int, list[tuple[int, int, str]]] = {}  # block -> committed (start, end, key), sorted
        self.superseded: list[str] = []  # keys a PUT's reservation dropped, until ``take_superseded``
        self._lock = threading.Lock()

    @property
    def whole(self) -> bool:
        """Whole blocks are held (no grains)."""
        return self.grain == self.block_size

    def used(self) -> int:
        """Bytes of memory held: whole blocks, or the grains entries lie on."""
        if self.whole:
            return len(self.blocks) * self.block_size
        return self.held.bytes()

    def blocks_bytes(self) -> int:
        """The blocks in use, whole: what counts against ``capacity``."""
        return len(self.blocks) * self.block_size

    def reserve(self, key: str, block: int, offset: int, length: int, crc: int, *,
                supersede: bool = True) -> tuple[Entry, list[memoryview]]:
        """Allocate the blocks ``key`` will occupy and return views to fill.
        The entry becomes visible only on :meth:`commit`. Committed entries of other
        keys it overlaps are dropped (``superseded`` lists them), or with
        ``supersede=False`` it raises :class:`Overlap`."""
        if offset < 0 or block < 0 or (offset >= self.block_size and length):
            raise ValueError(f"bad placement block={block} offset={offset} for block size {self.block_size}")
        entry = Entry(key, block, offset, length, crc)
        spans = entry.spans(self.block_size)
        with self._lock:
            older = self._overlapping(key, spans)
            if older and not supersede:
                raise Overlap(f"{key}: block {block} offset {offset} holds {older[0]} (live there now)")
            for k in older:
                self._release(self.index.pop(k))
                self.superseded.append(k)
            new = sum(1 for b, _, _ in spans if b not in self.blocks)
            if self.blocks_bytes() + new * self.block_size > self.capacity:
                raise MemoryFull(f"{key}: {new} more blocks exceed capacity {self.capacity}")
            views = []
            for b, off, n in spans:
                buf = self.blocks.get(b)
                if buf is None:
                    buf = self.blocks[b] = _new_block(self.block_size, self.whole)
                self.refs[b] = self.refs.get(b, 0) + 1
                views.append(memoryview(buf)[off:off + n])
            if not self.whole:
                self._back(entry)
        return entry, views

    def _back(self, entry: Entry) -> None:
        """Count the grains ``entry`` lies on and back the new ones (a page fault each
        otherwise), one call per block they run through."""
        for r in self.held.add(entry.block * self.block_size + entry.offset, entry.length):
            if self._unbacked:  # held again before a pinned GET let them go: keep them
                self._unbacked = [p for q in self._unbacked for p in _minus(q, r)]
            self._advise_range(r, _MADV_POPULATE_WRITE)

    def _advise_range(self, units: range, option: int) -> None:
        g, per = self.grain, self.block_size // self.grain
        u = units.start
        while u < units.stop:
            end = min(units.stop, (u // per + 1) * per)  # to the end of this grain's block
            buf = self.blocks.get(u // per)
            if buf is not None:
                _advise(buf, option, (u % per) * g, (end - u) * g)
            u = end

    def take_superseded(self) -> list[str]:
        """The keys reservations dropped since the last call (for the insertion log)."""
        with self._lock:
            out, self.superseded = self.superseded, []
            return out

    def _overlapping(self, key: str, spans: list[tuple[int, int, int]]) -> list[str]:
        out: list[str] = []
        for b, off, n in spans:
            row = self._spans.get(b)
            if not row:
                continue
            i = bisect.bisect_left(row, (off + n,)) - 1  # the last span starting before this one ends
            while i >= 0 and row[i][1] > off:
                if row[i][2] != key and row[i][2] not in out:
                    out.append(row[i][2])
                i -= 1
        return out

    def commit(self, entry: Entry) -> None:
        with self._lock:
            old = self.index.get(entry.key)
            self.index[entry.key] = entry
            if old is not None:
                self._release(old)
            for b, off, n in entry.spans(self.block_size):
                bisect.insort(self._spans.setdefault(b, []), (off, off + n, entry.key))

    def fill(self, entry: Entry, views: list[memoryview], data: bytes) -> None:
        """Copy ``data`` (the entry's bytes, in hand) into the views :meth:`reserve`
        returned and :meth:`commit` the entry."""
        pos = 0
        for v in views:
            v[:] = data[pos:pos + len(v)]
            pos += len(v)
        self.commit(entry)

    def abort(self, entry: Entry) -> None:
        with self._lock:
            self._release(entry)

    def get(self, key: str, *, pin: bool = False) -> tuple[Entry, list[memoryview]] | None:
        """The entry and views of its bytes. ``pin=True``: no grain is given back until
        :meth:`unpin` (a GET sending from the views; a deleted entry's bytes stay as they
        were meanwhile, as they do in a block a view keeps alive)."""
        with self._lock:
            entry = self.index.get(key)
            if entry is None:
                return None
            if pin:
                self._pins += 1
            return entry, [memoryview(self.blocks[b])[o:o + n] for b, o, n in entry.spans(self.block_size)]

    def unpin(self) -> None:
        with self._lock:
            self._pins -= 1
            if self._pins == 0 and self._unbacked:
                for r in self._unbacked:
                    self._advise_range(r, mmap.MADV_DONTNEED)
                self._unbacked = []

    def delete(self, key: str) -> bool:
        with self._lock:
            entry = self.index.pop(key, None)
            if entry is None:
                return False
            self._release(entry)
            return True

    def _release(self, entry: Entry) -> None:
        for b, off, n in entry.spans(self.block_size):
            row = self._spans.get(b)
            if row is not None:
                i = bisect.bisect_left(row, (off, off + n, entry.key))
                if i < len(row) and row[i] == (off, off + n, entry.key):
                    del row[i]
                    if not row:
                        del self._spans[b]
            left = self.refs.get(b, 0) - 1
            if left <= 0:
                self.refs.pop(b, None)
                self.blocks.pop(b, None)
            else:
                self.refs[b] = left
        if not self.whole:  # after the blocks: a block gone with its last entry is unmapped whole
            for r in self.held.remove(entry.block * self.block_size + entry.offset, entry.length):
                if self._pins:
                    self._unbacked.append(r)
                else:
                    self._advise_range(r, mmap.MADV_DONTNEED)


def _minus(have: range, take: range) -> list[range]:
    """``have`` without ``take`` (both ranges of step 1)."""
    out = []
    if have.start < take.start:
        out.append(range(have.start, min(have.stop, take.start)))
    if take.stop < have.stop:
        out.append(range(max(have.start, take.stop), have.stop))
    return [r for r in out if r]
