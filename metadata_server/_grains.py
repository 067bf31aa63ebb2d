"""The grains of function memory an owner's extents lie on: the model of what the
storage functions hold when they back their blocks grain by grain (``memory_grain``,
``storage_functions/runtime/_memory.py``), so that the allocator's figures are the
physical ones. Pure bookkeeping over extents; no placement, no I/O.

An extent of ``length`` bytes at ``(block, offset)`` continues at offset 0 of the
next blocks, so it is one run of bytes over a function's blocks end to end; the
grains it covers are those of that run. A grain counts while any extent lies on it.
Owners never share a block, so neither do they share a grain.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from ._events import Extent

__all__ = ["GrainCount", "grain_units"]


def grain_units(block: int, offset: int, length: int, block_size: int, grain: int) -> range:
    """The grains an extent lies on, numbered over its function's blocks end to end."""
    if length <= 0:
        return range(0)
    start = block * block_size + offset
    return range(start // grain, (start + length - 1) // grain + 1)


class GrainCount:
    """Extents in and out, grains held per owner and in all."""

    def __init__(self, block_size: int, grain: int) -> None:
        if grain <= 0 or grain > block_size or block_size % grain:
            raise ValueError(f"memory grain {grain} must divide the block size {block_size}")
        self.block_size = block_size
        self.grain = grain
        self.refs: dict[tuple[str, int], int] = {}  # (function, grain) -> extents on it
        self.owners: dict[Hashable, int] = {}  # owner -> grains held

    def add(self, owner: Hashable, extents: Iterable[Extent]) -> None:
        refs, held = self.refs, 0
        for e in extents:
            for u in grain_units(e.block, e.offset, e.length, self.block_size, self.grain):
                k = (e.function, u)
                n = refs.get(k, 0)
                refs[k] = n + 1
                held += not n
        if held:
            self.owners[owner] = self.owners.get(owner, 0) + held

    def remove(self, owner: Hashable, extents: Iterable[Extent]) -> None:
        refs, gone = self.refs, 0
        for e in extents:
            for u in grain_units(e.block, e.offset, e.length, self.block_size, self.grain):
                k = (e.function, u)
                n = refs[k] - 1
                if n:
                    refs[k] = n
                else:
                    del refs[k]
                    gone += 1
        if gone:
            left = self.owners[owner] - gone
            if left:
                self.owners[owner] = left
            else:
                del self.owners[owner]

    def owner_bytes(self, owner: Hashable) -> int:
        return self.owners.get(owner, 0) * self.grain

    @property
    def total_bytes(self) -> int:
        return len(self.refs) * self.grain
