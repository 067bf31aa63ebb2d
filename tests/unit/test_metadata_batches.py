"""Batched metadata calls in the core. ``MetadataState.handle_gets`` (the read path of
``get_batch``) is ``handle(Get)`` per object: the same replies, the same refusal at the same
object, the same state after, for random batches over every kind of read (first, repeat,
undeclared, unknown, not written, freed, ad hoc, after the reader's commit, the oracle's last
read), and the same after a journal replay. A batch of puts costs O(1) per object."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from funcsion_rpc.errors import MetadataError, UndeclaredOutput
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server._events import (BeginPut, Commit, FinishPut, Get, GetMany, RegisterCapacity,
                                     RegisterWorkflow, StartRun)
from metadata_server._handler import MetadataHandler
from metadata_server._journal import Journal
from metadata_server._state import MetadataState
from metadata_server._tokens import token_digest

OUTS = [f"o{i}" for i in range(6)]
READS = {"r0": OUTS[:4], "r1": OUTS[2:], "r2": OUTS}
NAMES = OUTS + ["adhoc", "nope"]
FUNCTIONS = list(READS) + ["", "w", "ghost"]


def _wds() -> str:
    return json.dumps({"app": "reads", "workflow_id": 1, "category": "t", "spec": {
        "write": {"stage_id": 1, "functions": [
            {"start": True, "name": "w", "input": ["in"], "output": OUTS, "next": list(READS)}]},
        "read": {"stage_id": 2, "functions": [
            {"start": False, "name": r, "input": ins, "output": [], "next": []} for r, ins in READS.items()]}}})


def _state(policy: str, interval: float, written: int, setup: list[tuple[str, str]]) -> MetadataState:
    st_ = MetadataState(block_size=4096, data_chunks=2, parity_chunks=1, sample_interval_s=interval)
    st_.handle(RegisterWorkflow(0.0, "a", _wds(), {}, "t"))
    for i in range(3):
        st_.handle(RegisterCapacity(0.0, "b", f"s{i}", 64))
    st_.handle(StartRun(0.0, "c", "reads/1", token_digest("tok"), policy, 1e9))
    run = next(iter(st_.runs))
    st_.handle(BeginPut(0.5, "d", run, "", "in", 10, "x", False))
    st_.handle(FinishPut(0.5, "d", run, "", "in"))
    for i, o in enumerate(OUTS[:-1]):       # the last output stays unwritten: its writer never finishes
        st_.handle(BeginPut(1.0, "e", run, "w", o, 100 * i, f"sum{i}", False))
        if i < written:
            st_.handle(FinishPut(1.0, "e", run, "w", o))
    st_.handle(BeginPut(1.0, "f", run, "", "adhoc", 7, "s", False, True))
    st_.handle(FinishPut(1.0, "f", run, "", "adhoc"))
    for t, (kind, fn) in enumerate(setup):   # earlier reads and commits (some free objects)
        try:
            if kind == "commit":
                st_.handle(Commit(2.0 + t, "g", run, fn))
            else:
                st_.handle(Get(2.0 + t, "g", run, fn, kind))
        except MetadataError:
            pass
    return st_


def _snapshot(s: MetadataState) -> Any:
    runs = {rid: (r.last_activity, r.live_bytes, dict(r.counters), {f: list(b) for f, b in r.buffers.items()},
                  sorted(r.committed), {n: (o.state, o.last_access, sorted(o.read_by or ()), o.remaining)
                                        for n, o in r.objects.items()})
            for rid, r in s.runs.items()}
    return (s.now, dict(s.counters), list(s.samples), s.live_bytes, [repr(i) for i in s.pending], runs)


setups = st.lists(st.tuples(st.sampled_from(NAMES + ["commit"]), st.sampled_from(list(READS) + [""])), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["funcstore", "oracle", "pocket"]), interval=st.sampled_from([0.0, 0.1, 5.0]),
       written=st.integers(0, 5), setup=setups, function=st.sampled_from(FUNCTIONS),
       batch=st.lists(st.sampled_from(NAMES), max_size=10))
def test_a_batch_of_reads_is_one_get_per_object(policy, interval, written, setup, function, batch):
    a, b = _state(policy, interval, written, setup), _state(policy, interval, written, setup)
    run = next(iter(a.runs))
    assert _snapshot(a) == _snapshot(b)
    outs: list[Any] = []
    try:
        a.handle_gets(9.0, "z", run, function, batch, outs)
        error_a = None
    except MetadataError as exc:
        error_a = (type(exc), str(exc))
    expected: list[Any] = []
    error_b = None
    for o in batch:
        try:
            expected.append(b.handle(Get(9.0, "z", run, function, o)))
        except MetadataError as exc:
            error_b = (type(exc), str(exc))
            break
    assert (outs, error_a) == (expected, error_b)
    assert _snapshot(a) == _snapshot(b)
    a.validate_state()


def test_batched_reads_replay_from_the_journal(tmp_path):
    """What a journaled server applied through ``get_batch`` (first, repeat and refused
    reads, a committed reader) comes back from its journal: read buffers, clocks, frees."""
    t = [10.0]
    h = MetadataHandler(journal=Journal(tmp_path / "j"), admin_token="adm", clock=lambda: t[0])
    for i in range(3):
        h.register_capacity("adm", f"s{i}", 64)
    key = h.register_workflow("adm", _wds(), {}, "t").key
    info = h.start_run("adm", key, "funcstore", 0, None)
    tok, run = info.token, info.run_id
    h.begin_put(tok, run, "", T.PutRequest("in", 10, "c", False))
    h.finish_put(tok, run, "", "in")
    h.begin_put_batch(tok, run, "w", [T.PutRequest(o, 100, "c", False) for o in OUTS])
    h.finish_put_batch(tok, run, "w", OUTS)
    t[0] = 11.0
    h.get_batch(tok, run, "r0", OUTS[:4])                 # first reads
    t[0] = 12.0
    h.get_batch(tok, run, "r0", OUTS[:4] + OUTS[4:])       # repeats, then undeclared reads
    t[0] = 13.0
    try:
        h.get_batch(tok, run, "r1", ["o2", "o3", "nope", "o4"])   # refused at "nope": o2, o3 applied
    except T.MetadataFault:
        pass
    h.commit(tok, run, "r0")
    t[0] = 14.0
    h.get_batch(tok, run, "r0", OUTS[:2])                 # after the commit
    h.flush_journal(touches=True)
    h.journal.close()
    log = Journal(tmp_path / "j")
    reads = [(type(e).__name__, getattr(e, "objects", None) or getattr(e, "object", None))
             for e in log.replay() if isinstance(e, (Get, GetMany))]
    log.close()
    # a batch's kept reads are one event; its lease-only reads (repeats, undeclared) none
    assert reads == [("GetMany", OUTS[:4]), ("GetMany", ["o2", "o3"])]
    again = MetadataHandler(journal=Journal(tmp_path / "j"), admin_token="adm")

    def durable(s: MetadataState) -> Any:
        r = s.runs[run]
        return (r.last_activity, {f: list(b) for f, b in r.buffers.items()}, sorted(r.committed),
                {n: (o.state, o.last_access, o.remaining) for n, o in r.objects.items()}, s.live_bytes,
                [repr(i) for i in s.pending])
    assert durable(again.state) == durable(h.state)
    assert list(again.state.runs[run].buffers["r1"]) == ["o2", "o3"]


class _NoScan(tuple):  # type: ignore[type-arg]
    """A function's outputs that must not be searched one by one."""

    def __contains__(self, item: object) -> bool:
        raise AssertionError("the writer check scanned the function's outputs")


def test_the_writer_check_does_not_scan_the_function_s_outputs():
    """A function with n outputs put them in O(n), not O(n^2): a put of a declared output
    checks its writer through the object's producer, not by searching the writer's outputs
    (1,000 outputs made each begin_put and finish_put of a batch ~7 us slower)."""
    import dataclasses
    s = _state("funcstore", 0.1, 0, [])
    run = next(iter(s.runs))
    graph = s.runs[run].graph
    fn = graph.functions["w"]
    graph.functions["w"] = dataclasses.replace(fn, outputs=_NoScan(fn.outputs))
    s.handle(FinishPut(1.0, "e", run, "w", "o0"))
    s.handle(BeginPut(1.0, "e", run, "w", "o5", 3, "c", False))
    s.handle(FinishPut(1.0, "e", run, "w", "o5"))
    with pytest.raises(UndeclaredOutput, match="does not declare"):
        s.handle(BeginPut(1.0, "e", run, "w", "in", 3, "c", False))
    assert s.runs[run].objects["o5"].state == "readable"
