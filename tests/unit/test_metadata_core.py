"""The pure metadata core: deferred commit, retries, errors, run lifecycle."""

from __future__ import annotations

import json

import pytest

from funcsion_rpc import errors as E
from metadata_server import (Committed, CoreDriver, DropObject, Freed, Placed, PutFinished, ReadRecorded,
                             RunFinished, reply, token_digest)

NOOUT = {
    "app": "noout", "workflow_id": 1, "category": "test",
    "spec": {
        "s1": {"stage_id": 1, "functions": [
            {"start": True, "name": "A", "input": ["in"], "output": ["x", "y"], "next": ["B"]}]},
        "s2": {"stage_id": 2, "functions": [
            {"start": False, "name": "B", "input": ["x", "y"], "output": [], "next": []}]},
    },
}


def freed(out) -> set[str]:
    return {i.object for i in out if isinstance(i, Freed) and "kept" not in i.reason}


def run_fig9_inputs(d, run: str) -> None:
    d.put(run, "", "in1", 10)
    d.put(run, "", "in2", 10)


def test_full_run_frees_each_object_at_its_last_commit(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    assert freed(d.put(r, "F1", "a", 200)) == {"in1"}
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 50)
    assert freed(d.put(r, "F2", "b2", 50)) == {"in2"}
    d.get(r, "F3", "a")
    assert freed(d.put(r, "F3", "c", 30)) == set()          # a still has F6 to come
    assert d.state.lookup(r, "a")["remaining"] == 1
    d.get(r, "F4", "b1")
    assert freed(d.put(r, "F4", "d", 30)) == {"b1"}
    d.get(r, "F5", "b2")
    d.get(r, "F5", "d")
    assert freed(d.put(r, "F5", "e", 30)) == {"b2", "d"}
    for o in ("a", "c", "e"):
        d.get(r, "F6", o)
    assert d.state.lookup(r, "a")["state"] == "readable"       # deferred: reads alone free nothing
    out = d.put(r, "F6", "result", 10)
    assert freed(out) == {"a", "c", "e"}
    assert d.state.lookup(r, "a")["committed_by"] == ["F3", "F6"]
    d.state.validate_state()
    run = d.state.runs[r]
    assert run.live_bytes == 10                                 # only the workflow output is left
    end = d.end(r)
    assert reply(end, RunFinished).kept == ("result",)
    drops = [i for i in end if isinstance(i, DropObject)]
    assert [(i.object, i.keep_cos) for i in drops] == [("result", True)]
    assert d.state.runs[r].summary()["kept"] == ["result"]
    assert d.state.allocator.allocated_bytes == 0


def test_retried_reader_records_once(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 10)
    for _ in range(3):                     # F3 crashes twice after reading a
        d.get(r, "F3", "a")
    assert d.state.runs[r].buffers["F3"] == {"a": None}
    assert reply(d.get(r, "F3", "a"), ReadRecorded).recorded is False
    d.put(r, "F3", "c", 10)
    assert d.state.lookup(r, "a")["remaining"] == 1    # one decrement, F6 still declared


def test_crash_before_last_output_then_retry(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 40, checksum="x1")          # crash before b2
    d.get(r, "F2", "in2")                             # retry
    again = reply(d.begin(r, "F2", "b1", 40, checksum="x1"), Placed)
    assert again.existing and not again.freed
    d.finish(r, "F2", "b1")
    assert d.state.lookup(r, "in2")["state"] == "readable"
    fin = d.put(r, "F2", "b2", 40)
    assert reply(fin, PutFinished).committed
    assert d.state.lookup(r, "in2")["state"] == "freed"


def test_retry_after_commit_never_fails_nor_decrements_twice(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 10, checksum="ka")         # commits: in1 freed
    assert d.state.lookup(r, "in1")["state"] == "freed"
    # F1 crashed after its commit and is retried by the platform
    got = reply(d.get(r, "F1", "in1"), ReadRecorded)
    assert got.already_committed and not got.recorded
    again = reply(d.begin(r, "F1", "a", 10, checksum="ka"), Placed)
    assert again.existing and again.already_committed
    fin = reply(d.finish(r, "F1", "a"), PutFinished)
    assert fin.already_committed and not fin.committed
    with pytest.raises(E.DuplicateWrite, match="'a' of run r-1 was already written by F1"):
        d.begin(r, "F1", "a", 11, checksum="other")
    assert d.state.lookup(r, "in1")["committed_by"] == ["F1"]


