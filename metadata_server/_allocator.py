"""Lifetime-aware allocation over the blocks of storage functions (FuncStore
III-C1, SION Fig. 5). Pure: takes sizes, names and pool keys; no clock, no I/O.

- Capacity arrives as fixed-size blocks (default 1 MiB) registered per storage
  function; functions are kept in registration order (oldest first). ``register`` *sets* a
  function's capacity (blocks ``0..blocks-1``): the same call again changes
  nothing, a larger one adds blocks, a smaller one withdraws the free blocks
  past the new end at once and the ones in use when they are freed.
- Function choice (``by_lifetime``, ``_alloc_order``): a new block of pool key ``k`` comes
  from the functions holding the owner's lifetime group ``k``, then longer-lived groups,
  then empty functions, then shorter-lived groups; a separate step over a candidate list,
  so filters (room, busy, one daemon's) compose with it.
- Slice allocator (object <= one block): one ``_Pool`` per key (the caller
  keys pools by owner and predicted lifetime). A pool has an active block,
  frozen blocks and takes free blocks from the functions. Each block has an
  ``offset`` (bytes handed out) and a ``fragment`` (bytes of expired slices);
  a slice is carved at ``offset``; when it does not fit, the active block is
  frozen and a free block becomes active; freeing a slice grows ``fragment``,
  and when ``fragment == offset`` the whole block is free again (active or
  frozen alike).
- Shared blocks and holes (``_alloc_shared``, which ``Allocator`` inherits): a slice or a
  packed chunk goes to its pool's active block, else to the owner's open block nearest in
  lifetime, else to the tightest hole of a held block, before it takes a free block.
  Sharing is per owner (a run): runs never share a block.
- ``Solo(name)`` keys (Pocket's and Jiffy's "one object per block", FuncStore
  Sec. V): the object's slice or each of its chunks takes blocks of its own,
  shared with nothing.
- Coded objects (object > one block): d+p erasure-coded chunks of
  ``chunk_bytes`` bytes each (the client's stripes' chunks end to end; by
  default ``ceil(size / d)``); chunk ``i`` probes functions ``i, i+n, i+2n,
  ...`` (n = d+p; SION's ``PlaceChunk``), in ``by_lifetime`` order, so no two
  chunks share a function and a coded object's chunks join their group's
  functions or empty ones. All-or-nothing.
  A chunk of at most one block is *packed* like a slice: carved from the
  active block of a per-function chunk pool keyed like the object's slice
  pool (``("chunks", key, function)``), so the chunks of objects with the
  same predicted lifetime share blocks and a block frees when its last chunk
  does (a 3.5 MiB object's 12 chunks of 369 KB took 12 whole 1 MiB blocks
  before: 2.7x its bytes); a chunk that does not fit the active block's rest
  runs on into the next block of that function when it is free (one entry
  over ``block, block+1``), so no tail is left empty. A larger chunk takes a
  *contiguous run* of whole blocks of one function (the storage runtime lays
  an entry over ``block, block+1, ...``, so stripe ``s`` of chunk ``i`` sits
  at the chunk's start plus the chunks of the stripes before it).

Daemons (a deployment of several storage daemons, each owning its functions:
``register(..., daemon=ID)``): ``allocate(..., daemon=ID)`` places the object on
that daemon's functions only: blocks are taken, open blocks and holes found, and
chunks probed among its functions alone, and slice pools are kept per daemon
(``_slice_pool``), so a pool's active block is always on the daemon being
placed on. Which daemon is ``_daemons``' choice; ``daemon=None`` (one daemon)
is the unscoped path as before.

The extents are where the bytes physically go: the SDK hands them to the
daemon with the PUT, and the daemon stores every chunk exactly there.

Grains (``grain``, the stack's ``memory_grain``): storage functions back a block
only where entries lie, page by page, so what they hold is the grains extents
lie on (``_grains.GrainCount``, kept per owner beside the placements);
placement, pools and capacity still go by whole blocks. Without a grain,
``allocated_bytes`` counts whole blocks.

Candidate filters (``add_filter``): small policies outside this module that say which
functions may take new data (``_busy``: functions the daemon reports busy; ``_buckets``: only
the GC window's newest bucket). Each is a ``CandidateFilter`` (``admits(function)``); the
probing above stays as it is and skips a function a filter refuses, as it skips a full one.
A *strict* filter refuses a function for slices and chunks alike (new blocks, open blocks,
holes); a *soft* one steers coded placement (when a chunk's stride has no function the soft
filters admit, the object is placed as if they were not there) and which function a slice
pool's new block comes from, but not the open blocks and holes slices share.

``allocate`` returns ``None`` when capacity is short; the caller decides
between scaling out and the COS tier. Not covered: which policy frees what
(``_policy``), budgets and accounting per run (``_state``).

Layout: the records (``Allocator``, ``_Block``, ``_Pool``, ``_Function``, ``Solo``) stay in
this module, since snapshots (``_snapshot``) pickle them under its name
(tests/unit/test_snapshot_names.py pins the names); the candidate order and pool keys are in
``_alloc_order`` and shared blocks and holes in ``_alloc_shared``, which see the records
through protocols.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Hashable, Literal

from ._alloc_order import (CandidateFilter, Unshared, affinity, base_key, by_lifetime, chunk_pool, run_start,
                           shareable)
from ._alloc_shared import MIN_ROOM, OPEN_PER_FUNCTION, SharedBlocks
from ._events import Extent, Placement
from ._grains import GrainCount

__all__ = ["Allocator", "CandidateFilter", "MAX_FUNCTION_BLOCKS", "MIB", "MIN_ROOM", "OPEN_PER_FUNCTION", "Solo",
           "by_lifetime"]

MIB = 1 << 20
#: The most blocks one storage function may offer (1 TiB at the default 1 MiB blocks);
#: bounds what one registration makes the allocator hold.
MAX_FUNCTION_BLOCKS = 1 << 20


@dataclass(frozen=True, slots=True)
class Solo(Unshared):
    """A pool key that shares no block: object ``name`` alone in its blocks (Pocket, Jiffy)."""

    name: str

@dataclass(slots=True)
class _Block:
    function: str
    index: int
    owner: Hashable
    pool: Hashable                 # the pool that took it (others may carve into it: ``keys``)
    state: Literal["active", "frozen"]
    offset: int = 0
    fragment: int = 0
    keys: set[Hashable] = field(default_factory=set)    # the pool keys of the entries carved in it
    holes: list[tuple[int, int]] = field(default_factory=list)   # freed spans below ``offset``, sorted, merged


@dataclass(frozen=True, slots=True)
class _Home:
    """Where one chunk goes on its function: ``in`` an open block, into a ``hole`` of a held
    block, ``on`` from an open block's tail into ``blocks`` free blocks from ``start``, or a
    ``fresh`` run of them."""

    how: Literal["in", "hole", "on", "fresh"]
    block: _Block | None
    start: int
    blocks: int


@dataclass(slots=True)
class _Pool:
    key: Hashable
    owner: Hashable
    active: _Block | None = None
    frozen: dict[tuple[str, int], _Block] = field(default_factory=dict)


@dataclass(slots=True)
class _Function:
    name: str
    blocks: int                     # capacity: blocks 0..blocks-1 (0 once retired)
    free: list[int]                 # free blocks below ``blocks``; the last is handed out first
    retired: bool = False
    used: int = 0                   # blocks in use, past ``blocks`` too (until they are freed)
    #: owner -> slice pool key -> how many of its blocks in use hold entries of that key
    held: dict[Hashable, dict[Hashable, int]] = field(default_factory=dict)


class Allocator(SharedBlocks[_Block, _Function]):
    """Blocks, pools and chunk placement for every run of the server."""

    #: the daemon an allocation is scoped to (None: every function), for one call
    _scope: str | None = None
    #: function -> the id of the daemon that owns it ("" for a deployment's only daemon); a
    #: class default so that a snapshot of an older server restores (one daemon)
    _daemon_of: dict[str, str] | None = None

    def __init__(self, block_size: int = MIB, data_chunks: int = 10, parity_chunks: int = 2,
                 grain: int = 0) -> None:
        if block_size <= 0 or data_chunks <= 0 or parity_chunks < 0:
            raise ValueError("block_size and data_chunks must be positive, parity_chunks >= 0")
        self.block_size = block_size
        #: the grains the storage functions back (``memory_grain``; None: whole blocks)
        self.grains = GrainCount(block_size, grain) if 0 < grain < block_size else None
        self.data_chunks = data_chunks
        self.parity_chunks = parity_chunks
        self.functions: dict[str, _Function] = {}
        self.pools: dict[tuple[Hashable, Hashable], _Pool] = {}
        self.used: dict[tuple[str, int], _Block] = {}
        self.owner_blocks: dict[Hashable, int] = {}
        #: owner -> function -> block index -> its open blocks (room left, shareable)
        self.open: dict[Hashable, dict[str, dict[int, _Block]]] = {}
        #: owner -> function -> block index -> its shareable blocks with a hole (a freed span)
        self.holed: dict[Hashable, dict[str, dict[int, _Block]]] = {}
        #: candidate filters, each with whether it is strict (``add_filter``)
        self.filters: list[tuple[CandidateFilter, bool]] = []

    # -- candidate filters ----------------------------------------------------------
    def add_filter(self, f: CandidateFilter, *, strict: bool) -> None:
        """Consult ``f`` for every function placement probes from now on (after the filters
        added before); ``strict``: for slices too, and never dropped for lack of room."""
        self.filters.append((f, strict))

    def admits(self, function: str, soft: bool = True) -> bool:
        """Whether the filters let ``function`` take new data (``soft``: the soft ones too)."""
        return all(f.admits(function) for f, strict in self.filters if strict or soft)

    def _strict_admits(self, function: str) -> bool:
        return all(f.admits(function) for f, strict in self.filters if strict)

    # -- capacity -------------------------------------------------------------------
    def register(self, function: str, blocks: int, daemon: str = "") -> int:
        """Set ``function``'s capacity to ``blocks`` blocks (idempotent); returns it.
        ``daemon``: the id of the daemon that owns it ("": the only one).

        A function registered again after ``unregister`` keeps its place in the
        probing order and the numbers of its blocks still in use."""
        if not 0 < blocks <= MAX_FUNCTION_BLOCKS:
            raise ValueError(f"blocks must be 1 to {MAX_FUNCTION_BLOCKS}, got {blocks}")
        owners = self._daemon_of
        if owners is None:
            owners = self._daemon_of = {}
        if daemon or function in owners:
            owners[function] = daemon
        f = self.functions.get(function)
        if f is None:
            self.functions[function] = _Function(function, blocks, list(range(blocks - 1, -1, -1)))
            return blocks
        if f.blocks == blocks and not f.retired:
            return blocks
        f.retired = False
        f.blocks = blocks
        f.free = [i for i in range(blocks - 1, -1, -1) if (function, i) not in self.used]
        return blocks

    def unregister(self, function: str) -> int:
        """Withdraw a function: its free blocks go at once, blocks in use when freed.
        Returns how many blocks are still in use."""
        f = self.functions.get(function)
        if f is None:
            return 0
        f.retired = True
        f.blocks = 0
        f.free.clear()
        if f.used == 0:
            del self.functions[function]
        return f.used

    def daemon_of(self, function: str) -> str:
        """The id of the daemon that owns ``function`` ("": the only one)."""
        return (self._daemon_of or {}).get(function, "")

    @property
    def daemons(self) -> frozenset[str]:
        """The ids of the daemons with functions in the pool ({""}: one daemon)."""
        if not self._daemon_of:         # one daemon (never named): no walk over the pool per put
            return frozenset({""})
        return frozenset(self.daemon_of(f.name) for f in self.functions.values() if not f.retired)

    def _in(self, function: str) -> bool:
        """Whether ``function`` is a candidate of the allocation under way (its daemon's)."""
        return self._scope is None or self.daemon_of(function) == self._scope

    def _scoped(self, daemon: str | None) -> _Scope:
        return _Scope(self, daemon)

    @property
    def total_blocks(self) -> int:
        return sum(len(f.free) + f.used for f in self.functions.values())

    @property
    def free_blocks(self) -> int:
        return sum(len(f.free) for f in self.functions.values())

    @property
    def allocated_bytes(self) -> int:
        """Memory the storage functions hold: the grains extents lie on, or whole blocks."""
        if self.grains is not None:
            return self.grains.total_bytes
        return len(self.used) * self.block_size

    def owner_bytes(self, owner: Hashable) -> int:
        """What ``owner``'s extents hold, as :attr:`allocated_bytes` counts it."""
        if self.grains is not None:
            return self.grains.owner_bytes(owner)
        return self.owner_blocks.get(owner, 0) * self.block_size

    # -- allocation -----------------------------------------------------------------
    def blocks_needed(self, size: int, chunk_bytes: int = 0) -> int:
        """Blocks an object of ``size`` bytes takes (0 for zero bytes)."""
        if size == 0:
            return 0
        if size <= self.block_size:
            return 1
        n = self.data_chunks + self.parity_chunks
        return n * -(-self.chunk_bytes(size, chunk_bytes) // self.block_size)

    def new_blocks(self, size: int, owner: Hashable, key: Hashable = 0, chunk_bytes: int = 0,
                   holes: bool = True, daemon: str | None = None) -> int:
        """Blocks ``allocate(size, owner, key, holes=holes, daemon=daemon)`` would take from the
        free pool now: 0 for a slice that fits an open block (its pool's or a shared one) or a
        hole, one per packed chunk that does not."""
        with self._scoped(daemon):
            return self._new_blocks(size, owner, key, chunk_bytes, holes)

    def placeable(self, size: int, owner: Hashable, key: Hashable = 0, chunk_bytes: int = 0,
                  holes: bool = True, daemon: str | None = None) -> bool:
        """Whether ``allocate`` with the same arguments would place the object now."""
        if size <= 0:
            return True
        with self._scoped(daemon):
            if size <= self.block_size:
                return (self._slice_home(size, owner, key) is not None
                        or (holes and self._best_hole(size, owner, key, None) is not None)
                        or any(f.free for f in self.functions.values() if self._in(f.name)))
            return self._chunk_plan(owner, key, self.chunk_bytes(size, chunk_bytes), holes) is not None

    def _new_blocks(self, size: int, owner: Hashable, key: Hashable, chunk_bytes: int, holes: bool) -> int:
        if 0 < size <= self.block_size:
            if self._slice_home(size, owner, key) is not None:
                return 0
            return 0 if holes and self._best_hole(size, owner, key, None) is not None else 1
        if size > self.block_size:
            plan = self._chunk_plan(owner, key, self.chunk_bytes(size, chunk_bytes), holes)
            if plan is not None:
                return sum(home.blocks for _, home in plan)
        return self.blocks_needed(size, chunk_bytes)

    def chunk_bytes(self, size: int, asked: int = 0) -> int:
        """Bytes per chunk of a coded object: ``asked`` (what the client's codec makes,
        headers included) when it is plausible, else ``ceil(size / d)``. A client may
        not claim more than twice the payload plus a few KiB per 8 MiB stripe."""
        base = -(-size // self.data_chunks)
        if asked <= 0:
            return base
        if not base <= asked <= 2 * base + 4096 * (1 + size // (8 << 20)):
            raise ValueError(f"chunk_bytes {asked} is implausible for a {size}-byte object "
                             f"in {self.data_chunks} data chunks")
        return asked

    def allocate(self, size: int, owner: Hashable, key: Hashable = 0, chunk_bytes: int = 0,
                 holes: bool = True, daemon: str | None = None) -> Placement | None:
        """Place an object of ``size`` bytes of ``owner`` in pool ``key``. ``holes``: it may go
        into the span of a freed entry in a block still held (False for a policy that frees an
        object before its reader has its bytes: the oracle frees at the read's lookup).
        ``daemon``: on that daemon's functions only (None: any function)."""
        with self._scoped(daemon):
            placed = self._allocate(size, owner, key, chunk_bytes, holes)
        if placed is not None and daemon and placed.tier == "memory":
            placed = replace(placed, daemon=daemon)
        return placed

    def _allocate(self, size: int, owner: Hashable, key: Hashable, chunk_bytes: int,
                  holes: bool) -> Placement | None:
        if size < 0:
            raise ValueError("size must be >= 0")
        if size == 0:
            return Placement("empty", "empty")
        if size <= self.block_size:
            home = self._slice_home(size, owner, key)
            if home is not None:
                ext: Extent | None = self._put_in(home, size, key)
            else:
                hole = self._best_hole(size, owner, key, None) if holes else None
                ext = self._carve(size, owner, key) if hole is None else self._put_hole(hole, size, key)
            placed = None if ext is None else Placement("memory", "slice", (ext,))
        else:
            placed = self._packed_chunks(owner, key, self.chunk_bytes(size, chunk_bytes), holes)
        if placed is not None and self.grains is not None:
            self.grains.add(owner, placed.extents)
        return placed

    def _take_block(self, owner: Hashable, pool: Hashable,
                    state: Literal["active", "frozen"], function: _Function | None = None,
                    index: int | None = None) -> _Block | None:
        if function is None:
            free = [f for f in self.functions.values() if f.free and self._in(f.name)]
            ranked = by_lifetime([f for f in free if self.admits(f.name)], owner, base_key(pool)) or by_lifetime(
                [f for f in free if self._strict_admits(f.name)], owner, base_key(pool))
            function = ranked[0] if ranked else None
            if function is None:
                return None
        if index is None:
            index = function.free.pop()
        else:
            function.free.remove(index)
        function.used += 1
        b = _Block(function.name, index, owner, pool, state)
        self.used[(function.name, index)] = b
        self.owner_blocks[owner] = self.owner_blocks.get(owner, 0) + 1
        self._reindex(b)
        return b

    def _slice_pool(self, key: Hashable) -> Hashable:
        """The pool slices of pool key ``key`` are carved from: ``key`` itself, or per daemon
        when the allocation is scoped to one (a pool's active block stays on that daemon)."""
        return key if self._scope is None else ("slices", key, self._scope)

    def _slice_home(self, size: int, owner: Hashable, key: Hashable) -> _Block | None:
        """Where a slice goes without a new block: its pool's active block, else a shared one."""
        pool = self.pools.get((owner, self._slice_pool(key)))
        if pool is not None and pool.active is not None and pool.active.offset + size <= self.block_size \
                and self._strict_admits(pool.active.function):
            return pool.active
        return self._best_open(size, owner, key, None)

    def _carve(self, size: int, owner: Hashable, key: Hashable, function: _Function | None = None) -> Extent | None:
        """``size`` bytes from the active block of pool ``(owner, key)``; when they do not
        fit, or a strict filter refuses its function (a degraded GC bucket's), the active
        block is frozen and a free block (of ``function`` when given) becomes active."""
        pk = self._slice_pool(key)
        pool = self.pools.get((owner, pk))
        b = pool.active if pool is not None else None
        if b is None or b.offset + size > self.block_size or not self._strict_admits(b.function):
            nb = self._take_block(owner, pk, "active", function)
            if nb is None:
                return None
            if pool is None:
                pool = self.pools[(owner, pk)] = _Pool(pk, owner)
            if b is not None:
                b.state = "frozen"
                pool.frozen[(b.function, b.index)] = b
            pool.active = b = nb
        return self._put_in(b, size, key)

    def _chunk_plan(self, owner: Hashable, key: Hashable, chunk: int,
                    holes: bool = True) -> list[tuple[_Function, _Home]] | None:
        """PlaceChunk: per chunk ``i`` the first function of ``i, i+n, ...`` that the filters
        admit and where it has a home (``_chunk_home``); None when a chunk finds none (a
        scale-out is needed). When the soft filters leave a chunk no function, they are
        dropped for this object (busy functions are slow, not full)."""
        plan = self._chunk_plan_with(owner, key, chunk, holes, soft=True)
        if plan is None and any(not strict for _, strict in self.filters):
            plan = self._chunk_plan_with(owner, key, chunk, holes, soft=False)
        return plan

    def _chunk_plan_with(self, owner: Hashable, key: Hashable, chunk: int, holes: bool,
                         soft: bool) -> list[tuple[_Function, _Home]] | None:
        n = self.data_chunks + self.parity_chunks
        fns = [f for f in self.functions.values() if not f.retired and self._in(f.name)]
        plan: list[tuple[_Function, _Home]] = []
        for i in range(n):
            for f in by_lifetime([f for f in fns[i::n] if not self.filters or self.admits(f.name, soft)], owner, key):
                home = self._chunk_home(owner, key, chunk, f, holes)
                if home is not None:
                    plan.append((f, home))
                    break
            else:
                return None
        return plan

    def _chunk_home(self, owner: Hashable, key: Hashable, chunk: int, f: _Function,
                    holes: bool = True) -> _Home | None:
        """Where a chunk of pool ``key`` goes on ``f``: into an open block with room (its
        chunk pool's active block first, else the nearest shared one), else into the tightest
        hole of a held block of ``f`` (when ``holes``), else from an open block's tail on into
        the next ``k`` blocks when they are free (its pool's active block first), else a fresh
        run of free blocks; None when ``f`` has no room."""
        bs = self.block_size
        pool = self.pools.get((owner, chunk_pool(key, f.name)))
        own = pool.active if pool is not None else None
        if chunk <= bs:
            if own is not None and own.offset + chunk <= bs:
                return _Home("in", own, own.index, 0)
            shared = self._best_open(chunk, owner, key, f.name)
            if shared is not None:
                return _Home("in", shared, shared.index, 0)
            hole = self._best_hole(chunk, owner, key, f.name) if holes else None
            if hole is not None:
                return _Home("hole", hole, hole.index, 0)
        if shareable(key):
            tails = [own] if own is not None and own.offset < bs else []
            tails += sorted((b for b in self.open.get(owner, {}).get(f.name, {}).values() if b is not own),
                            key=lambda b: (*affinity(b.keys, key), -b.offset))
            for b in tails:
                k = -(-(chunk - (bs - b.offset)) // bs)
                if all(b.index + j in f.free for j in range(1, k + 1)):
                    return _Home("on", b, b.index + 1, k)
        k = -(-chunk // bs)
        start = run_start(f.free, k)
        return None if start is None else _Home("fresh", None, start, k)

    def _packed_chunks(self, owner: Hashable, key: Hashable, chunk: int, holes: bool = True) -> Placement | None:
        plan = self._chunk_plan(owner, key, chunk, holes)
        if plan is None:
            return None
        extents: list[Extent] = []
        for i, (f, home) in enumerate(plan):
            extents += self._lay_chunk(owner, key, chunk, i, f, home)
        return Placement("memory", "blocks", tuple(extents), self.data_chunks, self.parity_chunks, chunk)

    def _lay_chunk(self, owner: Hashable, key: Hashable, chunk: int, i: int, f: _Function,
                   home: _Home) -> list[Extent]:
        """Chunk ``i`` at its home: one extent per block it touches, one run on ``f``; the
        last new block becomes its chunk pool's active block (open while it has room)."""
        if home.how == "in":
            assert home.block is not None
            return [self._put_in(home.block, chunk, key, i)]
        if home.how == "hole":
            assert home.block is not None
            return [self._put_hole(home.block, chunk, key, i)]
        left = chunk
        extents: list[Extent] = []
        if home.block is not None:               # the tail of an open block first
            head = self.block_size - home.block.offset
            extents.append(self._put_in(home.block, head, key, i))
            left -= head
        pk = chunk_pool(key, f.name)
        pool = self.pools.get((owner, pk))
        if pool is None:
            pool = self.pools[(owner, pk)] = _Pool(pk, owner)
        for j in range(home.blocks):
            nb = self._take_block(owner, pk, "frozen", f, home.start + j)
            assert nb is not None
            take = min(left, self.block_size)
            extents.append(self._put_in(nb, take, key, i))
            left -= take
            if j < home.blocks - 1:
                pool.frozen[(nb.function, nb.index)] = nb
                continue
            if pool.active is not None:
                pool.active.state = "frozen"
                pool.frozen[(pool.active.function, pool.active.index)] = pool.active
            nb.state, pool.active = "active", nb
        assert left == 0
        return extents

    # -- freeing --------------------------------------------------------------------
    def free(self, placement: Placement) -> list[str]:
        """Return an object's memory. Returns the storage functions left with no
        block in use (candidates to leave the memory pool)."""
        if placement.kind not in ("slice", "blocks"):
            return []
        if self.grains is not None and placement.extents:
            e = placement.extents[0]
            self.grains.remove(self.used[(e.function, e.block)].owner, placement.extents)
        idle: list[str] = []
        for e in placement.extents:
            b = self.used[(e.function, e.block)]
            b.fragment += e.length
            if b.fragment == b.offset:
                idle += self._release(b)
            else:
                self._free_span(b, e.offset, e.offset + e.length)
        return idle

    def _release(self, b: _Block) -> list[str]:
        del self.used[(b.function, b.index)]
        self._reindex(b)
        self._index_holes(b)
        self.owner_blocks[b.owner] -= 1
        if not self.owner_blocks[b.owner]:
            del self.owner_blocks[b.owner]
        pool = self.pools[(b.owner, b.pool)]
        if pool.active is b:
            pool.active = None
        else:
            del pool.frozen[(b.function, b.index)]
        if pool.active is None and not pool.frozen:
            del self.pools[(b.owner, b.pool)]
        f = self.functions[b.function]
        f.used -= 1
        mine = f.held.get(b.owner, {})
        for k in b.keys:
            mine[k] -= 1
            if not mine[k]:
                del mine[k]
        if not mine:
            f.held.pop(b.owner, None)
        if f.retired:
            if f.used == 0:
                del self.functions[b.function]
            return []
        if b.index < f.blocks:          # past a lowered capacity the block is withdrawn
            f.free.append(b.index)
        return [f.name] if f.used == 0 else []

    # -- checks ---------------------------------------------------------------------
    def validate(self) -> None:
        for (fn, idx), b in self.used.items():
            assert 0 <= b.fragment <= b.offset <= self.block_size, b
            assert b.fragment < b.offset, f"block {fn}/{idx} fully expired but not released"
            assert b.fragment == sum(e - s for s, e in b.holes), f"block {fn}/{idx}: freed bytes not in holes"
            assert all(0 <= s < e < b.offset for s, e in b.holes), f"block {fn}/{idx}: a hole past its offset"
            assert all(x[1] < y[0] for x, y in zip(b.holes, b.holes[1:])), f"block {fn}/{idx}: holes not merged"
            assert (self.holed.get(b.owner, {}).get(fn, {}).get(idx) is b) == bool(b.holes and shareable(b.pool))
            f = self.functions[fn]
            assert idx not in f.free, f"block {fn}/{idx} both used and free"
            pool = self.pools[(b.owner, b.pool)]
            assert pool.active is b or pool.frozen.get((fn, idx)) is b
        for f in self.functions.values():
            assert f.used == sum(1 for (fn, _) in self.used if fn == f.name)
            held: dict[Hashable, dict[Hashable, int]] = {}
            for (fn, _), b in self.used.items():
                if fn == f.name:
                    for k in b.keys:
                        held.setdefault(b.owner, {})[k] = held.get(b.owner, {}).get(k, 0) + 1
            assert f.held == held, f"{f.name}: lifetime groups held {f.held}, blocks say {held}"
            assert len(set(f.free)) == len(f.free)
            assert all(0 <= i < f.blocks for i in f.free), f"{f.name}: a free block past its capacity"
            below = sum(1 for (fn, i) in self.used if fn == f.name and i < f.blocks)
            assert len(f.free) + below == f.blocks, f"{f.name}: {f.blocks} blocks, {len(f.free)} free, {below} used"
            assert not f.retired or (f.blocks == 0 and f.used > 0)
        assert sum(self.owner_blocks.values()) == len(self.used)
        for owner, fns in self.holed.items():
            for fn, on in fns.items():
                assert on and all(self.used.get((fn, i)) is b and b.holes for i, b in on.items()), (owner, fn)
        for owner, fns in self.open.items():
            for fn, on in fns.items():
                assert on, f"{owner}/{fn}: an empty open index"
                assert len(on) <= OPEN_PER_FUNCTION, f"{owner}/{fn}: {len(on)} open blocks"
                for idx, b in on.items():
                    assert self.used.get((fn, idx)) is b and b.owner == owner, b
                    assert self.block_size - b.offset >= self.block_size * MIN_ROOM and shareable(b.pool), b


class _Scope:
    """``with allocator._scoped(daemon):`` one allocation on ``daemon``'s functions only."""

    __slots__ = ("allocator", "daemon", "before")

    def __init__(self, allocator: Allocator, daemon: str | None) -> None:
        self.allocator, self.daemon = allocator, daemon
        self.before: str | None = None

    def __enter__(self) -> None:
        self.before, self.allocator._scope = self.allocator._scope, self.daemon or None

    def __exit__(self, *exc: object) -> None:
        self.allocator._scope = self.before
