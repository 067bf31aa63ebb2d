"""Pool keys and the order candidates are tried in, for the allocator (``_allocator``). Pure.

- Function choice (``by_lifetime``, FuncStore III-C, SION's GC buckets): a new block of
  pool key ``k`` comes from the functions holding the owner's group ``k``, then from those
  holding a longer-lived group (nearest first), then from empty ones, then from those
  holding only shorter-lived groups (nearest first), each tier in registration order;
  ``Solo`` keys keep registration order. So a function holding short-lived data is not
  given a longer-lived block while an empty one has room: each lifetime group fills
  functions of its own, and a function empties, and leaves the pool, when its group dies
  (before, every pool took the oldest function with room, so each function ended up
  holding some long-lived block). A block on a function holding longer-lived data costs
  no function time (it is held anyway) where an empty function would be held for the
  block's whole life: on the feature pipeline's traces taking empty functions first held
  12-39% more function-seconds than one pool, this order 1-5% fewer. Each function counts the groups its blocks
  hold (``_Function.held``: the keys of the entries carved in them). The ordering is a
  separate step over a candidate list: filters (room, busy, one daemon's) compose with it.
- Which block an entry fits best (``affinity``): one holding its key, then a longer-lived
  one, then a shorter-lived one, nearest first.
- Pool keys: an ``Unshared`` key (``_allocator.Solo``) shares no block (``shareable``); the
  pools the allocator keys by more than a slice pool key (a function's chunk pool,
  ``chunk_pool``; a daemon's slice pool) stand for their slice pool key (``base_key``).
- ``CandidateFilter``: the interface of the policies that say which functions may take new
  data (``_busy``, ``_buckets``).

Not covered: the blocks, pools and placement themselves (``_allocator``), shared blocks and
holes (``_alloc_shared``). ``Solo`` stays in ``_allocator``: snapshots pickle it by that name.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Hashable, Protocol, TypeVar

__all__ = ["CandidateFilter", "Holder", "Unshared", "affinity", "base_key", "by_lifetime", "chunk_pool",
           "run_start", "shareable"]


class CandidateFilter(Protocol):
    """Which storage functions may take new data now (a policy of its own: busy functions,
    GC buckets, one daemon's functions)."""

    def admits(self, function: str) -> bool: ...


class Holder(Protocol):
    """What the order reads of a storage function (``_allocator._Function``)."""

    #: owner -> slice pool key -> how many of its blocks in use hold entries of that key
    held: dict[Hashable, dict[Hashable, int]]
    #: blocks in use
    used: int


_H = TypeVar("_H", bound=Holder)


class Unshared:
    """The base of a pool key whose blocks no other pool shares (``_allocator.Solo``)."""

    __slots__ = ()


def by_lifetime(functions: Iterable[_H], owner: Hashable, key: Hashable) -> list[_H]:
    """The candidate ``functions`` for a new block of ``owner``'s pool key ``key``, best first
    (FuncStore III-C, SION's GC buckets: a lifetime group fills functions of its own, so a
    function empties, and leaves the pool, when its group dies): the functions already
    holding that group, then those holding a longer-lived one of the owner (nearest first: a
    block there keeps no function longer than it stays anyway), then empty ones, then those
    holding only shorter-lived groups (nearest first: a block there keeps them longer),
    each tier in registration order. A ``Solo`` key keeps registration order. Only orders:
    the caller filters (room, retired, busy, one daemon's) before or after."""
    fns = list(functions)
    if not shareable(key):
        return fns
    return sorted(fns, key=lambda f: _function_rank(f, owner, key))


def _function_rank(f: Holder, owner: Hashable, key: Hashable) -> tuple[int, int, float]:
    """0: ``f`` holds ``owner``'s group ``key`` or a longer-lived one (a block there keeps it
    no longer), by ``affinity``; 1: ``f`` is empty; 2: the rest, by ``affinity``."""
    mine = f.held.get(owner, {})
    near = affinity(mine, key)
    if mine and near[0] <= 1:
        return (0, *near)
    if f.used == 0:
        return (1, 0, 0.0)
    return (2, *near)


def shareable(pool: Hashable) -> bool:
    """A pool whose blocks other pools of the owner may fill (any but a ``Solo`` object's)."""
    return not isinstance(base_key(pool), Unshared)


def base_key(pool: Hashable) -> Hashable:
    """The slice pool key a pool stands for (a chunk pool's key without its function, a
    daemon's slice pool's without its daemon)."""
    if isinstance(pool, tuple) and len(pool) == 3 and pool[0] in ("chunks", "slices"):
        base: Hashable = pool[1]
        return base
    return pool


def affinity(have: Collection[Hashable], want: Hashable) -> tuple[int, float]:
    """How well an entry of pool key ``want`` fits a block holding entries of the keys
    ``have`` (lower is better): a block with that key, then one with a longer-lived key
    (numbers: lifetime buckets and expiry windows grow with the time objects stay),
    nearest first, then one with only shorter-lived keys, nearest first."""
    if want in have:
        return (0, 0.0)
    if isinstance(want, int):
        nums = [k for k in have if isinstance(k, int)]
        longer = [k - want for k in nums if k > want]
        if longer:
            return (1, float(min(longer)))
        if nums:
            return (2, float(want - max(nums)))
    return (3, 0.0)


def chunk_pool(key: Hashable, function: str) -> Hashable:
    """The pool packing the chunks of slice pool ``key`` on ``function``."""
    return ("chunks", key, function)


def run_start(free: list[int], k: int) -> int | None:
    """The lowest block starting ``k`` consecutive free blocks, or None."""
    if len(free) < k:
        return None
    if k == 1:
        return min(free)
    run, start, prev = 0, 0, -2
    for b in sorted(free):
        if b == prev + 1:
            run += 1
        else:
            run, start = 1, b
        if run == k:
            return start
        prev = b
    return None
