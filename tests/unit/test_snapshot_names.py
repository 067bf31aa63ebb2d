"""The classes a metadata snapshot names: a snapshot (``_snapshot``) pickles the state's fields,
so each record class is written by its module and name, and a server reads back only the names
it has. Moving a pickled class to another module (splitting ``_state`` or ``_allocator``) would
make a new snapshot unreadable by the server before it; this pins the names, on a state whose
allocator holds every kind of record (a ``Solo`` pool key, slices, coded chunks, busy and
bucket filters)."""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from metadata_server._events import BeginPut, RegisterCapacity, RegisterWorkflow, StartRun
from metadata_server._journal_format import unframe_snapshot
from metadata_server._snapshot import decode_snapshot, encode_snapshot, restore_into
from metadata_server._state import MetadataState
from metadata_server._tokens import token_digest

PINNED = {
    ("metadata_server._allocator", "Allocator"), ("metadata_server._allocator", "Solo"),
    ("metadata_server._allocator", "_Block"), ("metadata_server._allocator", "_Function"),
    ("metadata_server._allocator", "_Pool"),
    ("metadata_server._buckets", "GcBuckets"), ("metadata_server._buckets", "_Newest"),
    ("metadata_server._buckets", "_Sealed"), ("metadata_server._busy", "BusyFunctions"),
    ("metadata_server._events", "Extent"), ("metadata_server._events", "Placement"),
    ("metadata_server._policy", "ReleasePolicy"), ("metadata_server._records", "ObjectRecord"),
    ("metadata_server._records", "RunRecord"), ("metadata_server._records", "WorkflowEntry"),
}
WDS = json.dumps({"app": "p", "workflow_id": 1, "category": "t", "spec": {
    "w": {"stage_id": 1, "functions": [{"start": True, "name": "w", "input": ["in"], "output": ["a", "b"],
                                        "next": ["r"]}]},
    "r": {"stage_id": 2, "functions": [{"start": False, "name": "r", "input": ["a", "b"], "output": [],
                                        "next": []}]}}})


class _Names(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.names: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.names.add((module, name))
        return super().find_class(module, name)


def _state() -> MetadataState:
    st = MetadataState(block_size=4096, data_chunks=2, parity_chunks=1)
    st.handle(RegisterWorkflow(0.0, "a", WDS, {}, "t"))
    for i in range(3):
        st.handle(RegisterCapacity(0.0, "b", f"s{i}", 64))
    for policy in ("pocket", "funcstore"):     # pocket keys its pools by Solo
        st.handle(StartRun(0.0, "c", "p/1", token_digest("tok"), policy, 1e9))
    for run in list(st.runs):
        st.handle(BeginPut(1.0, "e", run, "w", "a", 100, "x"))      # a slice
        st.handle(BeginPut(1.0, "e", run, "w", "b", 9000, "x"))     # coded chunks
    return st


def test_a_snapshot_names_the_record_classes_by_their_modules() -> None:
    blob = encode_snapshot(_state(), 1)
    reader = _Names(bytes(unframe_snapshot(blob)[1]))
    reader.load()
    ours = {n for n in reader.names if n[0].startswith("metadata_server")}
    assert ours == PINNED
    for module, name in ours:       # the name is where the class is, so the snapshot reads back
        cls = getattr(__import__(module, fromlist=[name]), name)
        assert (cls.__module__, cls.__qualname__) == (module, name)


def test_a_restored_state_snapshots_under_the_same_names() -> None:
    seq, fields = decode_snapshot(encode_snapshot(_state(), 7))
    fresh = MetadataState(block_size=4096, data_chunks=2, parity_chunks=1)
    restore_into(fresh, fields)
    fresh.validate_state()
    reader = _Names(bytes(unframe_snapshot(encode_snapshot(fresh, seq))[1]))
    reader.load()
    assert {n for n in reader.names if n[0].startswith("metadata_server")} == PINNED
