"""Shared blocks and holes, for the allocator (``_allocator``), which inherits them. Pure.

- Shared blocks (slice packing): a pool takes a free block only when no open
  block of its owner has room (an open block: one with at least ``MIN_ROOM`` of
  a block left after its ``offset``, whichever pool took it; at most
  ``OPEN_PER_FUNCTION`` per function of an owner, the fullest closing first, so
  a search is short). A slice goes to its pool's active block
  when it fits, else to the owner's open block nearest in lifetime (same pool
  key first, then the nearest longer-lived key, then shorter, the fullest block
  on a tie), else to a new block; a packed chunk likewise among the owner's open
  blocks on the function PlaceChunk probes. So a pool's remainder below a block
  rides in a block another pool already holds, instead of each lifetime pool
  keeping a part-filled block on every function (video at 1 MiB blocks held 1.9x
  its bytes). A block frees when every entry in it did, whichever pool carved
  them. Sharing is per owner (a run): runs never share a block.
- Holes: an entry freed while its block stays held leaves a *hole* (merged
  with its neighbours; one that reaches ``offset`` gives its bytes back to the
  block's rest). A slice or packed chunk that finds no room in an open block
  goes into the tightest hole that fits (a chunk: on its function) before it
  takes a free block: a block pinned by one long-lived entry no longer holds
  the dead bytes beside it (video's frames and filtered chunks at 1 MiB: the
  blocks held came to within 1% of the per-function bound in two traces of
  three, 1.09-1.28x before). ``holes=False`` (the oracle, which frees an object
  at its last read's lookup, before the reader has its bytes) never fills one.

An open block is kept in ``open`` and a holed one in ``holed`` (owner -> function -> block
index -> block), so a search looks at one owner's few blocks. Not covered: which pool takes a
block and from which function (``_allocator``, ``_alloc_order``), freeing whole blocks
(``_allocator``). The blocks and functions are the allocator's dataclasses (pickled in
snapshots under ``_allocator``'s name), seen here through the ``Block`` and ``Function``
protocols.
"""

from __future__ import annotations

import bisect
from typing import Generic, Hashable, Protocol, TypeVar

from ._alloc_order import Holder, affinity, base_key, shareable
from ._events import Extent

__all__ = ["MIN_ROOM", "OPEN_PER_FUNCTION", "Block", "Function", "SharedBlocks", "unindex"]

#: An open block offers its rest to other pools while at least this share of a block is left.
MIN_ROOM = 1 / 64
#: Open blocks kept per function of a run (the fullest closes first): bounds a search.
OPEN_PER_FUNCTION = 4


class Block(Protocol):
    """A block in use (``_allocator._Block``): what sharing and holes read and change."""

    function: str
    index: int
    owner: Hashable
    pool: Hashable
    offset: int                     # bytes handed out
    fragment: int                   # bytes of freed entries below ``offset``
    keys: set[Hashable]             # the pool keys of the entries carved in it
    holes: list[tuple[int, int]]    # freed spans below ``offset``, sorted, merged


class Function(Holder, Protocol):
    """A storage function (``_allocator._Function``): whether it was withdrawn."""

    retired: bool


_B = TypeVar("_B", bound=Block)
_F = TypeVar("_F", bound=Function)


