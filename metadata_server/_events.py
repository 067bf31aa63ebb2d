"""Events the metadata core takes and instructions it returns (STYLE 2-3).

Every event is a slotted dataclass carrying ``now`` (seconds from the injected
clock) and ``rid`` (a request id, for tracing); the core never reads a clock.
Events are also what the journal stores, so every field is a plain JSON value.

Instructions come in two kinds:

- replies to the caller (``Placed``, ``ReadRecorded``, ``Committed``,
  ``RunStarted``, ...): the Thrift handler turns them into return values;
- ``StorageInstruction`` subclasses (``DropObject``, ``ScaleOut``,
  ``ReleaseFunction``): work for the storage layer (the SION daemon). The core
  numbers them (``seq``) and keeps them in a pending queue until the daemon
  acknowledges them, so they survive a restart (see ``MetadataState``).

Not covered here: the state itself (``_state``) and placement (``_allocator``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "ObjectStateName", "RunStateName", "Tier",
    "Extent", "Placement",
    "Event", "RegisterWorkflow", "DeregisterWorkflow", "StartRun", "EndRun", "BeginPut", "FinishPut",
    "Get", "GetMany", "ReadDone", "Commit", "Delete", "RegisterCapacity", "UnregisterCapacity", "Tick", "AckInstructions", "Touch",
    "CosFallback", "ReportLoad", "ReportBuckets", "MoveObject", "EVENT_TYPES",
    "Instruction", "WorkflowRegistered", "RunStarted", "RunFinished", "Placed", "PutFinished",
    "ReadRecorded", "Committed", "Freed", "LastRead", "Released", "CapacityChanged",
    "RELEASED_AT_READ",
    "StorageInstruction", "DropObject", "ScaleOut", "ReleaseFunction", "MoveChunks",
]

ObjectStateName = Literal["pending", "allocated", "readable", "freed"]
RunStateName = Literal["running", "ended", "expired"]
Tier = Literal["memory", "cos", "empty"]
#: The reason of a ``DropObject`` that releases an object's function memory at its last
#: declared read and keeps its durable copy (the daemon's control loop matches it:
#: ``storage_functions.daemon._control.RELEASED_AT_READ``, the same string)
RELEASED_AT_READ = "released at last read"


@dataclass(frozen=True, slots=True)
class Extent:
    """One piece of an object in function memory: ``length`` bytes at ``offset`` of
    block ``block`` of storage function ``function``; ``chunk`` is the erasure-coded
    chunk index (0 for a slice)."""

    function: str
    block: int
    offset: int
    length: int
    chunk: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an object lives. ``kind``: ``slice`` (one extent in a shared block),
    ``blocks`` (d+p chunks, each in whole blocks of a distinct function), ``exact``
    (oracle policy, byte-granular), ``cos`` (COS tier only) or ``empty`` (zero bytes).
    ``daemon``: the id of the daemon whose functions hold the extents ("": the only daemon)."""

    tier: Tier
    kind: Literal["slice", "blocks", "exact", "cos", "empty"]
    extents: tuple[Extent, ...] = ()
    data_chunks: int = 1
    parity_chunks: int = 0
    chunk_size: int = 0
    daemon: str = ""


# --------------------------------------------------------------------------- events
@dataclass(slots=True)
class Event:
    now: float
    rid: str

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class RegisterWorkflow(Event):
    wds_text: str
    params: dict[str, int]
    source: str = "<rpc>"


@dataclass(slots=True)
class DeregisterWorkflow(Event):
    key: str


@dataclass(slots=True)
class StartRun(Event):
    """Start a run. The hints are Pocket's ``register_job`` hints (Sec. 3.1, 4.1):
    ``max_concurrency`` (most tasks running at once; 0: unknown), ``capacity_bytes``
    (what the run needs at most; 0: unknown) and ``latency_sensitive`` (False: the
    run's data may live in COS instead of function memory); beside them ``input_bytes``,
    the bytes of the run's inputs as its driver uploads them (0: unknown), which a lifetime
    model that takes the input size predicts with."""

    workflow_key: str
    token_digest: str               # token_digest(token): the run's token itself is never stored
    policy: str = "funcstore"
    ttl_s: float = 3600.0
    max_concurrency: int = 0
    capacity_bytes: int = 0
    latency_sensitive: bool = True
    # predicted lifetimes (seconds per object): filled by the core when it applies the event,
    # so the journal replays the predictions the run was placed with, whatever model serves then
    lifetimes: dict[str, float] = field(default_factory=dict)
    # the run id the core minted (filled when it applies the event, like ``lifetimes``): a replay
    # restores the same id whatever shard setting the server restarts with ("": a journal of
    # before shards, whose ids the counter re-mints)
    run_id: str = ""
    input_bytes: int = 0


