"""The metadata server (FuncStore Sec. III-A to III-C): a Thrift service holding
workflow registrations, run lifecycle, read counters, commit buffers, the
lifetime-aware allocator, expiry and a journal.

Layers: ``MetadataState`` (pure core, ``handle(event) -> list[Instruction]``),
``Allocator`` and the release policies (pure), ``Journal`` (an append-only log with group commit,
compacted into snapshots), ``JournalShipper``/``restore_journal`` (the journal in COS: a host's
loss costs at most the shipping window),
``MetadataHandler`` (thin Thrift handler), ``MetadataServer`` (the socket loop).
Run tokens are kept as digests only (``token_digest``). Lifetime models are served
and finished runs recorded for training through ``attach_lifetimes``.
"""

from __future__ import annotations

from ._allocator import MIB, Allocator
from ._events import (EVENT_TYPES, AckInstructions, BeginPut, CapacityChanged, Commit, Committed, Delete,
                      DeregisterWorkflow, DropObject, EndRun, Event, Extent, Freed, FinishPut, Get, Instruction,
                      Placed, Placement, PutFinished, ReadRecorded, RegisterCapacity, RegisterWorkflow,
                      ReleaseFunction, RunFinished, RunStarted, ScaleOut, StartRun, StorageInstruction, Tick,
                      Touch, UnregisterCapacity, WorkflowRegistered)
from ._driver import CoreDriver, reply
from ._handler import MetadataHandler
from ._journal import Journal, JournalBusy, JournalCorrupt
from ._lifetimes import LifetimeRecorder, attach_lifetimes, rows_of_run
from ._policy import (HeuristicPredictor, LifetimePredictor, ReleasePolicy, group_key, parse_policy,
                      predict_lifetimes, pool_key)
from ._server import MetadataServer, tune_gc_for_serving
from ._ship import DEFAULT_SHIP_LAG_S, ControlStore, JournalShipper, RestoreReport, control_prefix, restore_journal
from ._state import MetadataState
from ._tokens import token_digest

__all__ = [
    "AckInstructions", "Allocator", "ControlStore", "DEFAULT_SHIP_LAG_S", "JournalShipper", "RestoreReport",
    "control_prefix", "restore_journal", "BeginPut", "CapacityChanged", "Commit", "Committed", "CoreDriver", "Delete",
    "DeregisterWorkflow", "DropObject", "EVENT_TYPES", "EndRun", "Event", "Extent", "FinishPut", "Freed", "Get",
    "HeuristicPredictor", "Instruction", "Journal", "JournalBusy", "JournalCorrupt", "LifetimePredictor",
    "LifetimeRecorder", "MIB", "MetadataHandler", "MetadataServer", "MetadataState", "Placed", "Placement",
    "PutFinished", "ReadRecorded", "RegisterCapacity", "RegisterWorkflow", "ReleaseFunction", "ReleasePolicy",
    "RunFinished", "RunStarted", "ScaleOut", "StartRun", "StorageInstruction", "Tick", "Touch", "UnregisterCapacity",
    "WorkflowRegistered", "attach_lifetimes", "group_key", "parse_policy", "pool_key", "predict_lifetimes", "reply", "rows_of_run", "token_digest", "tune_gc_for_serving",
]
