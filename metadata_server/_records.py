"""The records the metadata core keeps: registered workflows, runs, objects.

Plain slotted dataclasses with no behaviour beyond small derived values; the
rules that change them live in ``_state``. A run owns its objects, its commit
buffers (an insertion-ordered ``dict`` used as a set per function: FuncStore's
linked list with O(1) duplicate checks) and the set of functions that
committed, which is what makes a retry after a commit harmless.

A ``RunRecord`` pickled (a snapshot) before fields were added at its end restores
with those fields at their defaults (``_restore_slots``).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

import hdag

from ._events import Placement, RunStateName
from ._policy import ReleasePolicy

__all__ = ["WorkflowEntry", "ObjectRecord", "RunRecord", "ObjectState", "trace_byte_s"]

ObjectState = Literal["allocated", "readable", "freed", "kept"]


@dataclass(slots=True)
class WorkflowEntry:
    key: str
    graph: hdag.HDAG
    wds_text: str
    params: dict[str, int]
    lifetimes: dict[str, float] = field(default_factory=dict)   # predicted seconds per object
    revision: str = ""                                          # what predicted them (``predictor_revision``)
    # the same for a run's (concurrency, input bytes)
    at: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class ObjectRecord:
    name: str
    writer: str                     # "" for the client (workflow inputs)
    declared: int                   # read count from the HDAG
    size: int
    checksum: str
    persist: bool
    keep: bool                      # a workflow output or persisted: its COS copy stays
    placement: Placement
    remaining: int
    last_access: float
    state: ObjectState = "allocated"
    committed_by: list[str] = field(default_factory=list)
    read_by: set[str] | None = None          # oracle, funcstore: distinct declared readers that read
    freed_reason: str = ""
    written_at: float = 0.0                  # begin_put
    readable_at: float = 0.0                 # finish_put
    freed_at: float = 0.0                    # freed or kept
    adhoc: bool = False                      # not declared in the WDS: no read count, freed by delete
    tier_reason: str = ""                    # why it lives in the COS tier ("" in memory)
    # funcstore: when its last declared read released its function memory (its placement then
    # has no extents; the durable copy serves reads until the last commit frees it); None: not
    released_at: float | None = None
    # funcstore: readers answered "last read" that have not said they have the bytes yet (the
    # memory goes when none is left: none still fetches from it)
    fetching: set[str] | None = None


def _restore_slots(obj: Any, state: list[Any]) -> None:
    """Set a slotted dataclass's fields from a pickled state in field order; the fields the
    state has no value for (added at the end after it was pickled) take their defaults."""
    fs = fields(obj)
    for f, v in zip(fs, state):
        object.__setattr__(obj, f.name, v)
    for f in fs[len(state):]:
        if f.default is not MISSING:
            object.__setattr__(obj, f.name, f.default)
        elif f.default_factory is not MISSING:
            object.__setattr__(obj, f.name, f.default_factory())
        else:
            raise TypeError(f"a pickled {type(obj).__name__} without its field {f.name!r}, which has no default")


def trace_byte_s(rec: ObjectRecord, freed_at: float) -> float:
    """An object's part of the trace oracle: its bytes from the end of its write to its last
    read, no later than ``freed_at`` (0: not freed), when it lies in function memory."""
    if rec.placement.tier != "memory" or not rec.readable_at or rec.state != "readable":
        return 0.0
    end = min(rec.last_access, freed_at) if freed_at else rec.last_access
    return rec.size * max(end - rec.readable_at, 0.0)


@dataclass(slots=True)
class RunRecord:
    run_id: str
    token_digest: str               # SHA-256 of the run's token (``_tokens``)
    workflow_key: str
    graph: hdag.HDAG
    policy: ReleasePolicy
    ttl_s: float
    started: float
    last_activity: float
    state: RunStateName = "running"
    outcome: str = ""
    ended: float | None = None
    objects: dict[str, ObjectRecord] = field(default_factory=dict)
    buffers: dict[str, dict[str, None]] = field(default_factory=dict)
    committed: dict[str, float] = field(default_factory=dict)
    # accounting (bytes, byte-seconds), integrated on every change
    live_bytes: int = 0
    written_bytes: int = 0  # of live memory objects whose data arrived (readable): the oracle's bytes
    alloc_bytes: int = 0
    cos_bytes: int = 0
    peak_live: int = 0
    peak_alloc: int = 0
    live_byte_s: float = 0.0
    alloc_byte_s: float = 0.0
    last_t: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)
    # Pocket-style extras: ad-hoc objects each function read with delete=True (freed at its
    # commit), and what the run-start hints decided
    deletes: dict[str, dict[str, None]] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    cos_only: bool = False                   # latency_sensitive=False: no function memory
    concurrency: int = 0                     # max_concurrency hint (0: unknown): the wave features
    budget_bytes: int = 0                    # capacity hint: memory beyond it spills to COS
    # lifetimes: predicted at run start (seconds per object) and measured, readable -> freed by
    # the last reader's commit (what the lifetime datasets record)
    predicted: dict[str, float] = field(default_factory=dict)
    measured: dict[str, tuple[float, int]] = field(default_factory=dict)   # name -> (seconds, bytes)
    # the storage functions each freed memory object lay on and its [written, freed] times: when
    # the run held which functions (``funcsion bench lifetime``'s grouping measure)
    function_spans: list[tuple[tuple[str, ...], float, float]] = field(default_factory=list)
    trace_byte_s: float = 0.0               # the trace oracle of the objects freed so far
    pending_alloc: int = 0                  # grain bytes of memory objects begun but not finished
    # the run's input size (start_run's input_bytes; 0: unknown): the lifetime model's run inputs. Last, so
    # a snapshot of before it restores the fields before it in place (slotted dataclasses pickle in order)
    input_bytes: int = 0

    def __getstate__(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]

    def __setstate__(self, state: list[Any]) -> None:
        _restore_slots(self, state)

    def bump(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def trace_oracle_byte_s(self) -> float:
        """The oracle from this run's own trace: every object in function memory, its bytes
        from the end of its write (``readable_at``) to its last read (``last_access``, no later
        than its free), no rounding (bytes x seconds). No store can hold an object for less
        and still serve its reads, so it bounds every policy's memory-time from below. Freed
        objects were added to ``trace_byte_s`` as they were freed (``trace_freed``: a run's end
        forgets them); the ones still held count to their last read so far."""
        return self.trace_byte_s + sum(trace_byte_s(o, 0.0) for o in self.objects.values()
                                       if o.state == "readable")

    def trace_freed(self, rec: ObjectRecord, now: float) -> None:
        """``rec`` is being freed at ``now``: its part of the trace oracle is final."""
        self.trace_byte_s += trace_byte_s(rec, now)

    def summary(self) -> dict[str, Any]:
        kept = sorted(o.name for o in self.objects.values() if o.state == "kept")
        return {
            "run_id": self.run_id, "workflow": self.workflow_key, "policy": self.policy.spec,
            "state": self.state, "outcome": self.outcome, "started": self.started, "ended": self.ended,
            "live_bytes": self.live_bytes, "allocated_bytes": self.alloc_bytes, "cos_bytes": self.cos_bytes,
            "peak_live_bytes": self.peak_live, "peak_allocated_bytes": self.peak_alloc,
            "live_mb_s": self.live_byte_s / 1e6, "allocated_mb_s": self.alloc_byte_s / 1e6,
            "trace_oracle_byte_s": self.trace_oracle_byte_s(),
            "committed_functions": sorted(self.committed), "kept": kept,
            "objects": len(self.objects), "counters": dict(self.counters), "plan": dict(self.plan),
            "input_bytes": self.input_bytes,
        }