@dataclass(slots=True)
class EndRun(Event):
    run_id: str
    outcome: str = "succeeded"


@dataclass(slots=True)
class BeginPut(Event):
    run_id: str
    function: str
    object: str
    size: int
    checksum: str = ""
    persist: bool = False
    adhoc: bool = False             # a key the WDS does not declare (Pocket-style; freed by delete)
    chunk_bytes: int = 0            # coded objects: bytes per chunk as the client's codec makes them


@dataclass(slots=True)
class FinishPut(Event):
    run_id: str
    function: str
    object: str


@dataclass(slots=True)
class Get(Event):
    run_id: str
    function: str
    object: str
    delete: bool = False            # ad-hoc objects: free after this read (at the reader's commit)


@dataclass(slots=True)
class GetMany(Event):
    """One ``Get`` per object, in order, by one reader: how the handler journals a batch's
    reads (those the journal keeps). Applying it applies those ``Get`` events one by one
    (``MetadataState.handle_gets``)."""

    run_id: str
    function: str
    objects: list[str]


@dataclass(slots=True)
class ReadDone(Event):
    """Reader ``function`` has the bytes of ``objects``, reads the metadata server answered as
    their last declared ones (``LastRead``): their function memory is released now."""

    run_id: str
    function: str
    objects: list[str]


@dataclass(slots=True)
class Commit(Event):
    run_id: str
    function: str


@dataclass(slots=True)
class Delete(Event):
    run_id: str
    object: str


@dataclass(slots=True)
class RegisterCapacity(Event):
    function: str
    blocks: int
    daemon: str = ""       # the daemon that owns the function ("": the only one)


@dataclass(slots=True)
class UnregisterCapacity(Event):
    function: str


@dataclass(slots=True)
class Tick(Event):
    """Time passes: runs idle past their TTL end, jiffy leases run out."""


@dataclass(slots=True)
class AckInstructions(Event):
    """The storage layer carried out every storage instruction up to ``upto`` (``daemon``: that
    one of several daemons did; each acknowledges on its own)."""

    upto: int
    daemon: str = ""


@dataclass(slots=True)
class Touch(Event):
    """Lease-only reads, coalesced: ``runs`` maps a run to the time of its latest such read
    (its TTL clock), ``objects`` maps a run to ``{object: time}`` (the objects' lease clocks).
    A ``Get`` that recorded nothing (a repeat, an undeclared reader, a read after the commit)
    changes only these clocks and some counters; the handler journals one ``Touch`` per tick
    instead of each such read, before any ``Tick`` that could read those clocks. Applying it
    moves each clock forward to the given time, never back."""

    runs: dict[str, float]
    objects: dict[str, dict[str, float]]


@dataclass(slots=True)
class CosFallback(Event):
    """The store refused an object where the allocator placed it, for lack of room (the
    daemon's pool has no such function): its writer stores it in the COS tier instead."""

    run_id: str
    function: str
    object: str
    reason: str = ""


@dataclass(slots=True)
class ReportLoad(Event):
    """The daemon's storage functions with requests queued or in flight when it fetched
    instructions: ``loads`` maps a function to ``[queued, inflight_bytes]`` (every function
    not named is idle). The handler journals one only when it changes the busy set
    (``_busy.BusyFunctions.changes``)."""

    loads: dict[str, list[int]]


@dataclass(slots=True)
class ReportBuckets(Event):
    """The daemon's GC window when it fetched instructions: ``buckets`` maps each function
    that must not take new data to ``active`` (an older bucket), ``degraded`` or
    ``released``; the report replaces the last one (``daemon``: that one of several daemons',
    which replaces only what it said of its own functions). Journaled only when it changed."""

    buckets: dict[str, str]
    daemon: str = ""


