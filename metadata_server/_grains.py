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


class _Grains:
    """One function's grains in constant time per extent: extents never overlap, so the
    grains strictly inside one are its own (``interior``) and only its first and last can
    be shared (``edges``, reference-counted). The storage side counts the same way
    (``storage_functions/runtime/_grains.py``; the packages share no code)."""

    __slots__ = ("edges", "interior")

    def __init__(self) -> None:
        self.edges: dict[int, int] = {}
        self.interior = 0

    def __len__(self) -> int:
        return self.interior + len(self.edges)

    def add(self, a: int, b: int) -> int:
        """Grains ``a..b`` taken by an extent; returns how many became held."""
        new = int(self._edge(a, 1) == 1)
        if b > a:
            new += self._edge(b, 1) == 1
            self.interior += b - a - 1
            new += b - a - 1
        return new

    def remove(self, a: int, b: int) -> int:
        """Returns how many grains are no longer held."""
        gone = int(self._edge(a, -1) == 0)
        if b > a:
            gone += self._edge(b, -1) == 0
            self.interior -= b - a - 1
            gone += b - a - 1
        return gone

    def _edge(self, u: int, by: int) -> int:
        n = self.edges.get(u, 0) + by
        if n:
            self.edges[u] = n
        else:
            del self.edges[u]
        return n


class GrainCount:
    """Extents in and out, grains held per owner and in all."""

    def __init__(self, block_size: int, grain: int) -> None:
        if grain <= 0 or grain > block_size or block_size % grain:
            raise ValueError(f"memory grain {grain} must divide the block size {block_size}")
        self.block_size = block_size
        self.grain = grain
        self.functions: dict[str, _Grains] = {}
        self.owners: dict[Hashable, int] = {}  # owner -> grains held
        self.total = 0

    def add(self, owner: Hashable, extents: Iterable[Extent]) -> None:
        held = 0
        for e in extents:
            r = grain_units(e.block, e.offset, e.length, self.block_size, self.grain)
            if r:
                f = self.functions.get(e.function)
                if f is None:
                    f = self.functions[e.function] = _Grains()
                held += f.add(r[0], r[-1])
        if held:
            self.owners[owner] = self.owners.get(owner, 0) + held
            self.total += held

    def remove(self, owner: Hashable, extents: Iterable[Extent]) -> None:
        gone = 0
        for e in extents:
            r = grain_units(e.block, e.offset, e.length, self.block_size, self.grain)
            if r:
                f = self.functions[e.function]
                gone += f.remove(r[0], r[-1])
                if not len(f):
                    del self.functions[e.function]
        if gone:
            self.total -= gone
            left = self.owners[owner] - gone
            if left:
                self.owners[owner] = left
            else:
                del self.owners[owner]

    def shape(self) -> dict[str, tuple[dict[int, int], int]]:
        """Per function, its shared grains and inner count (``validate_state`` compares)."""
        return {fn: (dict(f.edges), f.interior) for fn, f in self.functions.items() if len(f)}

    def owner_bytes(self, owner: Hashable) -> int:
        return self.owners.get(owner, 0) * self.grain

    @property
    def total_bytes(self) -> int:
        return self.total * self.grain