def test_retry_rewrites_output_already_freed_downstream(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 40, checksum="x1")
    d.get(r, "F4", "b1")
    d.put(r, "F4", "d", 10)                           # b1 freed by F4's commit
    p = reply(d.begin(r, "F2", "b1", 40, checksum="x1"), Placed)   # F2 retried before committing
    assert p.existing and p.freed                      # same write: accepted, nothing to send


def test_errors_name_run_function_object(d, fig9_path):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    with pytest.raises(E.UnknownRun, match="r-99"):
        d.get("r-99", "F1", "in1")
    with pytest.raises(E.UnknownObject, match="declares no object 'zz'") as ei:
        d.get(r, "F1", "zz")
    assert (ei.value.run_id, ei.value.function, ei.value.object) == (r, "F1", "zz")
    with pytest.raises(E.ObjectNotWritten, match="'a' of run r-1 is not written yet: F1"):
        d.get(r, "F3", "a")
    d.begin(r, "F1", "a", 10)
    with pytest.raises(E.ObjectNotWritten):             # begun but not finished
        d.get(r, "F3", "a")
    with pytest.raises(E.UndeclaredOutput, match="task F1 of run r-1 wrote 'c'.*outputs are a"):
        d.begin(r, "F1", "c", 10)
    with pytest.raises(E.UndeclaredOutput, match="client"):
        d.begin(r, "", "a", 10)
    with pytest.raises(E.InvalidRequest, match="last output 'a'"):
        d.commit(r, "F1")
    with pytest.raises(E.InvalidRequest, match="negative"):
        d.begin(r, "F2", "b1", -1)
    with pytest.raises(E.Unauthorized, match="wrong token for run r-1"):
        d.state.authorize(r, "nope")
    with pytest.raises(E.Unauthorized, match="missing token"):
        d.state.authorize(r, "")
    assert d.state.authorize(r, "tok-1").run_id == r
    with pytest.raises(E.Unauthorized, match="wrong token for run r-1"):
        d.state.authorize(r, "t\u00f6k-1-\u2603")            # not ASCII: wrong, not a TypeError
    assert d.state.runs[r].token_digest == token_digest("tok-1")   # the core keeps the digest only
    with pytest.raises(E.UnknownWorkflow):
        d.start("nope/1")
    with pytest.raises(E.InvalidRequest, match="jiffy:<lease_ms>"):
        d.start(d.key, policy="lru")
    d.end(r)
    with pytest.raises(E.RunEnded, match="run r-1 ended"):
        d.get(r, "F1", "in1")


def test_expired_message_counts_declared_reads(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 10)
    d.get(r, "F3", "a")
    d.put(r, "F3", "c", 10)
    d.put(r, "F2", "b1", 1)
    d.put(r, "F4", "d", 1)
    d.put(r, "F2", "b2", 1)
    d.put(r, "F5", "e", 1)
    for o in "ace":
        d.get(r, "F6", o)
    d.put(r, "F6", "result", 1)
    with pytest.raises(E.ObjectExpired) as ei:
        d.get(r, "", "a")                     # the client, not a declared reader
    assert str(ei.value) == ("ObjectExpired: 'a' of run r-1 was freed after its 2 declared reads "
                             "(committed by F3, F6); the client read it a third time")
    with pytest.raises(E.InvalidRequest, match="no function 'F9'"):
        d.get(r, "F9", "a")
    assert isinstance(ei.value, E.FuncsionError)


