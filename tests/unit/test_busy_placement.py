"""Busy-aware placement on the metadata-placed path (SION Fig. 5 ``TestAndPlace``'s queue
test): the daemon's load reports make a short-lived busy set (``_busy``), coded placement
skips busy functions as it skips full ones (chunk i goes on along its stride) unless its
whole stride is busy, and the journal keeps the reports that changed the set, so a replay
places as the live server did."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server import Allocator
from metadata_server._busy import BusyFunctions
from metadata_server._events import BeginPut, Delete, FinishPut, RegisterCapacity, RegisterWorkflow
from metadata_server._handler import MetadataHandler
from metadata_server._journal import Journal
from metadata_server._state import MetadataState

MIB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_busy_set_follows_reports_and_runs_out_on_its_own() -> None:
    b = BusyFunctions(queue_depth=3, busy_bytes=8 * MIB, hold_s=1.0, relative=2.0)
    n = 12                                                           # functions in the pool
    assert b.changes(0.0, {"f0": (3, 0)}, n) and not b.changes(0.0, {"f0": (2, MIB)}, n)
    burst = {f"f{i}": (6, MIB) for i in range(6)}                    # a burst on a whole group:
    assert not b.changes(0.0, burst, 6)                              # nobody stands out, nobody is busy
    assert b.busy_in(burst, 12) == set(burst)                        # half the pool idle: these stand out
    b.report(0.0, {"f0": (3, 0), "f1": (1, 8 * MIB), "f2": (2, MIB)}, n)
    b.advance(0.2)
    assert not b.admits("f0") and not b.admits("f1") and b.admits("f2")
    assert not b.changes(0.2, {"f0": (5, 0), "f1": (0, 9 * MIB)}, n)  # the same set, marks still fresh
    assert not b.changes(0.2, {"f0": (5, 0)}, n)                    # f1 idle: its mark runs on (no flicker)
    assert b.changes(0.6, {"f0": (5, 0), "f1": (0, 9 * MIB)}, n)   # past half the hold: renew
    b.report(0.6, {"f0": (5, 0)}, n)
    b.advance(1.2)                                                   # f1's mark ran out, f0's was renewed
    assert b.admits("f1") and not b.admits("f0")
    b.advance(1.6)                                                   # no report since: every mark ran out
    assert b.admits("f0") and b.until == {}
    with pytest.raises(ValueError, match="hold_s > 0"):
        BusyFunctions(hold_s=0)


def test_a_busy_function_is_skipped_along_its_stride_unless_the_whole_stride_is_busy() -> None:
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for i in range(6):                                   # two groups of 3: strides s0,s3 / s1,s4 / s2,s5
        a.register(f"s{i}", 10)
    busy = BusyFunctions()
    a.add_filter(busy, strict=False)
    p = a.allocate(200, "r", 0)
    assert p is not None and [e.function for e in p.extents] == ["s0", "s1", "s2"]
    busy.report(0.0, {"s1": (9, 0)}, 6)
    p = a.allocate(200, "r", 0)
    assert p is not None and [e.function for e in p.extents] == ["s0", "s4", "s2"]   # chunk 1: s1's next
    assert a.new_blocks(200, "r", 0) == 3               # what allocate would take, with the filter too
    busy.report(0.0, {"s1": (9, 0), "s4": (9, 0)}, 6)
    p = a.allocate(200, "r", 0)
    assert p is not None and [e.function for e in p.extents][1] in ("s1", "s4")  # busy, not full: placed
    assert a.admits("s1", soft=False) and not a.admits("s1")
    a.validate()


def test_load_reports_steer_placement_and_replay_places_alike(tmp_path: Path, fig9_path: Path) -> None:
    clock = Clock()
    j = Journal(tmp_path / "j.log")
    h = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1), journal=j,
                        admin_token="a", clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9")]
            + [RegisterCapacity(clock(), str(i + 2), f"sion-{i}", 8) for i in range(6)])
    run = h.start_run("a", "fig9/9", "funcstore", 0).run_id
    h.fetch_instructions("a", 0, 100, {"sion-0": T.FunctionLoad(4, 3 * MIB), "sion-1": T.FunctionLoad(1, MIB)})
    seq = j.seq
    h.fetch_instructions("a", 0, 100, {"sion-0": T.FunctionLoad(5, 3 * MIB)})   # no change: not journaled
    assert j.seq == seq and h.state.stats()["busy"] == ["sion-0"]
    out = h.apply([BeginPut(clock(), "9", run, "", "in1", 3 * MIB, "x", False)])[0]
    first = [e.function for e in out[0].placement.extents]  # type: ignore[attr-defined]
    assert first[0] == "sion-3" and "sion-0" not in first
    clock.t += 5.0                                           # the mark ran out: sion-0 takes chunks again
    h.fetch_instructions("a", 0, 100, {})                   # an idle report of a set already empty by time
    out = h.apply([BeginPut(clock(), "10", run, "", "in2", 3 * MIB, "y", False)])[0]
    assert h.state.stats()["busy"] == [] and h.state.allocator.admits("sion-0")
    # admitted again, but chunk 0 stays beside in1's on sion-3: the function choice is by lifetime
    # (a function already holding the pool's group first), busy is only a filter before it
    assert out[0].placement.extents[0].function == "sion-3"  # type: ignore[attr-defined]
    assert h.state.counters["busy_marks"] == 1
    want = sorted(h.state.allocator.used)
    j.close()
    j2 = Journal(tmp_path / "j.log")
    h2 = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1), journal=j2,
                         admin_token="a", clock=clock)
    assert sorted(h2.state.allocator.used) == want
    assert [e.function for e in h2.state.runs[run].objects["in1"].placement.extents] == first
    h2.state.validate_state()
    j2.close()


def _functions(out: list[object]) -> list[str]:
    return sorted({e.function for e in out[0].placement.extents})  # type: ignore[attr-defined]


def test_gc_buckets_steer_new_data_to_the_newest_bucket_and_none_to_a_degraded_one(
        tmp_path: Path, fig9_path: Path) -> None:
    """SION Sec. 5.3.1 on the allocator: the daemon's bucket report makes new objects go to the
    newest bucket's functions (older active ones only when it has no room, and then a
    scale-out is asked once), never to a degraded bucket's (no room elsewhere: the COS tier);
    a released function whose blocks are all free takes data again; replay agrees."""
    clock = Clock()
    j = Journal(tmp_path / "j.log")
    h = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1), journal=j,
                        admin_token="a", clock=clock)
    g0, g1 = [f"sion-{i}" for i in range(3)], [f"sion-{i}" for i in range(3, 6)]
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9")]
            + [RegisterCapacity(clock(), str(i + 2), f"sion-{i}", 3) for i in range(6)])
    run = h.start_run("a", "fig9/9", "funcstore", 0).run_id
    put = iter(range(100, 200))

    def begin(obj: str, size: int = 2 * MIB) -> list[object]:
        return h.apply([BeginPut(clock(), str(next(put)), run, "", obj, size, obj, False, True)])[0]

    assert _functions(begin("a0")) == g0                          # no report yet: oldest first
    h.fetch_instructions("a", 0, 100, None, {fn: "active" for fn in g0})   # g0 sealed at a GC round
    out = begin("a1")
    assert _functions(out) == g1 and not [i for i in out if type(i).__name__ == "ScaleOut"]
    h.fetch_instructions("a", 0, 100, None, {**{fn: "degraded" for fn in g0}, **{fn: "active" for fn in g1}})
    out = begin("a2")                                              # newest empty: older active g1 takes it
    assert _functions(out) == g1 and [i for i in out if type(i).__name__ == "ScaleOut"]
    out = begin("a3")
    assert _functions(out) == g1 and not [i for i in out if type(i).__name__ == "ScaleOut"]  # once a report
    out = begin("a4")                                              # g1 full, g0 degraded: not there, COS
    assert out[0].placement.tier == "cos"  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="one of active, degraded, released"):
        h.fetch_instructions("a", 0, 100, None, {"sion-0": "sleeping"})
    h.apply([FinishPut(clock(), "300", run, "", "a0")])
    h.apply([Delete(clock(), "301", run, "a0")])                   # g0's blocks all free again
    h.fetch_instructions("a", 0, 100, None, {**{fn: "released" for fn in g0}, **{fn: "active" for fn in g1}})
    assert _functions(begin("a5")) == g0                           # released and empty: as good as new
    want = {n: rec.placement for n, rec in h.state.runs[run].objects.items()}
    assert h.state.stats()["buckets"] == {**{fn: "released" for fn in g0}, **{fn: "active" for fn in g1}}
    j.close()
    h2 = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1),
                         journal=Journal(tmp_path / "j.log"), admin_token="a", clock=clock)
    assert {n: rec.placement for n, rec in h2.state.runs[run].objects.items()} == want
    h2.state.validate_state()


def test_a_snapshot_keeps_the_busy_set_and_the_buckets_and_the_allocator_consults_them() -> None:
    from metadata_server._events import ReportBuckets, ReportLoad
    from metadata_server._snapshot import decode_snapshot, encode_snapshot, restore_into

    s = MetadataState()
    s.handle(RegisterCapacity(1.0, "r1", "sion-0", 4))
    s.handle(ReportBuckets(1.0, "r2", {"sion-0": "degraded"}))
    s.handle(ReportLoad(1.0, "r3", {"sion-0": [5, 0]}))
    t = MetadataState()
    restore_into(t, decode_snapshot(encode_snapshot(s, 3))[1])
    assert t.buckets.state == {"sion-0": "degraded"} and t.busy.until == {"sion-0": 2.0}
    assert not t.allocator.admits("sion-0", soft=False)      # the restored allocator's filters are its state's
    t.handle(ReportBuckets(2.0, "r4", {}))
    assert t.allocator.admits("sion-0", soft=False)
    t.validate_state()
