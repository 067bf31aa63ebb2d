"""Function memory: real blocks (``bytearray`` of the block size) holding
chunks and slices at the offsets the allocator chose. Covers allocation of
blocks on first touch, the key index, freeing a block when its last entry
goes; not placement (the daemon or metadata server decides block/offset) and
not persistence.

An entry starts at ``(block, offset)`` and, when longer than the rest of that
block, continues at offset 0 of ``block+1``, ``block+2``, ... The memory
never moves data; entries are written with ``recv_into`` straight into the
block and served from memoryviews of it.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["Entry", "BlockMemory", "MemoryFull"]


class MemoryFull(Exception):
    pass


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


def _new_block(size: int) -> Any:
    """A zeroed block: an anonymous mapping the kernel fills in one go (``MAP_POPULATE``),
    where ``bytearray(size)`` zeroes it page fault by page fault and the chunk's receive
    then writes it again (~20% of a function's CPU per large chunk received here)."""
    if size >= mmap.PAGESIZE and _POPULATE:
        try:
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
        except OSError:
            pass
    return bytearray(size)


class BlockMemory:
    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.blocks: dict[int, Any] = {}  # block -> its memory (see ``_new_block``)
        self.refs: dict[int, int] = {}
        self.index: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def used(self) -> int:
        return len(self.blocks) * self.block_size

    def reserve(self, key: str, block: int, offset: int, length: int, crc: int) -> tuple[Entry, list[memoryview]]:
        """Allocate the blocks ``key`` will occupy and return views to fill.
        The entry becomes visible only on :meth:`commit`."""
        if offset < 0 or block < 0 or (offset >= self.block_size and length):
            raise ValueError(f"bad placement block={block} offset={offset} for block size {self.block_size}")
        entry = Entry(key, block, offset, length, crc)
        spans = entry.spans(self.block_size)
        with self._lock:
            new = sum(1 for b, _, _ in spans if b not in self.blocks)
            if self.used() + new * self.block_size > self.capacity:
                raise MemoryFull(f"{key}: {new} more blocks exceed capacity {self.capacity}")
            views = []
            for b, off, n in spans:
                buf = self.blocks.get(b)
                if buf is None:
                    buf = self.blocks[b] = _new_block(self.block_size)
                self.refs[b] = self.refs.get(b, 0) + 1
                views.append(memoryview(buf)[off:off + n])
        return entry, views

    def commit(self, entry: Entry) -> None:
        with self._lock:
            old = self.index.get(entry.key)
            self.index[entry.key] = entry
            if old is not None:
                self._release(old)

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

    def get(self, key: str) -> tuple[Entry, list[memoryview]] | None:
        with self._lock:
            entry = self.index.get(key)
            if entry is None:
                return None
            return entry, [memoryview(self.blocks[b])[o:o + n] for b, o, n in entry.spans(self.block_size)]

    def delete(self, key: str) -> bool:
        with self._lock:
            entry = self.index.pop(key, None)
            if entry is None:
                return False
            self._release(entry)
            return True

    def _release(self, entry: Entry) -> None:
        for b, _, _ in entry.spans(self.block_size):
            left = self.refs.get(b, 0) - 1
            if left <= 0:
                self.refs.pop(b, None)
                self.blocks.pop(b, None)
            else:
                self.refs[b] = left