@dataclass(slots=True)
class MoveObject(Event):
    """A read of ``object`` found chunks of it on functions of a degraded GC bucket (SION Sec.
    5.3.3: data read while its bucket is degraded is copied forward): the core gives it a new home
    on the newest bucket's functions and tells the daemon (``MoveChunks``). The handler journals
    one after the read that asked for it (a lease-only read is not journaled itself)."""

    run_id: str
    object: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (RegisterWorkflow, DeregisterWorkflow, StartRun, EndRun, BeginPut, FinishPut, Get, Commit,
                Delete, RegisterCapacity, UnregisterCapacity, Tick, AckInstructions, Touch, CosFallback, GetMany,
                ReadDone, ReportLoad, ReportBuckets, MoveObject)
}


# --------------------------------------------------------------------- instructions
@dataclass(slots=True)
class Instruction:
    pass


@dataclass(slots=True)
class WorkflowRegistered(Instruction):
    key: str
    functions: int
    objects: int


@dataclass(slots=True)
class RunStarted(Instruction):
    run_id: str
    plan: dict[str, Any] = field(default_factory=dict)   # what the hints decided (tier, budget, reserve)


@dataclass(slots=True)
class RunFinished(Instruction):
    run_id: str
    state: RunStateName
    kept: tuple[str, ...]


@dataclass(slots=True)
class Placed(Instruction):
    """Reply to ``BeginPut``: write the data here. ``existing`` is true when this was
    the same write again (a retry); ``freed`` when that object is already gone, so
    the writer need not send data."""

    object: str
    size: int
    placement: Placement
    existing: bool = False
    freed: bool = False
    already_committed: bool = False


@dataclass(slots=True)
class PutFinished(Instruction):
    object: str
    committed: bool
    already_committed: bool = False


@dataclass(slots=True)
class ReadRecorded(Instruction):
    """Reply to ``Get``. ``already_committed``: the reading function committed in an
    earlier attempt; nothing was recorded and the SDK should return that attempt's
    result (its outputs exist) instead of running again."""

    object: str
    size: int
    checksum: str
    placement: Placement
    recorded: bool
    already_committed: bool = False


@dataclass(slots=True)
class Committed(Instruction):
    function: str
    records: int
    already_committed: bool = False


@dataclass(slots=True)
class Freed(Instruction):
    run_id: str
    object: str
    reason: str


@dataclass(slots=True)
class LastRead(Instruction):
    """The read just recorded was the object's last declared one (funcstore): once the reader
    has the bytes it says so (``ReadDone``), which releases the object's function memory."""

    run_id: str
    object: str


@dataclass(slots=True)
class Released(Instruction):
    """Reply to ``ReadDone``: the object's function memory is released (the reader lets its
    chunks go; the daemon's drop follows); it stays readable from its durable copy until its
    last reader commits."""

    run_id: str
    object: str


@dataclass(slots=True)
class CapacityChanged(Instruction):
    function: str
    blocks: int
    total_blocks: int


@dataclass(slots=True)
class StorageInstruction(Instruction):
    seq: int = field(default=0, kw_only=True)


@dataclass(slots=True)
class DropObject(StorageInstruction):
    """Drop the object's chunks from function memory (``extents``), and its COS copy
    unless ``keep_cos`` (a workflow output or a persisted object)."""

    run_id: str
    object: str
    extents: tuple[Extent, ...]
    keep_cos: bool
    reason: str
    tier: Tier = "memory"           # "cos": the object was written to COS only (no chunks in memory)


@dataclass(slots=True)
class ScaleOut(StorageInstruction):
    """Out of capacity: start storage functions for at least ``blocks`` more blocks."""

    blocks: int
    reason: str


@dataclass(slots=True)
class ReleaseFunction(StorageInstruction):
    """Every block of this storage function is free: it may leave the memory pool."""

    function: str


@dataclass(slots=True)
class MoveChunks(StorageInstruction):
    """Move the object's chunks from ``old`` to ``new`` extents (compaction of a chunk read on a
    degraded function, ``MoveObject``): the daemon ``daemon`` ("": the only one) copies each
    chunk whose place changed to its new place, then drops the old copy; it serves reads from
    the old place until the copy has landed. The allocator has the new extents taken and the
    old ones free already (degraded functions take no new data)."""

    run_id: str
    object: str
    old: tuple[Extent, ...]
    new: tuple[Extent, ...]
    daemon: str = ""