class SharedBlocks(Generic[_B, _F]):
    """Open blocks and holes over the allocator's blocks ``_B`` of functions ``_F``."""

    # the allocator's (``Allocator.__init__``)
    block_size: int
    functions: dict[str, _F]
    used: dict[tuple[str, int], _B]
    open: dict[Hashable, dict[str, dict[int, _B]]]
    holed: dict[Hashable, dict[str, dict[int, _B]]]

    def _in(self, function: str) -> bool:
        """Whether ``function`` is a candidate of the allocation under way (the allocator's)."""
        raise NotImplementedError

    def _strict_admits(self, function: str) -> bool:
        """Whether the strict candidate filters admit ``function`` (the allocator's)."""
        raise NotImplementedError

    def _searched(self, index: dict[Hashable, dict[str, dict[int, _B]]], owner: Hashable, key: Hashable,
                  function: str | None) -> list[dict[int, _B]]:
        """The blocks of ``owner`` in ``index`` (``open`` or ``holed``) that a search for pool key
        ``key`` looks at: those on ``function``, or on every candidate function; none for a
        ``Solo`` key."""
        if not shareable(key):
            return []
        fns = index.get(owner)
        if not fns:
            return []
        return [fns.get(function, {})] if function is not None else [on for fn, on in fns.items() if self._in(fn)]

    # -- shared blocks ----------------------------------------------------------------
    def _reindex(self, b: _B) -> None:
        """Keep ``b`` among its owner's open blocks while it may be shared and has room worth
        offering (``MIN_ROOM`` of a block); at most ``OPEN_PER_FUNCTION`` per function of an
        owner, the one with the least room closing first, so a search stays short."""
        fns = self.open.get(b.owner)
        room = self.block_size - b.offset
        if room >= self.block_size * MIN_ROOM and shareable(b.pool) and (b.function, b.index) in self.used:
            if fns is None:
                fns = self.open[b.owner] = {}
            on = fns.setdefault(b.function, {})
            on[b.index] = b
            if len(on) > OPEN_PER_FUNCTION:
                del on[max(on, key=lambda i: on[i].offset)]
            return
        unindex(self.open, b)

    def _best_open(self, size: int, owner: Hashable, key: Hashable, function: str | None) -> _B | None:
        """The owner's open block (on ``function``, or anywhere) with ``size`` bytes of room
        that is nearest to ``key`` in lifetime; None for a ``Solo`` key or when none has room."""
        pools = self._searched(self.open, owner, key, function)
        best: _B | None = None
        best_rank: tuple[int, float, int] = (9, 0.0, 0)
        limit = self.block_size - size
        for on in pools:
            for b in on.values():
                if b.offset > limit or self.functions[b.function].retired or not self._strict_admits(b.function):
                    continue
                rank = (*affinity(b.keys, key), -b.offset)
                if best is None or rank < best_rank:
                    best, best_rank = b, rank
        return best

    # -- holes ----------------------------------------------------------------------
    def _best_hole(self, size: int, owner: Hashable, key: Hashable, function: str | None) -> _B | None:
        """The owner's held block (on ``function``, or anywhere) with a freed span of at least
        ``size`` bytes: the tightest fit, then the nearest in lifetime, then the fullest; None
        for a ``Solo`` key or when there is none. A block held for its other entries costs
        nothing more for filling its holes."""
        pools = self._searched(self.holed, owner, key, function)
        best: _B | None = None
        best_rank: tuple[int, int, float, int] = (0, 0, 0.0, 0)
        for on in pools:
            for b in on.values():
                if self.functions[b.function].retired or not self._strict_admits(b.function):
                    continue
                fit = min((e - s for s, e in b.holes if e - s >= size), default=None)
                if fit is None:
                    continue
                rank = (fit, *affinity(b.keys, key), -b.offset)
                if best is None or rank < best_rank:
                    best, best_rank = b, rank
        return best

    def _put_hole(self, b: _B, size: int, key: Hashable, chunk: int = 0) -> Extent:
        """``size`` bytes of pool key ``key`` at the start of ``b``'s tightest hole that fits."""
        i = min((j for j, (s, e) in enumerate(b.holes) if e - s >= size), key=lambda j: b.holes[j][1] - b.holes[j][0])
        start, end = b.holes[i]
        if end - start == size:
            del b.holes[i]
        else:
            b.holes[i] = (start + size, end)
        b.fragment -= size
        self._note_key(b, key)
        self._index_holes(b)
        return Extent(b.function, b.index, start, size, chunk)

    def _free_span(self, b: _B, start: int, end: int) -> None:
        """Bytes ``start..end`` of held block ``b`` were freed: a hole, merged with its
        neighbours; a hole that reaches ``offset`` gives its bytes back to the block's rest."""
        holes = b.holes
        i = bisect.bisect_left(holes, (start, end))
        if i < len(holes) and holes[i][0] == end:
            end = holes.pop(i)[1]
        if i > 0 and holes[i - 1][1] == start:
            start = holes.pop(i - 1)[0]
            i -= 1
        if end == b.offset:
            b.offset = start
            b.fragment -= end - start
            self._reindex(b)
        else:
            holes.insert(i, (start, end))
        self._index_holes(b)

    def _index_holes(self, b: _B) -> None:
        """Keep ``b`` among its owner's holed blocks while it is held, shareable and has a hole."""
        if b.holes and shareable(b.pool) and (b.function, b.index) in self.used:
            self.holed.setdefault(b.owner, {}).setdefault(b.function, {})[b.index] = b
            return
        unindex(self.holed, b)

    def _put_in(self, b: _B, size: int, key: Hashable, chunk: int = 0) -> Extent:
        """``size`` bytes of pool key ``key`` at ``b``'s offset (a block with room)."""
        ext = Extent(b.function, b.index, b.offset, size, chunk)
        b.offset += size
        self._note_key(b, key)
        self._reindex(b)
        return ext

    def _note_key(self, b: _B, key: Hashable) -> None:
        """Block ``b`` holds an entry of pool key ``key``: its function holds that lifetime group."""
        base = base_key(key)
        if base not in b.keys:
            b.keys.add(base)
            mine = self.functions[b.function].held.setdefault(b.owner, {})
            mine[base] = mine.get(base, 0) + 1


def unindex(index: dict[Hashable, dict[str, dict[int, _B]]], b: _B) -> None:
    """Take ``b`` out of an owner -> function -> block index, pruning the levels it empties."""
    fns = index.get(b.owner)
    if fns is None:
        return
    on = fns.get(b.function)
    if on is not None and on.pop(b.index, None) is not None and not on:
        del fns[b.function]
        if not fns:
            del index[b.owner]
