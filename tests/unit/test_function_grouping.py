"""Lifetime grouping by storage function (issue 32 item 3): the allocator gives each
lifetime group of a run functions of its own, so a function frees whole when its group
dies, and the grouping measure counts a function's held time and its releases during a
run from the objects placed on it."""

from __future__ import annotations

import pytest

from metadata_server import Allocator
from metadata_server._allocator import Solo, by_lifetime
from sdk.cli._bench_grouping import bound_saving, function_bound, occupancy, replay, saving


def stage(a: Allocator, keys: tuple[int, int]) -> tuple[list, list]:
    """A stage writing, in turn, an object read at once (key ``keys[0]``) and one kept to
    the end (``keys[1]``): four of each, a block apiece."""
    short, long_ = [], []
    for _ in range(4):
        short.append(a.allocate(90, "run", keys[0]))
        long_.append(a.allocate(90, "run", keys[1]))
    return short, long_


def functions(a: Allocator, n: int, blocks: int) -> None:
    for i in range(n):
        a.register(f"s{i}", blocks)


def test_one_pool_interleaves_lifetimes_and_frees_no_function_until_the_end() -> None:
    a = Allocator(block_size=100)
    functions(a, 4, 2)
    short, long_ = stage(a, (0, 0))                  # funcstore:nogroup: one key for all
    assert [fn for p in short for fn in a.free(p)] == []
    assert sorted(fn for p in long_ for fn in a.free(p)) == ["s0", "s1", "s2", "s3"]


def test_lifetime_groups_fill_functions_of_their_own_and_free_them_whole() -> None:
    a = Allocator(block_size=100)
    functions(a, 4, 2)
    short, long_ = stage(a, (1, 5))
    assert {p.extents[0].function for p in short}.isdisjoint({p.extents[0].function for p in long_})
    assert sorted(fn for p in short for fn in a.free(p)) == ["s0", "s2"]


def test_coded_objects_choose_their_functions_by_lifetime_too() -> None:
    """Chunk ``i`` still probes the functions ``i, i+n, ...`` (no two chunks share one), but
    in lifetime order: a long-lived object's chunks go to empty functions, not beside a
    short-lived object's, so the short one's functions empty when it goes."""
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    functions(a, 6, 2)
    short = a.allocate(120, "run", 1)                # 3 chunks of 60 bytes
    long_ = a.allocate(120, "run", 5)
    assert {e.function for e in short.extents} == {"s0", "s1", "s2"}
    assert {e.function for e in long_.extents} == {"s3", "s4", "s5"}
    again = a.allocate(120, "run", 5)                # its own group's functions first
    assert {e.function for e in again.extents} == {"s3", "s4", "s5"}
    assert sorted(a.free(short)) == ["s0", "s1", "s2"]
    a.validate()


def test_by_lifetime_orders_any_candidate_list_own_longer_empty_shorter() -> None:
    a = Allocator(block_size=100)
    functions(a, 5, 1)
    for key in (9, 3, 7, 1):
        a.allocate(90, "run", key)                   # a block each, no room left beside it: the next empty function
    held = {f.name: set(f.held.get("run", {})) for f in a.functions.values()}
    assert held == {"s0": {9}, "s1": {3}, "s2": {7}, "s3": {1}, "s4": set()}
    names = [f.name for f in by_lifetime(a.functions.values(), "run", 3)]
    assert names == ["s1", "s2", "s0", "s4", "s3"]   # own, longer (nearest first), empty, shorter
    # an ordering only: a filter (busy, one daemon's) before it leaves the rest in the same order
    assert [f.name for f in by_lifetime((f for f in a.functions.values() if f.name != "s2"), "run", 3)] == [
        "s1", "s0", "s4", "s3"]
    assert [f.name for f in by_lifetime(a.functions.values(), "other run", 3)][0] == "s4"   # not another run's
    assert [f.name for f in by_lifetime(a.functions.values(), "run", Solo("x"))] == ["s0", "s1", "s2", "s3", "s4"]


def test_a_function_freed_by_its_group_takes_the_next_group_before_a_never_used_one() -> None:
    a = Allocator(block_size=100)
    functions(a, 3, 1)
    first = a.allocate(90, "run", 1)
    a.allocate(90, "run", 4)
    assert a.free(first) == ["s0"]                    # it leaves the pool (the daemon ends its invocation)
    assert a.allocate(90, "run", 2).extents[0].function == "s0"   # empty again: the oldest empty one
    a.validate()


def test_replay_places_a_trace_and_counts_what_freed_during_it() -> None:
    objects = {"a": {"tier": "memory", "size": 90, "written_at": 0.0, "freed_at": 1.0, "freed_reason": "committed"},
               "b": {"tier": "memory", "size": 90, "written_at": 0.5, "freed_at": 3.0, "freed_reason": "committed"},
               "out": {"tier": "memory", "size": 10, "written_at": 3.0, "freed_at": 3.5, "freed_reason": "run ended"},
               "gone": {"tier": "cos", "size": 10, "written_at": 0.0, "freed_at": 1.0, "freed_reason": "committed"}}
    r = replay(objects, {"a": 0.1, "b": 3.0}, "funcstore", 1, 100, 2, 1, 2)   # functions of one block
    assert r["functions_used"] == 2
    assert r["functions_released"] == 1              # a's function at 1.0; 3.0, the last commit, is the end
    assert r["function_s"] == pytest.approx(1.0 + 2.5 + 0.5)


def test_occupancy_unions_spans_per_function_and_counts_releases_before_the_end() -> None:
    spans = [(("f0",), 0.0, 1.0), (("f0", "f1"), 0.5, 2.0), (("f0",), 3.0, 4.0), (("f2",), 0.0, 4.0)]
    held, released = occupancy(spans, end=4.0)
    assert held == {"f0": 3.0, "f1": 1.5, "f2": 4.0}
    assert released == 2                             # f0 at 2.0 and f1 at 2.0; at 4.0 is the end
    assert occupancy([], 1.0) == ({}, 0)


def test_saving_is_the_better_grouped_policy_against_nogroup() -> None:
    per = {"features": {"funcstore": {"function_gb_s": 6.0}, "funcstore:expiry": {"function_gb_s": 8.0},
                        "funcstore:nogroup": {"function_gb_s": 10.0}}}
    assert saving(per) == 0.4
    assert saving({}) is None


def test_function_bound_counts_the_functions_live_bytes_fill_at_each_moment() -> None:
    objects = {"a": {"tier": "memory", "size": 90, "written_at": 0.0, "freed_at": 1.0},
               "b": {"tier": "memory", "size": 90, "written_at": 0.5, "freed_at": 3.0},
               "cos": {"tier": "cos", "size": 900, "written_at": 0.0, "freed_at": 3.0},
               "open": {"tier": "memory", "size": 90, "written_at": 0.0, "freed_at": None}}
    assert function_bound(objects, 100, 100, 3) == pytest.approx(0.5 + 2 * 0.5 + 2.0)
    coded = {"c": {"tier": "memory", "size": 150, "written_at": 0.0, "freed_at": 1.0}}   # 3 chunks, 3 functions
    assert function_bound(coded, 1000, 100, 3) == pytest.approx(3.0)
    per = {"features": {"funcstore:nogroup": {"function_gb_s": 10.0}}}
    assert bound_saving(per, {"features": 7.5}) == 0.25 and bound_saving({}, {}) is None
