"""The metadata core's storage instructions: none is ever dropped; past the high-water
mark new runs are refused (back-pressure) while running runs go on; a journal replays
whatever back-pressure it was written under; COS-tier objects say why they are there."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import errors as E
from metadata_server import CoreDriver, Journal, MetadataHandler, MetadataState
from metadata_server._events import CosFallback


def _backlog(d: CoreDriver, run: str) -> None:
    for name in ("in1", "in2"):
        d.put(run, "", name, 10)
        d.delete(run, name)


def test_no_instruction_is_dropped_past_the_high_water_mark(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000, max_pending=2)
    d.register(fig9_path)
    d.capacity("s0", 64)
    key = next(iter(d.state.workflows))
    run = d.start(key)
    _backlog(d, run)                                   # 2 drops: at the mark
    d.put(run, "F1", "a", 10)
    d.delete(run, "a")                                 # past it: kept all the same
    seqs = [i.seq for i in d.state.pending]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 3
    assert "instructions_dropped" not in d.state.counters
    d.state.validate_state()


def test_past_the_high_water_mark_new_runs_wait_and_running_ones_go_on(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000, max_pending=2)
    d.register(fig9_path)
    d.capacity("s0", 64)
    key = next(iter(d.state.workflows))
    run = d.start(key)
    _backlog(d, run)
    with pytest.raises(E.ServiceUnavailable, match=r"\d+ storage instructions \(from #1\) wait for the storage "
                                                   r"daemon.*serve daemon --metadata.*Running runs go on"):
        d.start(key)
    assert d.state.counters["runs_refused_backlog"] == 1
    d.put(run, "", "in1x", 5, adhoc=True)              # the running run goes on
    d.end(run)
    d.ack(d.state.pending[-1].seq)                     # the daemon caught up
    assert d.start(key) == "r-2"


def test_a_journal_replays_runs_started_under_a_higher_mark(fig9_path: Path, tmp_path: Path) -> None:
    wds = fig9_path.read_text()
    with Journal(tmp_path / "j.db") as j:
        h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="adm")
        key = h.register_workflow("adm", wds, {}, "fig9").key
        h.register_capacity("adm", "s0", 64)
        d = CoreDriver(h.state)
        first = h.start_run("adm", key, "funcstore", 0).run_id
        for name in ("in1", "in2"):
            d.put(first, "", name, 10)
            d.delete(first, name)
        h.apply(d.log)                                 # journal what the driver applied
        d.log.clear()
        h.start_run("adm", key, "funcstore", 0)        # started with 2 instructions waiting
    with Journal(tmp_path / "j.db") as j:
        state = MetadataState(block_size=1000, max_pending=1)
        again = MetadataHandler(state, journal=j, admin_token="adm")
        assert set(again.state.runs) == {"r-1", "r-2"}
        with pytest.raises(Exception, match="wait for the storage daemon"):
            again.start_run("adm", key, "funcstore", 0)  # but now the mark holds


def test_cos_tier_objects_say_why(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000, memory_budget=5000)
    d.register(fig9_path)
    d.capacity("s0", 4)
    key = next(iter(d.state.workflows))
    cos_run = d.start(key, latency_sensitive=False)
    d.put(cos_run, "", "in1", 10)
    assert "latency-insensitive" in d.state.lookup(cos_run, "in1")["tier_reason"]
    run = d.start(key, capacity_bytes=2000)
    d.put(run, "", "in1", 3000)
    assert d.state.lookup(run, "in1")["tier_reason"] == "over the run's capacity hint of 2,000 bytes"
    other = d.start(key)
    d.put(other, "", "in1", 6000)
    assert d.state.lookup(other, "in1")["tier_reason"] == "over the server's memory budget of 5,000 bytes"
    d.state.memory_budget = None
    d.put(other, "", "in2", 9000)
    assert d.state.lookup(other, "in2")["tier_reason"].startswith("no room in the storage functions' pool")
    d.put(other, "F1", "a", 10)
    assert d.state.lookup(other, "a")["placement"].tier == "memory"
    assert d.state.lookup(other, "a")["tier_reason"] == ""


def test_a_refused_placement_moves_to_cos_and_gives_its_memory_back(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000)
    d.register(fig9_path)
    d.capacity("s0", 4)
    key = next(iter(d.state.workflows))
    run = d.start(key)
    d.begin(run, "", "in1", 600)
    assert d.state.allocator.allocated_bytes == 1000
    with pytest.raises(E.UndeclaredOutput):
        d.apply(CosFallback(d.now, "x", run, "F1", "in1", "no room"))
    out = d.apply(CosFallback(d.now, "x", run, "", "in1", "function 20 is outside the pool of 12 functions"))
    assert out[0].placement.tier == "cos"              # type: ignore[attr-defined]
    rec = d.state.lookup(run, "in1")
    assert rec["placement"].tier == "cos" and "outside the pool" in rec["tier_reason"]
    assert d.state.allocator.allocated_bytes == 0 and d.state.runs[run].cos_bytes == 600
    again = d.apply(CosFallback(d.now, "x", run, "", "in1", "no room"))   # a retried writer: the same
    assert again[0].existing                           # type: ignore[attr-defined]
    d.finish(run, "", "in1")
    d.put(run, "", "in2", 10)
    with pytest.raises(E.InvalidRequest, match="only an object whose put has not finished"):
        d.apply(CosFallback(d.now, "x", run, "", "in2", "late"))
    d.state.validate_state()
