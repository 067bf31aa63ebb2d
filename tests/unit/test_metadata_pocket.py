"""Pocket's extras in the metadata core (Pocket Sec. 3.2, 4.1): ad-hoc keys with
delete-after-read, persisted objects, and the run-start hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import errors as E
from metadata_server import (CoreDriver, DropObject, Freed, Journal, MetadataState, Placed, ReadRecorded, RunStarted,
                             ScaleOut, reply)


def freed(out) -> set[str]:
    return {i.object for i in out if isinstance(i, Freed)}


def inputs(d, r: str) -> None:
    d.put(r, "", "in1", 10)
    d.put(r, "", "in2", 10)


# -- ad-hoc keys -----------------------------------------------------------------------
def test_adhoc_object_is_freed_when_its_deleting_reader_commits(d):
    r = d.start(d.key)
    inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "side", 300, adhoc=True)           # F1 leaves a note for F3
    assert d.state.lookup(r, "side")["adhoc"] is True
    d.put(r, "F1", "a", 200)
    d.get(r, "F3", "a")
    d.get(r, "F3", "side", delete=True)
    assert d.state.lookup(r, "side")["state"] == "readable"  # deferred: a retried F3 still finds it
    d.get(r, "F3", "side", delete=True)                 # the retry
    out = d.put(r, "F3", "c", 30)
    assert "side" in freed(out)
    st = d.state.lookup(r, "side")
    assert (st["state"], st["freed_reason"]) == ("freed", "deleted after read")
    with pytest.raises(E.ObjectExpired, match="ad-hoc 'side'.*deleted after read"):
        d.get(r, "F4", "side")
    # the committed reader, retried once more, is told it committed; nothing fails
    assert reply(d.get(r, "F3", "side"), ReadRecorded).already_committed


def test_adhoc_without_delete_lives_until_run_end_and_never_counts_reads(d):
    r = d.start(d.key)
    inputs(d, r)
    d.put(r, "", "note", 50, adhoc=True)
    for fn in ("F1", "F2", "F3"):
        assert reply(d.get(r, fn, "note"), ReadRecorded).recorded is False
    assert d.state.lookup(r, "note")["state"] == "readable"
    out = d.end(r)
    assert "note" in freed(out)
    assert d.state.runs[r].live_bytes == 0


def test_client_get_with_delete_frees_at_once(d):
    r = d.start(d.key)
    d.put(r, "", "scratch", 20, adhoc=True)
    out = d.get(r, "", "scratch", delete=True)
    assert reply(out, ReadRecorded).size == 20
    assert "scratch" in freed(out)


def test_adhoc_rules(d):
    r = d.start(d.key)
    inputs(d, r)
    with pytest.raises(E.UndeclaredOutput, match="adhoc=True"):
        d.put(r, "F1", "undeclared", 10)
    with pytest.raises(E.InvalidRequest, match="'a' is declared"):
        d.begin(r, "F1", "a", 10, adhoc=True)
    with pytest.raises(E.InvalidRequest, match="delete=True is for ad-hoc"):
        d.get(r, "F1", "in1", delete=True)
    with pytest.raises(E.InvalidRequest, match="no function 'nope'"):
        d.begin(r, "nope", "x", 10, adhoc=True)
    d.begin(r, "F1", "half", 10, adhoc=True)
    with pytest.raises(E.ObjectNotWritten):
        d.get(r, "F2", "half")
    with pytest.raises(E.UndeclaredOutput, match="begun by F1"):
        d.finish(r, "F2", "half")
    # a retried ad-hoc write of the same bytes is the same write; other bytes are refused
    d.finish(r, "F1", "half")
    assert reply(d.begin(r, "F1", "half", 10, adhoc=True), Placed).existing
    with pytest.raises(E.DuplicateWrite):
        d.begin(r, "F1", "half", 11, adhoc=True)


# -- persisted objects ------------------------------------------------------------------
def test_persisted_object_is_kept_past_the_run_and_deleted_on_request(d):
    r = d.start(d.key)
    inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 200, persist=True)
    d.get(r, "F3", "a")
    d.put(r, "F3", "c", 30)
    d.get(r, "F6", "a")
    out = d.put(r, "F6", "result", 10)   # F6 writes before reading c, e: allowed, its commit frees a
    drop = next(i for i in out if isinstance(i, DropObject) and i.object == "a")
    assert drop.keep_cos                  # memory goes back, the COS copy stays
    assert d.state.lookup(r, "a")["state"] == "kept"
    d.end(r, "failed")
    assert "a" in d.state.runs[r].summary()["kept"]
    out = d.delete(r, "a")                # after the run: drops the kept copy
    drop = reply(out, DropObject)
    assert (drop.keep_cos, drop.tier) == (False, "cos")
    assert "a" not in d.state.runs[r].summary()["kept"]
    with pytest.raises(E.RunEnded):
        d.delete(r, "c")                  # not kept: its run is over


# -- run-start hints ---------------------------------------------------------------------
def test_not_latency_sensitive_puts_everything_in_cos(d):
    out = d.start_out(d.key, latency_sensitive=False)
    r = reply(out, RunStarted).run_id
    assert reply(out, RunStarted).plan == {"tier": "cos"}
    inputs(d, r)
    p = reply(d.begin(r, "F1", "a", 5000), Placed).placement
    assert (p.tier, p.kind) == ("cos", "cos")
    assert d.state.allocator.allocated_bytes == 0
    d.finish(r, "F1", "a")
    d.end(r)
    drops = {i.object: i.tier for i in d.state.pending if isinstance(i, DropObject) and i.run_id == r}
    assert drops["a"] == "cos" and drops["in1"] == "cos"


def test_capacity_hint_reserves_blocks_and_caps_memory(d):
    out = d.start_out(d.key, capacity_bytes=100 * 1000)   # 100 blocks of 1000 B; 64 are registered
    started = reply(out, RunStarted)
    assert started.plan["budget_bytes"] == 100_000 and started.plan["reserve_blocks"] == 100
    assert reply(out, ScaleOut).blocks == 36
    r2 = d.start(d.key, capacity_bytes=2500)                # budget: 2 blocks, then COS
    tiers = {}
    for name, size in (("in1", 900), ("in2", 900), ("a", 900)):
        fn = "F1" if name == "a" else ""
        tiers[name] = reply(d.begin(r2, fn, name, size), Placed).placement.tier
    assert tiers == {"in1": "memory", "in2": "memory", "a": "cos"}   # a third block is over budget
    assert d.state.runs[r2].counters["spilled_to_cos"] == 1
    assert d.state.runs[r2].alloc_bytes == 2000


def test_concurrency_hint_asks_for_one_function_per_task(d):
    out = d.start_out(d.key, max_concurrency=20)           # 1 function registered, 12 is one EC group
    plan = reply(out, RunStarted).plan
    assert plan["functions"] == 20
    assert reply(out, ScaleOut).blocks == 19 * 64
    small = d.start_out(d.key, max_concurrency=1)          # one group (12) is the floor; 1 is registered
    assert reply(small, RunStarted).plan["functions"] == 12 and reply(small, ScaleOut).blocks == 11 * 64
    with pytest.raises(E.InvalidRequest, match="hints must be >= 0"):
        d.start(d.key, capacity_bytes=-1)


def test_hints_and_adhoc_events_survive_a_journal_replay(tmp_path: Path, fig9_path: Path):
    j = Journal(str(tmp_path / "j.db"))
    drv = CoreDriver(block_size=1000)
    key = drv.register(fig9_path)
    drv.capacity("s0", 8)
    r = drv.start(key, capacity_bytes=3000, max_concurrency=3)
    drv.put(r, "", "in1", 10)
    drv.put(r, "", "tmp", 10, adhoc=True)
    drv.get(r, "F1", "tmp", delete=True)
    j.append(drv.log)
    again = MetadataState(block_size=1000)
    for ev in j.replay():
        again.handle(ev)
    j.close()
    assert again.runs[r].plan == drv.state.runs[r].plan
    assert again.runs[r].deletes == {"F1": {"tmp": None}}
    assert again.lookup(r, "tmp")["adhoc"] is True
    again.validate_state()
