"""Slice packing under random traffic: slices, packed chunks and whole-block chunks of
several pools (lifetime keys, ``Solo`` objects) and owners, filling the holes freed entries
leave or not, freed in random order. Extents
never overlap, a block is held exactly while an entry is in it, runs and ``Solo`` objects
share no block, ``new_blocks`` predicts what ``allocate`` takes, and nothing is left."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_server._allocator import Allocator, Solo
from metadata_server._events import Placement

BLOCK = 1000


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_packing_never_overlaps_and_frees_everything(data: st.DataObject) -> None:
    a = Allocator(block_size=BLOCK, data_chunks=3, parity_chunks=1)
    for i in range(data.draw(st.integers(min_value=4, max_value=7))):
        a.register(f"s{i}", data.draw(st.integers(min_value=2, max_value=12)))
    live: list[tuple[str, Placement]] = []
    keys = st.one_of(st.integers(min_value=0, max_value=4), st.just("adhoc"), st.just("solo"))
    for step in range(data.draw(st.integers(min_value=1, max_value=60))):
        if live and data.draw(st.booleans()):
            _, p = live.pop(data.draw(st.integers(min_value=0, max_value=len(live) - 1)))
            a.free(p)
        else:
            owner = data.draw(st.sampled_from(["r1", "r2"]))
            key = data.draw(keys)
            if key == "solo":                   # one object per block: a key of its own (names are write-once)
                key = Solo(f"object{step}")
            size = data.draw(st.integers(min_value=1, max_value=4 * BLOCK))
            holes = data.draw(st.booleans())
            before = a.free_blocks
            need = a.new_blocks(size, owner, key, holes=holes)
            p = a.allocate(size, owner, key, holes=holes)
            if p is not None:
                assert before - a.free_blocks == need, (size, key)
                live.append((owner, p))
        a.validate()
        _check_layout(a, live)
    for _, p in live:
        a.free(p)
    a.validate()
    assert a.allocated_bytes == 0 and not a.pools and not a.open and not a.owner_blocks


def _check_layout(a: Allocator, live: list[tuple[str, Placement]]) -> None:
    """No two entries overlap; every used block holds an entry, of one owner only, and a
    Solo object's blocks hold that object alone."""
    spans: dict[tuple[str, int], list[tuple[int, int, str, int]]] = {}
    for n, (owner, p) in enumerate(live):
        for e in p.extents:
            assert e.offset + e.length <= BLOCK
            spans.setdefault((e.function, e.block), []).append((e.offset, e.offset + e.length, owner, n))
    assert set(spans) == set(a.used)
    for where, parts in spans.items():
        parts.sort()
        assert all(x[1] <= y[0] for x, y in zip(parts, parts[1:])), (where, parts)
        assert len({o for _, _, o, _ in parts}) == 1, where
        b = a.used[where]
        if isinstance(b.pool, Solo) or (isinstance(b.pool, tuple) and isinstance(b.pool[1], Solo)):
            assert len({n for _, _, _, n in parts}) == 1, where


def test_a_video_like_trace_stays_near_the_per_function_lower_bound() -> None:
    """Video's shape at 1 MiB blocks: 3.7 MB objects (12 chunks of 369 KB on 12 functions)
    written in turn and freed in a different order, and gg compile's: small objects of five
    lifetime pools. No packing holds fewer blocks than, per function, its live bytes rounded
    up to whole blocks; slice packing stays within 12% of that bound over time (pools apart,
    as before it: 1.40x here)."""
    import math

    mib = 1 << 20
    a = Allocator()
    for i in range(24):
        a.register(f"s{i}", 64)
    events: list[tuple[float, int, str, int, int]] = []      # (time, write?, name, size, lifetime key)
    for i in range(6):
        events += [(0.2 + 0.07 * i, 1, f"frames_{i}", 3_686_429, 1), (0.7 + 0.04 * ((i * 5) % 6), 0, f"frames_{i}", 0, 0),
                   (0.7 + 0.05 * i, 1, f"filtered_{i}", 3_686_429, 2), (1.2, 0, f"filtered_{i}", 0, 0),
                   (0.1 + 0.01 * i, 1, f"segment_{i}", 20_000, 0), (0.25 + 0.07 * i, 0, f"segment_{i}", 0, 0)]
    for i in range(40):                                       # small objects, five lifetime pools
        events += [(0.05 * i, 1, f"small_{i}", 10_000 + 97 * i, i % 5), (0.05 * i + 0.3 + 0.1 * (i % 5), 0, f"small_{i}", 0, 0)]
    events.sort()
    placed: dict[str, Placement] = {}
    live: dict[str, int] = {}
    held = bound = 0.0
    last = events[0][0]
    for t, write, name, size, key in events:
        held += a.allocated_bytes * (t - last)
        bound += sum(math.ceil(v / mib) for v in live.values()) * mib * (t - last)
        last = t
        if write:
            p = placed[name] = a.allocate(size, "r", key)
            assert p is not None
        else:
            p = placed.pop(name)
            a.free(p)
        for e in p.extents:
            live[e.function] = live.get(e.function, 0) + (e.length if write else -e.length)
    assert a.allocated_bytes == 0 and bound > 0
    assert held <= 1.12 * bound, (held / mib, bound / mib)


def _replay(events: list[list[object]], holes: bool) -> tuple[float, float]:
    """Blocks held and the per-function lower bound (each function's live bytes rounded up
    to whole blocks), both integrated over a recorded trace, in MiB-s."""
    import math

    mib = 1 << 20
    a = Allocator()
    for i in range(12):
        a.register(f"s{i}", 64)
    placed: dict[int, Placement] = {}
    live: dict[str, int] = {}
    held = bound = 0.0
    last = 0.0
    for i, ev in enumerate(events):
        t = float(ev[1])                                      # type: ignore[arg-type]
        held += a.allocated_bytes * (t - last)
        bound += sum(math.ceil(v / mib) for v in live.values()) * mib * (t - last)
        last = t
        if ev[0] == "a":
            p = a.allocate(int(ev[2]), "r", ev[3], int(ev[4]), holes=holes)     # type: ignore[arg-type]
            assert p is not None
            placed[i], sign = p, 1
        else:
            p, sign = placed.pop(int(ev[2])), -1                # type: ignore[arg-type]
            a.free(p)
        for e in p.extents:
            live[e.function] = live.get(e.function, 0) + sign * e.length
        a.validate()
    assert a.allocated_bytes == 0 and not placed
    return held / mib, bound / mib


def test_recorded_video_runs_hold_near_the_per_function_bound_with_holes() -> None:
    """Three real video runs' allocator calls (tests/data/video_alloc_traces.json): filling
    the holes of freed chunks brings the blocks held to within 7% of the per-function bound
    over the three (6.1%; two runs within 1%, one 18% over); without it they are 19% over it
    (1.07, 1.22, 1.28)."""
    import json
    from pathlib import Path

    runs = json.loads((Path(__file__).parents[1] / "data" / "video_alloc_traces.json").read_text())["runs"]
    with_holes = [_replay(r, True) for r in runs]
    without = [_replay(r, False) for r in runs]
    held, bound = sum(h for h, _ in with_holes), sum(b for _, b in with_holes)
    assert held <= 1.07 * bound, (with_holes, without)
    assert sum(1 for h, b in with_holes if h <= 1.01 * b) >= 2, with_holes
    assert sum(h for h, _ in without) >= 1.15 * sum(b for _, b in without), without
