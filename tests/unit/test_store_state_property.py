"""Random interleavings of puts (placed by the daemon or by the metadata server),
acknowledgements, retries, abandoned puts, frees, function kills and recoveries
keep every invariant of the daemon's store core (``validate_state`` after each
step), and freeing everything leaves no block, count, ledger entry or missing chunk;
the same with the GC window on (ticks that degrade and release buckets, reads that
mark chunks, compaction moves that land or fail)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from storage_functions.daemon._checks import StripeShape
from storage_functions.daemon._gc import GcConfig, GcWindow
from storage_functions.daemon._objects import ObjectVersion, chunk_key
from storage_functions.daemon._placement import PlaceChunk
from storage_functions.daemon._state import StoreState
from storage_functions.daemon._store_events import (Begun, ChunkFailed, ChunkRecovered, ChunkStored, Degraded, Free,
                                                    FunctionLost, Migrate, Migrated, PutAbandoned, PutBegun,
                                                    PutReady, PutRetry, Recover, SendChunk, StripeBegun, Tick)
from storage_functions.exceptions import StorageError

BS = 1000
FUNCTIONS = 8
KEYS = [f"r/k{i}" for i in range(5)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_store_histories_keep_every_invariant(data: st.DataObject) -> None:
    history(data, gc=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_store_histories_with_the_gc_window_keep_every_invariant(data: st.DataObject) -> None:
    history(data, gc=True)


def history(data: st.DataObject, *, gc: bool) -> None:
    window = GcWindow(GcConfig(interval_s=2.0, active=1, degraded=2, compact_fraction=1.0), now=0.0) if gc else None
    # with the window, a low HARDCAP seals functions soon, so buckets age instead of moving on,
    # and a larger pool leaves room to move chunks to
    s = StoreState(PlaceChunk(group_size=4, hardcap=(2 if gc else 6) * BS, block_size=BS,
                              max_functions=FUNCTIONS * (3 if gc else 1),
                              capacity=12 * BS), block_size=BS, warm_interval_s=1, gc=window, rng=random.Random(0))
    moving: list[Migrate] = []
    writing: list[tuple[ObjectVersion, list[SendChunk]]] = []   # PUTs in progress, with unacknowledged chunks
    recovering: list[tuple[ObjectVersion, int, int, tuple[int, int, int]]] = []
    next_block = [20] * FUNCTIONS   # metadata-server blocks, above what PlaceChunk hands out here
    now = 0.0
    for _ in range(data.draw(st.integers(min_value=1, max_value=40))):
        now += 1.0
        steps = ["put", "put", "ack", "finish", "free", "kill", "recover"] + (["tick"] * 4 + ["moved"] * 2 if gc else [])
        step = data.draw(st.sampled_from(steps))
        if step == "put":
            key = data.draw(st.sampled_from(KEYS))
            d = data.draw(st.integers(min_value=1, max_value=3))
            p = data.draw(st.integers(min_value=0, max_value=2))
            cl = data.draw(st.sampled_from([0, 10, 400, 999, 1500]))
            stripes = data.draw(st.integers(min_value=1, max_value=3))
            (b,) = s.handle(PutBegun(key=key, size=cl * d * stripes, now=now))
            assert isinstance(b, Begun)
            obj = b.obj
            by_md = data.draw(st.booleans())
            if by_md:
                fns = data.draw(st.permutations(range(FUNCTIONS)))[:d + p]
                blocks = []
                for fn in fns:
                    blocks.append(next_block[fn])
                    next_block[fn] += -(-cl * stripes // BS) + 1
                obj.alloc = [(fn, blk, 0, cl * stripes) for fn, blk in zip(fns, blocks)]
            sends: list[SendChunk] = []
            try:
                for k in range(stripes):
                    places = None
                    if by_md:
                        places = tuple((fn, blk + (k * cl) // BS, (k * cl) % BS) for fn, blk, _, _ in obj.alloc or [])
                    out = s.handle(StripeBegun(obj=obj, shape=StripeShape(d, p, cl, cl * d, cl, [0] * (d + p)),
                                               offset=k * cl * (d + p), places=places, now=now))
                    sends += [x for x in out if isinstance(x, SendChunk)]
            except StorageError:
                s.handle(PutAbandoned(obj=obj, now=now))
            else:
                writing.append((obj, sends))
        elif step == "ack" and writing:
            obj, sends = writing[data.draw(st.integers(min_value=0, max_value=len(writing) - 1))]
            if sends:
                x = sends.pop(data.draw(st.integers(min_value=0, max_value=len(sends) - 1)))
                s.handle(ChunkStored(obj=obj, stripe=x.stripe, index=x.index, place=x.place, now=now))
        elif step == "finish" and writing:
            obj, sends = writing.pop(data.draw(st.integers(min_value=0, max_value=len(writing) - 1)))
            failed = tuple(sorted({(x.stripe, x.index) for x in sends}
                                  | {(k, i) for k, stp in enumerate(obj.stripes)
                                     for i, pl in enumerate(stp.places) if pl is None}))
            how = data.draw(st.sampled_from(["ready", "retry", "degraded", "abandon"]))
            if failed and how == "retry":
                planned = None
                if obj.alloc is not None:
                    planned = tuple((fn, blk + (sk * obj.stripes[0].cl) // BS, (sk * obj.stripes[0].cl) % BS)
                                    for sk, si in failed for fn, blk, _, _ in [obj.alloc[si]])
                for x in s.handle(PutRetry(obj=obj, failed=failed, planned=planned, now=now)):
                    assert isinstance(x, SendChunk)
                    s.handle(ChunkStored(obj=obj, stripe=x.stripe, index=x.index, place=x.place, now=now))
                how = "ready"
            if failed and how == "degraded":
                died = ()
                if obj.alloc is not None:  # some instances reached, then lost: recovered once ready
                    cl0 = obj.stripes[0].cl
                    died = tuple((sk, si, (fn, blk + (sk * cl0) // BS, (sk * cl0) % BS))
                                 for sk, si in failed if data.draw(st.booleans())
                                 for fn, blk, _, _ in [obj.alloc[si]])
                (dg,) = s.handle(ChunkFailed(obj=obj, failed=failed, died=died, now=now))
                assert isinstance(dg, Degraded)
                how = "ready" if dg.ok else "abandon"
            if how == "abandon":
                s.handle(PutAbandoned(obj=obj, now=now))
            else:
                s.handle(PutReady(obj=obj, now=now))
            for x in sends:  # late acknowledgements
                s.handle(ChunkStored(obj=obj, stripe=x.stripe, index=x.index, place=x.place, now=now))
        elif step == "free":
            s.handle(Free(keys=tuple(data.draw(st.lists(st.sampled_from(KEYS), max_size=3))), now=now))
        elif step == "kill":
            for x in s.handle(FunctionLost(fn=data.draw(st.integers(min_value=0, max_value=FUNCTIONS - 1)), now=now)):
                if isinstance(x, Recover):  # (a degraded function is released instead)
                    recovering += list(x.chunks)
        elif step == "tick":
            reads = []
            for obj in [o for o in s.table.all() if o.state == "ready"]:
                obj.uploaded = obj.uploaded or data.draw(st.booleans())
                reads += [(pl[0] if pl is not None else -1, chunk_key(obj.key, obj.version, k, i))
                          for k, stp in enumerate(obj.stripes) for i, pl in enumerate(stp.places)]
            out = s.handle(Tick(now=now, reads=tuple(reads)))
            moving += [x for x in out if isinstance(x, Migrate)]
            for x in out:
                event(type(x).__name__)  # what the window did (--hypothesis-show-statistics)
        elif step == "moved" and moving:
            m = moving.pop(data.draw(st.integers(min_value=0, max_value=len(moving) - 1)))
            s.handle(Migrated(obj=m.obj, stripe=m.stripe, index=m.index, place=m.place, ok=data.draw(st.booleans()),
                              now=now))
        elif step == "recover" and recovering:
            obj, si, ci, place = recovering.pop(data.draw(st.integers(min_value=0, max_value=len(recovering) - 1)))
            s.handle(ChunkRecovered(obj=obj, stripe=si, index=ci, place=place, now=now))
        s.validate_state()
    for obj, _ in writing:
        s.handle(PutAbandoned(obj=obj, now=now))
    s.handle(Free(keys=tuple(KEYS), now=now))
    for obj, si, ci, place in recovering:
        s.handle(ChunkRecovered(obj=obj, stripe=si, index=ci, place=place, now=now))
    for m in moving:
        s.handle(Migrated(obj=m.obj, stripe=m.stripe, index=m.index, place=m.place, ok=True, now=now))
    s.validate_state()
    assert not s.fn_chunks and not s.missing and not s.ledger.entries and not s.table.keys()
    assert all(not slot.alloc.refs for slot in s.placement.slots)
