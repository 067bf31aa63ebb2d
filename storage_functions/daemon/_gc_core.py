"""The GC window (``_gc``) joined to the daemon's store core (``_state``): what a GC
round, a function emptied by frees and a compaction round mean for the object
table, the placement allocator and the ledger. Pure like the core: it runs
inside ``StoreState.handle`` under the daemon's lock and returns instructions.

- Functions join the newest bucket when they begin to hold chunks (a degraded one
  given a new chunk by the metadata server's allocator is active again); a function
  of an older bucket that holds none any more is retired at once (``Retire``,
  reason ``empty``) and sealed in the allocator until a scale-out reuses its
  whole group.
- A bucket degraded by the window is sealed for good (``PlaceChunk.hold``) and
  warmed at the degraded rate; a released bucket's chunks lose their places
  (the functions delete them: ``Release``; GETs read them from COS) and its
  functions are retired (reason ``window``).
- Compaction moves marked chunks (read on a degraded function) of versions
  the daemon placed and COS holds: a new place in the newest bucket is
  reserved (``Migrate``: the function loads the chunk from COS); once it
  landed (``Migrated``) the old place goes. Versions the metadata server
  placed move where it says (one placement authority): a read of one on a
  degraded function makes it allocate the chunks a new home in the newest
  bucket, take those extents and free the old ones; its ``move`` instruction
  comes here as ``Move``: the new places are reserved and loaded from COS
  (``Migrate``, once the version is uploaded), the old copy serves GETs until
  the new one landed (``Migrated``), then goes; one that lands after the window
  released the old function takes its place all the same.
- On-demand migration: a GET that finds a chunk of a daemon-placed version
  without a place (its function was released) has it loaded from COS into the
  newest bucket by the next rounds, as compaction does.
"""

from __future__ import annotations

import random
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Protocol

from ._gc import GcRelease, GcSeal, GcWindow
from ._manifest import parse_chunk_key
from ._objects import ObjectVersion, chunk_key
from ._placement import PoolExhausted
from ._placement import BadPlacement
from ._store_events import Instruction, Migrate, Migrated, Move, Place, Release, Retire, Tick, Warm

if TYPE_CHECKING:
    from ._ledger import MemoryLedger
    from ._objects import ObjectTable
    from ._placement import PlaceChunk

__all__ = ["GcCore", "GcState", "ChunkId"]

ChunkId = tuple[str, int, int, int]  # (key, version, stripe, index)


class GcState(Protocol):
    """What the GC core uses of the store core (``_state.StoreState``, whose part it is):
    the placement allocator, the version table, the ledger, the chunks waiting for
    recovery (``missing``: a released function's are dropped), the chunks placed per
    function, and moving a chunk's place (``_unplace``, ``_count``)."""

    @property
    def placement(self) -> PlaceChunk: ...

    @property
    def table(self) -> ObjectTable: ...

    @property
    def ledger(self) -> MemoryLedger: ...

    @property
    def missing(self) -> MutableMapping[ChunkId, Place]: ...

    def name(self, fn: int) -> str: ...

    def chunks(self, fn: int) -> int: ...

    def live(self, obj: ObjectVersion) -> bool: ...

    def _count(self, fn: int, k: int) -> None: ...

    def _unplace(self, now: float, obj: ObjectVersion, s: int, i: int) -> tuple[int, str] | None: ...


