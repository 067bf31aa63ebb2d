"""Cache functions for GET bursts (SION Sec. 5.3.3 "Auto-scaling under GETs",
TestAndPlace of Fig. 5): when the function holding a chunk already has
``depth`` requests in flight (its queue is full) and the chunk itself is hot
(``depth`` GETs of it are in flight: a burst, not one client's windowed read
of a large object, whose chunks each have one GET out), the chunk's GET goes
to a *cache function* instead, which loads the chunk from its COS copy into its
demand cache (``runtime._demand``) and serves it, and serves the next GETs of
that chunk from memory. A burst of GETs of one hot object (a broadcast read by
64 tasks) thus spreads over up to ``1 + copies`` functions per chunk instead
of queuing behind one.

A version the workflow graph says many tasks read (a broadcast: its read count
from the PUT) need not wait for its burst to queue: ``provision`` opens the
copies its readers would open (``ceil(readers / depth) - 1``, at most
``copies``) as soon as its COS copy exists, and the daemon has them loaded
then, so the burst finds them in memory and their functions running.

Per chunk (key, version, stripe, index), at most ``copies`` cache functions;
a GET goes to the least busy one whose queue is not full, else to a new one
(the least busy function of the pool that holds no chunk of that stripe,
caching the fewest chunks, warm ones first), else to the least busy of all. A cache function that
failed a GET (evicted and COS failing, or gone) is dropped from the chunk's
list; a freed version's copies are deleted (``forget``).

``BurstRouter`` is pure policy (function indexes, loads in, a choice out);
it keeps one small lock because GETs route from many threads. The daemon's
``Collector`` asks it per chunk request; what the copies cost is in the
storage functions' own records (their COS GETs and billed time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["BurstConfig", "BurstRouter", "ChunkId"]

ChunkId = tuple[str, int, int, int]  # (key, version, stripe, index)


@dataclass(frozen=True, slots=True)
class BurstConfig:
    depth: int = 2  # requests in flight at which a function's queue counts as full
    copies: int = 4  # cache functions per chunk at most

    def __post_init__(self) -> None:
        if self.depth < 1 or self.copies < 0:
            raise ValueError(f"cache functions: depth must be >= 1 and copies >= 0, got {self}")


class BurstRouter:
    def __init__(self, config: BurstConfig | None = None) -> None:
        self.config = config or BurstConfig()
        self.copies: dict[ChunkId, list[int]] = {}  # chunk -> its cache functions, in the order added
        self.per_fn: dict[int, int] = {}  # cache function -> chunks it caches
        self.routed = 0  # GETs sent to a cache function
        self.opened = 0  # (chunk, cache function) pairs opened
        self.pending: dict[ChunkId, int] = {}  # GETs of a chunk in flight (routed here, not yet done)
        # GETs sent to each cache function and not yet done: a function's own queue shows a GET
        # only once it is issued, and a burst routes dozens before the first is (an invocation
        # starting holds the function's queue), so it would look idle to all of them
        self.inflight: dict[int, int] = {}
        self._lock = threading.Lock()

    def route(self, cid: ChunkId, primary: int, load: Callable[[int], int], holders: frozenset[int],
              pool: Iterable[int], warm: Callable[[int], bool] = lambda fn: True) -> int:
        """The function to ask for chunk ``cid`` held by ``primary``: ``load(fn)`` its requests
        in flight, ``holders`` the functions holding a chunk of the stripe (never a cache
        function for it), ``pool`` the functions that may become one. The GET counts as in
        flight for ``cid`` until :meth:`done`."""
        depth = self.config.depth
        with self._lock:
            hot = self.pending.get(cid, 0) >= depth
            self.pending[cid] = self.pending.get(cid, 0) + 1
        if self.config.copies == 0 or not hot or load(primary) < depth:
            return primary
        routed = self.inflight

        def busy(f: int) -> int:  # its queue, or the GETs routed to it, whichever is longer
            return max(load(f), routed.get(f, 0))

        with self._lock:
            mine = self.copies.get(cid, [])
            free = [fn for fn in mine if busy(fn) < depth]
            if free:
                fn = min(free, key=busy)
            elif len(mine) < self.config.copies:
                got = self._open_locked(cid, primary, 1, busy, holders, pool, warm)
                if not got:
                    return primary
                fn = got[0]
            else:
                fn = min([primary, *mine], key=busy)
                if fn == primary:
                    return primary
            self.routed += 1
            routed[fn] = routed.get(fn, 0) + 1
            return fn

    def provision(self, cid: ChunkId, primary: int, readers: int, load: Callable[[int], int],
                  holders: frozenset[int], pool: Iterable[int], warm: Callable[[int], bool] = lambda fn: True
                  ) -> list[int]:
        """Open copies of chunk ``cid`` (held by ``primary``) ahead of ``readers`` concurrent
        GETs: as many as the burst would open, each function serving ``depth`` at a time, at
        most ``copies``; chosen as :meth:`route` chooses a new one. The functions newly opened
        (the caller has them load the chunk)."""
        want = min(self.config.copies, -(-readers // self.config.depth) - 1)
        with self._lock:
            return self._open_locked(cid, primary, want - len(self.copies.get(cid, [])), load, holders, pool, warm)

    def _open_locked(self, cid: ChunkId, primary: int, n: int, busy: Callable[[int], int], holders: frozenset[int],
                     pool: Iterable[int], warm: Callable[[int], bool]) -> list[int]:
        """Open up to ``n`` new copies of ``cid``: the least busy functions of ``pool`` holding
        nothing of its stripe, caching the fewest chunks, warm ones first (under the lock)."""
        mine = self.copies.get(cid, [])
        taken = holders | set(mine) | {primary}
        cands = [fn for fn in pool if fn not in taken]
        out: list[int] = []
        while len(out) < n and cands:
            fn = min(cands, key=lambda f: (busy(f), self.per_fn.get(f, 0), not warm(f), f))
            cands.remove(fn)
            out.append(fn)
            self.per_fn[fn] = self.per_fn.get(fn, 0) + 1
            self.opened += 1
        if out:
            self.copies[cid] = mine + out
        return out

    def done(self, cid: ChunkId, fn: int | None = None) -> None:
        """A GET of ``cid`` that :meth:`route` placed has its reply (or failed); ``fn``: the
        cache function it was sent to, None when it went to the chunk's own function."""
        with self._lock:
            n = self.pending.get(cid, 0) - 1
            if n > 0:
                self.pending[cid] = n
            else:
                self.pending.pop(cid, None)
            if fn is not None:
                k = self.inflight.get(fn, 0) - 1
                if k > 0:
                    self.inflight[fn] = k
                else:
                    self.inflight.pop(fn, None)

    def is_copy(self, cid: ChunkId, fn: int) -> bool:
        with self._lock:
            return fn in self.copies.get(cid, ())

    def dropped(self, cid: ChunkId, fn: int) -> None:
        """Cache function ``fn`` failed a GET of ``cid``: route elsewhere from now on."""
        with self._lock:
            mine = self.copies.get(cid)
            if mine and fn in mine:
                mine.remove(fn)
                self._unload(fn)
                if not mine:
                    del self.copies[cid]

    def forget(self, key: str, version: int) -> dict[int, list[str]]:
        """A version was freed: its copies to delete, as function -> chunk keys."""
        from ._objects import chunk_key

        out: dict[int, list[str]] = {}
        with self._lock:
            for cid in [c for c in self.copies if c[0] == key and c[1] == version]:
                for fn in self.copies.pop(cid):
                    self._unload(fn)
                    out.setdefault(fn, []).append(chunk_key(key, version, cid[2], cid[3]))
        return out

    def _unload(self, fn: int) -> None:
        n = self.per_fn.get(fn, 0) - 1
        if n > 0:
            self.per_fn[fn] = n
        else:
            self.per_fn.pop(fn, None)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"cache_chunks": len(self.copies), "cache_copies": sum(len(v) for v in self.copies.values()),
                    "cache_routed": self.routed, "cache_opened": self.opened}
