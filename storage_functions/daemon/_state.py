"""The daemon's store core: one state machine, ``handle(event) -> list[Instruction]``.

It holds the object table (keys, versions, their stripes and each chunk's place:
function, block, offset), the placement allocator's view of every function's
blocks (``PlaceChunk``), the chunks counted per function, the memory ledger
(what the functions acknowledged holding) and recovery progress (chunks whose
function lost them and that are not back yet). No sockets, no threads, no
clock: the daemon (``_server``) stamps events with the time, drives the state
under one lock, and carries out the instructions (``_store_events``). A refused
event raises a ``StorageError`` before changing anything. (The table, an
``ObjectTable``, keeps its own small lock only so that GET threads can look a
version up without taking the daemon's; every change to it comes through here.)

Semantics:

- A PUT begins a version (``writing``); each stripe is placed where the metadata
  server allocated it (checked, then reserved) or by ``PlaceChunk``; the chunks
  go out (``SendChunk``); a chunk counts in the ledger only once its function
  acknowledged it at the place it still has (a late acknowledgement of a chunk
  that was freed, abandoned or moved meanwhile deletes it again: ``Release``).
- ``Free`` drops every version of the keys, returns their blocks to the
  allocator and deletes their chunks; the buffer takes the version back
  (``Discard``) and a version freed while its PUT ran never becomes readable.
- ``Evict`` (the metadata server released an object's function memory once
  its last declared reader had the bytes): the chunks of every readable version
  of the keys that has a durable copy (held by the buffer, or uploaded) lose
  their places, their blocks and ledger entries (``Release``); the version stays
  in the table, its GETs served from the buffer or COS (``_get``), until
  ``Free``; the daemon uploads one still in its upload window at once.
- ``FunctionLost``: every chunk placed there loses its place; the ones the
  metadata server placed, of readable versions, are missing until recovery
  stores them there again (``Recover`` / ``ChunkRecovered``; ``Recover`` goes out
  even when the table placed nothing there: the function's insertion log may
  list chunks to bring back).
- ``Restored``: a restarted daemon puts a version of its durable table back
  (``_restore``), its places reserved; each chunk enters the ledger once its
  function is found holding it or it is stored again (``ChunkStored``).
- ``Tick``: warm-ups at each function's GC-bucket rate, and with a GC window
  (``_gc_core``, SION Sec. 5.3) its rounds: degraded functions sealed, released
  ones unplaced (their data stays in COS; ``Retire``), a function of an older
  bucket emptied by frees retired at once (a degraded one whose instance was lost
  too, instead of recovered), and a compaction round that moves
  chunks read on degraded functions into the newest bucket (``Migrate`` /
  ``Migrated``); ``Move``: the metadata server moved chunks it placed (read on a
  degraded function) and they load at their new places the same way.

``validate_state`` (``_store_invariants``) asserts what must hold between events.
"""

from __future__ import annotations

import random
from typing import Callable

from ..exceptions import NoRoom, StoreError
from ._ledger import MemoryLedger
from ._objects import ObjectTable, ObjectVersion, Stripe, chunk_key, cos_object_key
from ._gc import GcWindow
from ._gc_core import GcCore
from ._placement import BadPlacement, PlaceChunk, PoolExhausted
from ._store_invariants import validate
from ._store_events import (Begun, ChunkFailed, ChunkRecovered, ChunkStored, Degraded, Discard, Event, Evict, Evicted,
                            Free, Freed,
                            FunctionLost, Instruction, Migrated, Move, Place, PutAbandoned, PutBegun, PutReady, PutRetry,
                            Recover, Release, Restored, SendChunk, StripeBegun, Tick, Upload, Warm)

__all__ = ["StoreState", "MissingKey"]

MissingKey = tuple[str, int, int, int]  # (key, version, stripe, index) of a chunk waiting for recovery


