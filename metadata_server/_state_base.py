"""The shared core of ``MetadataState`` (``_state``): the fields every group of event
handlers reads, and the bookkeeping they share. Pure, like the state: no clock, no I/O.

- ``StateBase`` declares the state's fields for the handler groups (``_state_reads``,
  ``_state_storage``) and ``MetadataState`` itself; ``MetadataState.__init__`` sets them (a
  snapshot, ``_snapshot``, pickles exactly what it sets, so this class sets nothing);
- counters (``_bump``) and the pending storage instructions (``_emit``);
- finding a run and checking it is running (``_run``, ``_running``), its memory-time clock
  (``_advance``) and accounting (``_refresh``, ``_grain_bytes``);
- freeing an object (``_free``) and giving its blocks back (``_free_memory``).

Not covered: the events themselves (``_state`` for workflows, runs and puts; ``_state_reads``
for reads, commits, deletes and release at read; ``_state_storage`` for the storage layer's
events) and the queries (``_state``).
"""

from __future__ import annotations

from collections import deque

from funcsion_rpc.errors import RunEnded, UnknownRun

from ._allocator import Allocator
from ._buckets import GcBuckets
from ._busy import BusyFunctions
from ._events import DropObject, Freed, Instruction, Placement, ReleaseFunction, StorageInstruction
from ._records import ObjectRecord, RunRecord

__all__ = ["COS_TIER", "StateBase"]

#: the placement of an object in the COS tier (no function memory)
COS_TIER = Placement("cos", "cos")


class StateBase:
    """The fields and bookkeeping ``MetadataState``'s event handlers share."""

    # set by MetadataState.__init__ (see there): declared here for the handler groups
    shard: int
    shards: int
    allocator: Allocator
    busy: BusyFunctions
    buckets: GcBuckets
    runs: dict[str, RunRecord]
    next_seq: int
    pending: deque[StorageInstruction]
    acks: dict[str, int]
    counters: dict[str, int]
    live_bytes: int
    now: float

    def _bump(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def _emit(self, out: list[Instruction], ins: StorageInstruction) -> None:
        ins.seq = self.next_seq
        self.next_seq += 1
        self.pending.append(ins)          # until acknowledged; never dropped (see the module docstring)
        out.append(ins)

    # -- helpers ----------------------------------------------------------------------
    def _run(self, run_id: str) -> RunRecord:
        run = self.runs.get(run_id)
        if run is None:
            raise UnknownRun(f"no run {run_id!r} on this server", run_id=run_id)
        return run

    def _running(self, run_id: str, now: float) -> RunRecord:
        run = self._run(run_id)
        if run.state != "running":
            raise RunEnded(f"run {run_id} {run.state} ({run.outcome}) at t={run.ended:.3f}; start a new run",
                           run_id=run_id)
        self._advance(run, now)
        run.last_activity = now
        return run

    def _unknown_msg(self, run: RunRecord, name: str) -> str:
        return (f"workflow {run.workflow_key} of run {run.run_id} declares no object {name!r} "
                f"({len(run.graph.objects)} objects, e.g. {', '.join(list(run.graph.objects)[:3])}) and no "
                "ad-hoc object of that name was written (write one with put(..., adhoc=True))")


    def _advance(self, run: RunRecord, now: float) -> None:
        dt = now - run.last_t
        if dt > 0:
            # both from when an object's bytes arrive (its finish_put), so allocated >= live: an
            # object placed but not yet written holds nothing in the storage functions
            run.live_byte_s += (run.written_bytes if not run.policy.exact_bytes else run.live_bytes) * dt
            run.alloc_byte_s += max(run.alloc_bytes - run.pending_alloc, 0) * dt   # from when the bytes arrive
            run.last_t = now

    def _grain_bytes(self, placement: Placement) -> int:
        """The memory an object's extents lie on, in the storage functions' grains (whole
        blocks without one): what the run's allocated MB-s leaves out until the object's
        bytes have arrived (its ``finish_put``), as the storage functions hold nothing of it
        before (an edge grain shared with a neighbour is counted here too)."""
        a = self.allocator
        g = a.grains.grain if a.grains is not None else a.block_size
        return sum(((e.offset + e.length - 1) // g - e.offset // g + 1) * g for e in placement.extents if e.length)

    def _refresh(self, run: RunRecord) -> None:
        if run.policy.exact_bytes:  # byte-granular: the bytes written, from when they arrived
            run.alloc_bytes = run.written_bytes
        else:
            run.alloc_bytes = self.allocator.owner_bytes(run.run_id)
        run.peak_live = max(run.peak_live, run.live_bytes)
        run.peak_alloc = max(run.peak_alloc, run.alloc_bytes)

    def _free(self, run: RunRecord, rec: ObjectRecord, reason: str, out: list[Instruction],
              keep: bool = False) -> None:
        """Release an object's memory and tell the storage layer. ``keep``: its COS copy
        stays (state ``kept``)."""
        assert rec.state in ("allocated", "readable")
        if reason == "committed" and rec.state == "readable" and not rec.adhoc:   # a lifetime for the datasets
            run.measured[rec.name] = (self.now - rec.readable_at, rec.size)
        run.trace_freed(rec, self.now)
        if rec.placement.tier == "memory" and rec.released_at is None:
            run.live_bytes -= rec.size
            self.live_bytes -= rec.size
            if rec.state == "readable":
                run.written_bytes -= rec.size
            elif not run.policy.exact_bytes:
                run.pending_alloc -= self._grain_bytes(rec.placement)
            self._free_memory(run, rec, out)
        elif rec.placement.tier == "cos" and not keep:
            run.cos_bytes -= rec.size
        rec.state = "kept" if keep else "freed"
        rec.freed_reason = reason
        rec.freed_at = self.now
        run.bump("kept" if keep else "freed")
        self._bump("objects_kept" if keep else "objects_freed")
        out.append(Freed(run.run_id, rec.name, reason))
        if rec.placement.tier != "empty":
            self._emit(out, DropObject(run.run_id, rec.name, rec.placement.extents, keep, reason,
                                       tier=rec.placement.tier))

    def _free_memory(self, run: RunRecord, rec: ObjectRecord, out: list[Instruction]) -> None:
        """Give an object's blocks back; a function left with none leaves the pool."""
        if rec.placement.extents:
            run.function_spans.append((tuple(sorted({e.function for e in rec.placement.extents})),
                                       rec.written_at, self.now))
        for fn in self.allocator.free(rec.placement):
            run.bump("functions_released")
            self._emit(out, ReleaseFunction(fn))