class GcCore:
    def __init__(self, state: GcState, window: GcWindow, rng: random.Random) -> None:
        self.state = state
        self.window = window
        self.rng = rng
        self.emptied: set[int] = set()  # functions whose chunk count dropped to 0 in this event
        # chunk -> (version, stripe, index, old place, new place) while its new copy loads
        self.migrating: dict[ChunkId, tuple[ObjectVersion, int, int, Place | None, Place]] = {}
        # chunks GETs found without a place (their function was released): loaded from COS
        # into the newest bucket by the next compaction rounds (SION's on-demand migration)
        self.restore: set[ChunkId] = set()
        # metadata-server moves reserved but not loaded yet: their version is not in COS yet
        self.waiting: set[ChunkId] = set()
        self.moved = 0  # chunks the metadata server moved that landed
        self.retired = 0
        self.migrations = 0

    # -- hooks of the core ---------------------------------------------------------
    def counted(self, fn: int, n: int, k: int) -> None:
        """Function ``fn`` holds ``n`` chunks now (``k`` more than before). A degraded function
        that is given a chunk (the metadata server allocates where it sees room) is active
        again, in the newest bucket: fresh data never leaves with a cold bucket."""
        if n:
            if k > 0:  # a chunk taken away (the window releasing the function) joins no bucket
                if self.window.degraded(fn):
                    self.window.left(fn)
                self.window.joined(fn)
            self.emptied.discard(fn)
        else:
            self.emptied.add(fn)

    def open_functions(self) -> list[int]:
        """The functions that still take new data: not sealed and below the HARDCAP (the
        metadata server's reservations never seal a slot); with ``seal_held`` (the metadata
        server's placement) only those that hold no chunk, so what a bucket's functions hold
        ages with it and new data goes to the next bucket's functions."""
        p = self.state.placement
        fns = [fn for fn in p.open_functions() if p.used(fn) < p.hardcap]
        if self.window.config.seal_held:
            fns = [fn for fn in fns if not self.state.chunks(fn)]
        return fns

    def retire_emptied(self) -> list[Instruction]:
        """Functions of older buckets that hold nothing any more leave at once."""
        out: list[Instruction] = []
        busy = {m[4][0] for m in self.migrating.values()}
        for fn in sorted(self.emptied):
            if self.state.chunks(fn) or fn in busy:
                continue
            for ins in self.window.emptied(fn):
                assert isinstance(ins, GcRelease)
                self.state.placement.retire(ins.functions)
                out.extend(Retire(f, ins.reason) for f in ins.functions)
                self.retired += len(ins.functions)
        self.emptied.clear()
        return out

    def forget(self, obj: ObjectVersion, per_fn: dict[int, list[str]]) -> None:
        """``obj`` is being freed: its marks go, its moves in flight give their new places back
        (a copy that lands later is deleted then)."""
        for s, st in enumerate(obj.stripes):
            for i in range(st.n):
                cid = (obj.key, obj.version, s, i)
                self.window.unmark(cid)
                self.restore.discard(cid)
                self.waiting.discard(cid)
                m = self.migrating.pop(cid, None)
                if m is not None:
                    fn, block, off = m[4]
                    self.state.placement.free(fn, block, off, st.cl)

    def target_lost(self, fn: int) -> None:
        """Function ``fn``'s memory is gone: moves into it are void (its allocator was reset;
        a copy reported later is deleted again)."""
        for cid in [c for c, m in self.migrating.items() if m[4][0] == fn]:
            del self.migrating[cid]
            self.waiting.discard(cid)

    def lost(self, fn: int) -> list[Instruction] | None:
        """Function ``fn``'s instance was lost and its chunks unplaced: a degraded function
        leaves the memory space instead of being recovered (SION Sec. 5.3: its data is cold
        and in COS); so does a function the window released already (its chunks left memory on
        purpose: recovering them from its log would bring a released bucket's cold data back
        into the newest bucket); None for any other function (recovery goes ahead)."""
        st = self.state
        if fn in self.window.released:
            for k in [k for k, pl in st.missing.items() if pl[0] == fn]:
                del st.missing[k]
            return []
        if not self.window.degraded(fn):
            return None
        for k in [k for k, pl in st.missing.items() if pl[0] == fn]:
            del st.missing[k]
        self.window.release(fn)
        st.placement.retire((fn,))
        self.retired += 1
        return [Retire(fn, "lost")]

    # -- events ----------------------------------------------------------------------
    def tick(self, ev: Tick) -> list[Instruction]:
        st, w = self.state, self.window
        for fn, ckey in ev.reads:
            cid = parse_chunk_key(ckey)
            if cid is not None and fn < 0:
                self.restore.add(cid)
                continue
            if cid is None or not w.degraded(fn):
                continue
            obj = st.table.latest(cid[0], cid[1])
            if obj is None or obj.alloc is None:  # the metadata server moves what it placed (``Move``)
                w.read(cid, fn)
        out: list[Instruction] = []
        for ins in w.step(ev.now, self.open_functions()):
            if isinstance(ins, GcSeal):
                st.placement.hold(ins.functions)
            else:
                out += self._release(ev.now, ins.functions, ins.reason)
        out += self._compact()
        out += self._loads_due()
        out += [Warm(fn) for fn, last in ev.sleeping
                if st.chunks(fn) > 0 and ev.now - last >= w.warm_interval(fn)]
        return out

    def migrated(self, ev: Migrated) -> list[Instruction]:
        st = self.state
        obj, s, i = ev.obj, ev.stripe, ev.index
        ckey = chunk_key(obj.key, obj.version, s, i)
        m = self.migrating.get((obj.key, obj.version, s, i))
        if m is None or m[4] != ev.place:  # freed meanwhile: its new place went back already
            return [Release(ev.place[0], (ckey,))] if ev.ok else []
        del self.migrating[(obj.key, obj.version, s, i)]
        _, _, _, old, new = m
        stripe = obj.stripes[s]
        cur = stripe.places[i]
        # a metadata server's move lands also where the window released the old place meanwhile
        if ev.ok and st.live(obj) and (cur == old or (obj.alloc is not None and cur is None)) and (
                cur is not None or (obj.key, obj.version, s, i) not in st.missing):
            st._unplace(ev.now, obj, s, i)
            stripe.places[i] = new
            st._count(new[0], +1)
            st.ledger.stored(ev.now, st.name(new[0]), ckey, new[1], new[2], stripe.cl)
            self.migrations += 1
            if obj.alloc is not None:
                self.moved += 1
            return [Release(cur[0], (ckey,))] if cur is not None else []
        st.placement.free(new[0], new[1], new[2], stripe.cl)
        return [Release(new[0], (ckey,))] if ev.ok else []

    def move(self, ev: Move) -> list[Instruction]:
        """The metadata server moved chunks of ``ev.key`` it placed: each stripe's chunk goes to
        its new place (reserved here; a move of the same chunk still in flight is void: its copy
        is deleted when it lands), loaded from COS once the version is there. Idempotent: a
        chunk already at (or moving to) its new place, or a version gone, changes nothing."""
        st = self.state
        obj = next((o for o in reversed(st.table.versions(ev.key)) if o.state == "ready" and o.alloc is not None), None)
        if obj is None:
            return []
        alloc = list(obj.alloc or [])
        bs = st.placement.block_size
        out: list[Instruction] = []
        for chunk, fn, block, off, length in ev.moves:
            if not 0 <= chunk < len(alloc) or any(chunk >= stripe.n for stripe in obj.stripes):
                continue
            start = off
            for s, stripe in enumerate(obj.stripes):
                new = (fn, block + start // bs, start % bs)
                start += stripe.cl
                cid = (obj.key, obj.version, s, chunk)
                pending = self.migrating.get(cid)
                if stripe.places[chunk] == new or (pending is not None and pending[4] == new):
                    continue
                if any(pl is not None and pl[0] == fn for j, pl in enumerate(stripe.places) if j != chunk):
                    continue  # (another chunk of the stripe is there still: two on one function never)
                try:
                    st.placement.check(*new, stripe.cl)
                except (BadPlacement, PoolExhausted):
                    continue  # (this daemon's pool has no room there: the chunk stays where it is)
                if pending is not None:
                    del self.migrating[cid]
                    st.placement.free(*pending[4], stripe.cl)
                st.placement.reserve(*new, stripe.cl)
                self.migrating[cid] = (obj, s, chunk, stripe.places[chunk], new)
                self.waiting.add(cid)
            alloc[chunk] = (fn, block, off, length)
        obj.alloc = alloc
        return out + self._loads_due()

    # -- internals ---------------------------------------------------------------------
    def _loads_due(self) -> list[Instruction]:
        """``Migrate`` for the metadata server's moves whose version is in COS now."""
        out: list[Instruction] = []
        for cid in sorted(self.waiting):
            m = self.migrating.get(cid)
            if m is None:
                self.waiting.discard(cid)
            elif m[0].uploaded:
                self.waiting.discard(cid)
                out.append(Migrate(m[0], m[1], m[2], m[4]))
        return out

    def _elsewhere(self, fn: int) -> bool:
        """``fn`` is in a bucket other than the newest (compaction never moves there)."""
        b = self.window.where.get(fn)
        return b is not None and b is not self.window.newest

    def _release(self, now: float, fns: tuple[int, ...], reason: str) -> list[Instruction]:
        """The window released ``fns``: every chunk placed there loses its place (COS holds
        it), and the functions are retired."""
        st = self.state
        gone = set(fns)
        per_fn: dict[int, list[str]] = {}
        for obj in st.table.all():
            for s, stripe in enumerate(obj.stripes):
                for i, pl in enumerate(stripe.places):
                    if pl is not None and pl[0] in gone:
                        got = st._unplace(now, obj, s, i)
                        if got is not None:
                            per_fn.setdefault(got[0], []).append(got[1])
        for k in [k for k, pl in st.missing.items() if pl[0] in gone]:
            del st.missing[k]  # recovery of a released function's chunks is moot: COS holds them
        st.placement.retire(fns)
        self.retired += len(fns)
        return [Release(fn, tuple(keys)) for fn, keys in per_fn.items()] + [Retire(fn, reason) for fn in fns]

    def _compact(self) -> list[Instruction]:
        st, w = self.state, self.window
        out: list[Instruction] = []
        restore = sorted(self.restore)[:w.config.compact_max]
        self.restore.difference_update(restore)
        for cid in [*w.compaction(self.rng), *restore]:
            assert isinstance(cid, tuple)
            key, version, s, i = cid
            obj = st.table.latest(key, version)
            if obj is None or obj.alloc is not None or not obj.uploaded or cid in self.migrating:
                continue
            stripe = obj.stripes[s]
            old = stripe.places[i]
            if old is None and cid in st.missing:  # recovery brings it back where it was
                continue
            if old is not None and not w.degraded(old[0]):
                continue
            holders = frozenset(pl[0] for pl in stripe.places if pl is not None) | frozenset(
                m[4][0] for c, m in self.migrating.items() if c[:3] == cid[:3])
            try:
                new = st.placement.place([stripe.cl], busy=self._elsewhere, exclude=holders).places[0]
            except PoolExhausted:
                continue
            self.migrating[(key, version, s, i)] = (obj, s, i, old, new)
            out.append(Migrate(obj, s, i, new))
        return out
