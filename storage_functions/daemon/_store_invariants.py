"""The daemon store core's invariants, asserted over a ``StoreState``: the
placement allocator's blocks are exactly those of the placed chunks, the
chunks counted per function are the placed ones, no chunk of a freed or
failed version has a place or a ledger entry, every ledger entry is a placed
chunk at its place, recovery waits only on chunks of readable versions that
have no place. Tests call it (``StoreState.validate_state``) after every
scenario and when a daemon stops; it changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from ._objects import chunk_key, placed_chunks

if TYPE_CHECKING:
    from ._gc_core import GcCore
    from ._ledger import MemoryLedger
    from ._objects import ObjectTable
    from ._placement import PlaceChunk

__all__ = ["validate", "StoreView"]


class StoreView(Protocol):
    """What the invariants read of the store core (``_state.StoreState``)."""

    @property
    def placement(self) -> PlaceChunk: ...

    @property
    def block_size(self) -> int: ...

    @property
    def table(self) -> ObjectTable: ...

    @property
    def ledger(self) -> MemoryLedger: ...

    @property
    def fn_chunks(self) -> Mapping[int, int]: ...

    @property
    def missing(self) -> Mapping[tuple[str, int, int, int], tuple[int, int, int]]: ...

    @property
    def gc(self) -> GcCore | None: ...

    def name(self, fn: int) -> str: ...


def _blocks(block: int, offset: int, size: int, block_size: int) -> list[int]:
    """The blocks ``size`` bytes at (``block``, ``offset``) touch (as ``PlaceChunk`` counts them)."""
    out = []
    left, b, off = size, block, offset
    while left > 0:
        out.append(b)
        left -= min(left, block_size - off)
        b, off = b + 1, 0
    return out


def validate(state: StoreView) -> None:
    """Assert every invariant of the store core."""
    state.ledger.validate()
    versions = state.table.all()
    refs: dict[int, dict[int, int]] = {}
    counts: dict[int, int] = {}
    placed: dict[tuple[str, str], tuple[int, int, int]] = {}  # (function name, chunk key) -> (block, off, cl)
    seen: dict[str, list[int]] = {}
    for obj in versions:
        assert obj.state in ("writing", "ready"), f"{obj.key!r} v{obj.version} is {obj.state} but in the table"
        seen.setdefault(obj.key, []).append(obj.version)
        for st in obj.stripes:
            fns = [pl[0] for pl in st.places if pl is not None]
            assert len(fns) == len(set(fns)), f"{obj.key!r} v{obj.version}: two chunks of a stripe on one function"
            assert len(st.places) == st.n and len(st.crcs) == st.n, (obj.key, st)
    for key, vs in seen.items():
        assert vs == sorted(set(vs)), f"{key!r}: versions out of order {vs}"
    for obj, s, i, (fn, block, off) in placed_chunks(versions):
        cl = obj.stripes[s].cl
        counts[fn] = counts.get(fn, 0) + 1
        for b in _blocks(block, off, cl, state.block_size):
            fb = refs.setdefault(fn, {})
            fb[b] = fb.get(b, 0) + 1
        placed[(state.name(fn), chunk_key(obj.key, obj.version, s, i))] = (block, off, cl)
    assert counts == state.fn_chunks, f"chunks per function {state.fn_chunks} != placed {counts}"
    if state.gc is not None:  # compaction's new places are reserved while their chunks load
        state.gc.window.validate()
        for obj, s, _, _, (fn, block, off) in state.gc.migrating.values():
            assert obj.state == "ready", f"{obj.key!r} v{obj.version} moves but is {obj.state}"
            for b in _blocks(block, off, obj.stripes[s].cl, state.block_size):
                fb = refs.setdefault(fn, {})
                fb[b] = fb.get(b, 0) + 1
    slots = state.placement.slots
    for fn in refs:
        assert fn < len(slots), f"a chunk is placed on function {fn}, outside the allocator's {len(slots)} slots"
    for slot in slots:
        want = refs.get(slot.index, {})
        assert slot.alloc.refs == want, f"function {slot.index}: allocator blocks {slot.alloc.refs} != placed {want}"
    for (name, ckey), e in state.ledger.entries.items():
        assert (name, ckey) in placed, f"ledger holds {ckey!r} on {name}, which is not placed there (freed or lost)"
        block, off, cl = placed[(name, ckey)]
        assert e.length == cl and e.start == block * state.block_size + off, (ckey, e)
    live = {(o.key, o.version): o for o in versions}
    for (key, version, s, i), place in state.missing.items():
        waiting = live.get((key, version))
        assert waiting is not None, f"recovery waits on {key!r} v{version}, which was freed"
        assert waiting.state == "ready" and waiting.alloc is not None, (key, version, waiting.state)
        assert waiting.stripes[s].places[i] is None, f"{key!r} v{version} chunk {s}/{i} is missing but placed"
        assert place[0] < len(slots), place