def test_explicit_commit_for_function_without_outputs(tmp_path):
    p = tmp_path / "noout.wds.json"
    p.write_text(json.dumps(NOOUT))
    d = CoreDriver(block_size=1000)
    key = d.register(p)
    d.capacity("s0", 8)
    r = d.start(key)
    d.put(r, "", "in", 5)
    d.get(r, "A", "in")
    d.put(r, "A", "x", 5)
    d.put(r, "A", "y", 5)
    d.get(r, "B", "x")
    d.get(r, "B", "y")
    out = d.commit(r, "B")
    assert reply(out, Committed).records == 2 and freed(out) == {"x", "y"}
    assert reply(d.commit(r, "B"), Committed).already_committed       # retried commit: no-op
    with pytest.raises(E.InvalidRequest, match="no function 'Z'"):
        d.commit(r, "Z")
    d.state.validate_state()


def test_explicit_delete_and_undeclared_reads(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    assert reply(d.get(r, "F5", "in1"), ReadRecorded).recorded is False   # not a declared reader
    assert d.state.runs[r].buffers == {}
    out = d.delete(r, "in1")
    assert freed(out) == {"in1"}
    assert d.delete(r, "in1") == []                                        # idempotent
    with pytest.raises(E.ObjectExpired, match=r"freed \(deleted\) with 1 of its 1 declared read outstanding"):
        d.get(r, "F1", "in1")
    with pytest.raises(E.ObjectNotWritten):
        d.delete(r, "a")
    with pytest.raises(E.UnknownObject):
        d.delete(r, "zz")


def test_persist_flag_keeps_cos_copy(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 10, persist=True)
    d.get(r, "F3", "a")
    d.put(r, "F3", "c", 10)
    d.put(r, "F2", "b1", 1)
    d.put(r, "F2", "b2", 1)
    d.put(r, "F4", "d", 1)
    d.put(r, "F5", "e", 1)
    for o in "ace":
        d.get(r, "F6", o)
    out = d.put(r, "F6", "result", 1)
    drop = [i for i in out if isinstance(i, DropObject) and i.object == "a"][0]
    assert drop.keep_cos and d.state.lookup(r, "a")["state"] == "kept"
    d.end(r)
    assert d.state.runs[r].summary()["kept"] == ["a", "result"]


def test_ttl_frees_everything_but_outputs(d):
    r = d.start(d.key, ttl_s=10)
    run_fig9_inputs(d, r)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 10)
    d.advance(5)
    assert d.tick() == []
    d.advance(6)
    out = d.tick()
    assert reply(out, RunFinished).state == "expired"
    assert freed(out) == {"in2", "a"}
    assert d.state.runs[r].state == "expired"
    assert d.state.allocator.allocated_bytes == 0
    with pytest.raises(E.RunEnded, match="expired"):
        d.put(r, "F2", "b1", 1)


def test_storage_instructions_queue_and_ack(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.delete(r, "in1")
    d.delete(r, "in2")
    pend = d.state.pending_instructions()
    drops = [i for i in pend if isinstance(i, DropObject)]
    assert [i.object for i in drops] == ["in1", "in2"]
    seqs = [i.seq for i in pend]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    d.ack(drops[0].seq)
    assert [i.seq for i in d.state.pending_instructions()] == [s for s in seqs if s > drops[0].seq]
    assert d.state.pending_instructions(after=seqs[-1]) == []


def test_stats_and_summaries(d):
    r = d.start(d.key)
    run_fig9_inputs(d, r)
    d.advance(1.0)
    d.get(r, "F1", "in1")       # its last declared read: its memory goes once F1 says it has the bytes
    st = d.state.stats()
    assert st["live_bytes"] == 20 and st["allocated_bytes"] >= 1000
    assert st["running_runs"] == 1 and st["samples"]
    s = st["runs"][0]
    assert s["run_id"] == r and s["policy"] == "funcstore" and s["counters"]["reads_recorded"] == 1
    assert s["live_mb_s"] == pytest.approx(20 / 1e6)
    assert len(d.state.list_objects(r)) == 9
    assert [o["object"] for o in d.state.list_objects(r, prefix="in")] == ["in1", "in2"]


def test_reregister_keeps_running_runs_on_their_graph(d, fig9_path):
    r = d.start(d.key)
    d.register(fig9_path)
    d.state.handle(__import__("metadata_server").DeregisterWorkflow(d.now, "x", d.key))
    run_fig9_inputs(d, r)                       # the run still has its HDAG
    with pytest.raises(E.UnknownWorkflow):
        d.start(d.key)