class StoreState:
    """Everything the daemon knows about what is stored where. Drive it with ``handle``."""

    def __init__(self, placement: PlaceChunk, *, block_size: int, memory_grain: int = 0, function_prefix: str = "sion",
                 cos_prefix: str = "", warm_interval_s: float = 60.0, gc: GcWindow | None = None,
                 rng: random.Random | None = None) -> None:
        self.placement = placement
        self.block_size = block_size
        self.function_prefix = function_prefix
        self.cos_prefix = cos_prefix
        self.warm_interval_s = warm_interval_s
        self.table = ObjectTable()
        self.ledger = MemoryLedger(block_size, grain=memory_grain)
        self.fn_chunks: dict[int, int] = {}  # function -> chunks placed there
        self.missing: dict[MissingKey, Place] = {}  # lost chunks of readable versions, until recovered
        self.losses: dict[int, int] = {}  # function -> instances lost
        self.gc = GcCore(self, gc, rng or random.Random(0)) if gc is not None else None
        self._handlers: dict[type, Callable[[Event], list[Instruction]]] = {
            PutBegun: self._put_begun, StripeBegun: self._stripe_begun, ChunkStored: self._chunk_stored,
            ChunkFailed: self._chunk_failed, PutRetry: self._put_retry, PutReady: self._put_ready,
            PutAbandoned: self._put_abandoned, Free: self._free, Evict: self._evict,
            FunctionLost: self._function_lost,
            ChunkRecovered: self._chunk_recovered, Restored: self._restored, Tick: self._tick,
            Migrated: self._migrated, Move: self._move,
        }

    def handle(self, ev: Event) -> list[Instruction]:
        out = self._handlers[type(ev)](ev)
        # functions emptied by this event (or an earlier one) retire with a free, a tick or a
        # move: the replies the PUT path unpacks (PutRetry, ChunkFailed, ...) stay as they are
        if self.gc is not None and self.gc.emptied and isinstance(ev, (Free, Evict, Tick, Migrated)):
            out += self.gc.retire_emptied()
        return out

    # -- queries ---------------------------------------------------------------------------
    def name(self, fn: int) -> str:
        return f"{self.function_prefix}-{fn}"

    def chunks(self, fn: int) -> int:
        """Chunks placed on function ``fn``."""
        return self.fn_chunks.get(fn, 0)

    def live(self, obj: ObjectVersion) -> bool:
        """The version is in the table (being written or readable)."""
        return obj.state in ("writing", "ready")

    def validate_state(self) -> None:
        """Assert every invariant the state can see (``_store_invariants``)."""
        validate(self)

    # -- PUT -------------------------------------------------------------------------------
    def _put_begun(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, PutBegun)
        obj = self.table.begin(ev.key)
        obj.size = ev.size
        obj.cos_key = cos_object_key(self.cos_prefix, ev.key, obj.version)
        return [Begun(obj)]

    def _stripe_begun(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, StripeBegun)
        obj, shape = ev.obj, ev.shape
        n, cl = shape.n, shape.cl
        s = len(obj.stripes)
        if not self.live(obj):  # freed while its PUT ran: nothing is placed (the PUT fails)
            obj.stripes.append(Stripe(shape.d, shape.p, shape.fs, shape.ol, cl, list(shape.crcs), [None] * n,
                                      ev.offset))
            return []
        if ev.places is not None:
            places = list(ev.places)
            if len({pl[0] for pl in places}) != len(places):
                raise StoreError(f"PUT {obj.key!r}: the allocation puts two chunks on one function")
            try:
                for fn, block, off in places:  # all checked before any is reserved
                    self.placement.check(fn, block, off, cl)
                for fn, block, off in places:
                    self.placement.reserve(fn, block, off, cl)
            except (BadPlacement, PoolExhausted) as exc:  # e.g. a function a larger, earlier pool had
                raise NoRoom(f"PUT {obj.key!r}: the allocation cannot be used: {exc} (no room there in this "
                             "daemon's pool)") from None
        else:
            try:
                places = list(self.placement.place([cl] * n).places)
            except PoolExhausted as exc:
                raise StoreError(f"PUT {obj.key!r}: {exc}") from None
        for fn, _, _ in places:
            self._count(fn, +1)
        obj.stripes.append(Stripe(shape.d, shape.p, shape.fs, shape.ol, cl, list(shape.crcs), list(places),
                                  ev.offset))
        return [SendChunk(obj, s, i, pl) for i, pl in enumerate(places)]

    def _chunk_stored(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, ChunkStored)
        obj, s, i, (fn, block, off) = ev.obj, ev.stripe, ev.index, ev.place
        ckey = chunk_key(obj.key, obj.version, s, i)
        if not self.live(obj) or obj.stripes[s].places[i] != ev.place:
            return [Release(fn, (ckey,))]  # freed, abandoned or moved while it travelled
        self.ledger.stored(ev.now, self.name(fn), ckey, block, off, obj.stripes[s].cl)
        return []

    def _chunk_failed(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, ChunkFailed)
        obj = ev.obj
        died = {(s, i): place for s, i, place in ev.died}
        lost: dict[int, int] = {}
        for s, i in ev.failed:
            if (s, i) not in died:
                lost[s] = lost.get(s, 0) + 1
        if any(st.n - lost.get(s, 0) < st.d for s, st in enumerate(obj.stripes)):
            return [Degraded(False)]
        for s, i in ev.failed:
            self._unplace(ev.now, obj, s, i)
            if (s, i) in died:  # recovered once ready (``_put_ready``)
                obj.lost_writing.append((s, i, died[s, i]))
        return [Degraded(True)]

    def _put_retry(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, PutRetry)
        obj = ev.obj
        out: list[Instruction] = []
        if not self.live(obj):  # freed while its PUT ran: nothing to place again
            return out
        for k, (s, i) in enumerate(ev.failed):
            st = obj.stripes[s]
            old = st.places[i]
            if ev.planned is not None:
                new = ev.planned[k]
                if old is None:
                    self.placement.reserve(new[0], new[1], new[2], st.cl)
                    self._count(new[0], +1)
                elif old != new:
                    self._unplace(ev.now, obj, s, i)
                    self.placement.reserve(new[0], new[1], new[2], st.cl)
                    self._count(new[0], +1)
            else:
                if old is not None:
                    self._unplace(ev.now, obj, s, i)
                # never the function that failed it (it may be hung, not gone), nor its other chunks'
                holders = frozenset([pl[0] for pl in st.places if pl is not None] + ([old[0]] if old else []))
                try:
                    new = self.placement.place([st.cl], exclude=holders).places[0]
                except PoolExhausted:
                    continue
                self._count(new[0], +1)
            st.places[i] = new
            out.append(SendChunk(obj, s, i, new))
        return out

    def _put_ready(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, PutReady)
        obj = ev.obj
        if not self.live(obj):  # freed while its PUT ran: never readable, its file goes
            return [Discard(obj)]
        obj.state = "ready"
        out: list[Instruction] = [Upload(obj)]
        per_fn: dict[int, list[tuple[ObjectVersion, int, int, Place]]] = {}
        for s, i, place in obj.lost_writing:  # acknowledged, then lost with the instance before now
            if obj.stripes[s].places[i] is None:
                self.missing[(obj.key, obj.version, s, i)] = place
                per_fn.setdefault(place[0], []).append((obj, s, i, place))
        obj.lost_writing.clear()
        return out + [Recover(fn, tuple(c)) for fn, c in per_fn.items()]

    def _put_abandoned(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, PutAbandoned)
        obj = ev.obj
        if self.live(obj):
            obj.state = "failed"
        self.table.drop_failed(obj)
        return self._release_all(ev.now, obj)

    # -- free ------------------------------------------------------------------------------
    def _free(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Free)
        n = 0
        discards: list[Instruction] = []
        per_fn: dict[int, list[str]] = {}
        for key in ev.keys:
            for obj in self.table.pop(key):
                n += 1
                obj.state = "freed"
                discards.append(Discard(obj))
                self._drop_places(ev.now, obj, per_fn)
        return discards + _releases(per_fn) + [Freed(n)]

    def _evict(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Evict)
        kept = 0
        gone: list[ObjectVersion] = []
        per_fn: dict[int, list[str]] = {}
        for key in ev.keys:
            for obj in self.table.versions(key):
                if obj.state != "ready" or not any(pl is not None for st in obj.stripes for pl in st.places):
                    continue
                if not (obj.uploaded or obj.held is not None):  # no durable copy: memory is the only one
                    kept += 1
                    continue
                gone.append(obj)
                self._drop_places(ev.now, obj, per_fn)
        return _releases(per_fn) + [Evicted(tuple(gone), kept)]

    # -- functions -------------------------------------------------------------------------
    def _function_lost(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, FunctionLost)
        fn = ev.fn
        self.losses[fn] = self.losses.get(fn, 0) + 1
        self.placement.lost(fn)
        if self.gc is not None:
            self.gc.target_lost(fn)
        lost: list[tuple[ObjectVersion, int, int, Place]] = []
        for obj in self.table.all():
            for s, st in enumerate(obj.stripes):
                for i, place in enumerate(st.places):
                    if place is not None and place[0] == fn:
                        st.places[i] = None
                        if obj.alloc is not None and obj.state == "ready":
                            lost.append((obj, s, i, place))
                            self.missing[(obj.key, obj.version, s, i)] = place
                        elif obj.alloc is not None and obj.state == "writing":  # recovered once ready
                            obj.lost_writing.append((s, i, place))
        self.fn_chunks.pop(fn, None)
        self.ledger.function_lost(ev.now, self.name(fn))
        if self.gc is not None:
            self.gc.emptied.discard(fn)
            retired = self.gc.lost(fn)  # a degraded function is released, not recovered
            if retired is not None:
                return retired
        return [Recover(fn, tuple(lost))]  # also when the table had none there: its log may list some

    def _chunk_recovered(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, ChunkRecovered)
        obj, s, i, place = ev.obj, ev.stripe, ev.index, ev.place
        fn, block, off = place
        self.missing.pop((obj.key, obj.version, s, i), None)
        st = obj.stripes[s]
        ckey = chunk_key(obj.key, obj.version, s, i)
        if not self.live(obj) or st.places[i] is not None:
            return [Release(fn, (ckey,))] if st.places[i] != place else []  # freed while it travelled
        self.placement.reserve(fn, block, off, st.cl)
        st.places[i] = place
        self._count(fn, +1)
        self.ledger.stored(ev.now, self.name(fn), ckey, block, off, st.cl)
        return []

    def _restored(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Restored)
        obj = ev.obj
        for st in obj.stripes:
            for pl in st.places:
                if pl is not None:
                    self.placement.reserve(pl[0], pl[1], pl[2], st.cl)
                    self._count(pl[0], +1)
        self.table.add(obj)
        return []

    def _tick(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Tick)
        if self.gc is not None:
            return self.gc.tick(ev)
        return [Warm(fn) for fn, last in ev.sleeping
                if self.chunks(fn) > 0 and ev.now - last >= self.warm_interval_s]

    def _migrated(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Migrated)
        return self.gc.migrated(ev) if self.gc is not None else []

    def _move(self, ev: Event) -> list[Instruction]:
        assert isinstance(ev, Move)
        return self.gc.move(ev) if self.gc is not None else []

    # -- internals -------------------------------------------------------------------------
    def _count(self, fn: int, k: int) -> None:
        n = self.fn_chunks.get(fn, 0) + k
        assert n >= 0, (fn, n)
        if n:
            self.fn_chunks[fn] = n
        else:
            self.fn_chunks.pop(fn, None)
        if self.gc is not None:
            self.gc.counted(fn, n, k)

    def _unplace(self, now: float, obj: ObjectVersion, s: int, i: int) -> tuple[int, str] | None:
        """Chunk (``s``, ``i``) gives up its place: its blocks, its count and its ledger entry."""
        st = obj.stripes[s]
        place = st.places[i]
        if place is None:
            return None
        fn, block, off = place
        self.placement.free(fn, block, off, st.cl)
        self._count(fn, -1)
        ckey = chunk_key(obj.key, obj.version, s, i)
        self.ledger.released(now, self.name(fn), ckey)
        st.places[i] = None
        return fn, ckey

    def _drop_places(self, now: float, obj: ObjectVersion, per_fn: dict[int, list[str]]) -> None:
        if self.gc is not None:
            self.gc.forget(obj, per_fn)
        for s, st in enumerate(obj.stripes):
            for i in range(st.n):
                self.missing.pop((obj.key, obj.version, s, i), None)
                got = self._unplace(now, obj, s, i)
                if got is not None:
                    per_fn.setdefault(got[0], []).append(got[1])

    def _release_all(self, now: float, obj: ObjectVersion) -> list[Instruction]:
        per_fn: dict[int, list[str]] = {}
        self._drop_places(now, obj, per_fn)
        return _releases(per_fn)


def _releases(per_fn: dict[int, list[str]]) -> list[Instruction]:
    return [Release(fn, tuple(keys)) for fn, keys in per_fn.items()]

