"""``MetadataState``'s storage-layer side (``_state``): what the storage daemons tell the
metadata core, as event handlers on the state's fields (``_state_base``). Pure: no clock, no I/O.

- ``RegisterCapacity`` / ``UnregisterCapacity``: a storage function's blocks (idempotent; a
  function belongs to one daemon and, sharded, to one metadata shard);
- ``CosFallback``: the store refused an object where it was placed; it moves to the COS tier;
- ``ReportLoad`` / ``ReportBuckets``: the busy functions and the GC window, which steer
  placement (``_busy``, ``_buckets``);
- ``AckInstructions``: storage instructions carried out (by every daemon, with several) leave
  the pending queue;
- ``MoveObject``: GC compaction of what the metadata server placed (SION Sec. 5.3.3): a read
  found the object on a degraded function; it gets a new home on the newest bucket's functions
  of its own daemon (the allocator's filters), its record and the allocator take the new
  extents and free the old ones (safe: degraded functions take no new data), and the daemon is
  told (``MoveChunks``, old and new extents). Idempotent: an object not on a degraded function
  any more, freed, released at read or not in memory stays as it is; one that finds no room
  outside degraded functions stays too, and asks a scale-out (once per bucket report).

Not covered: placement itself (``_allocator``, ``MetadataState._place``), the instructions the
core emits (``_state_base._emit``), run TTLs and leases (``_state``'s ``Tick`` and ``Touch``).
"""

from __future__ import annotations

from funcsion_rpc import routing
from funcsion_rpc.errors import InvalidRequest, ObjectNotWritten, UndeclaredOutput

from ._allocator import MAX_FUNCTION_BLOCKS
from ._events import (AckInstructions, CapacityChanged, CosFallback, Instruction, MoveChunks, MoveObject, Placed,
                      RegisterCapacity, ReportBuckets, ReleaseFunction, ReportLoad, ScaleOut,
                      UnregisterCapacity)
from ._policy import group_key
from ._records import ObjectRecord, RunRecord
from ._state_base import COS_TIER, StateBase

__all__ = ["MAX_NAME", "StorageEvents"]

MAX_NAME = 256                      # characters in a storage function's name


class StorageEvents(StateBase):
    """The handlers of the storage layer's events."""

    def _register_capacity(self, ev: RegisterCapacity) -> list[Instruction]:
        """Set a storage function's capacity: idempotent, so a stack that registers its
        functions at every start over the same journal offers the same blocks."""
        if not 0 < len(ev.function) <= MAX_NAME:
            raise InvalidRequest(f"register_capacity needs a storage function name of 1 to {MAX_NAME} characters, "
                                 f"got {len(ev.function)}", function=ev.function[:64])
        if not 0 < ev.blocks <= MAX_FUNCTION_BLOCKS:
            raise InvalidRequest(f"register_capacity of {ev.function!r}: blocks must be 1 to {MAX_FUNCTION_BLOCKS:,} "
                                 f"(blocks of {self.allocator.block_size:,} bytes), got {ev.blocks:,}",
                                 function=ev.function)
        group = self.allocator.data_chunks + self.allocator.parity_chunks
        if self.shards > 1 and (owner := routing.shard_of_function(ev.function, self.shards, group)) != self.shard:
            raise InvalidRequest(f"storage function {ev.function!r} belongs to metadata shard {owner} of "
                                 f"{self.shards}, not this one ({self.shard}): register each function with the "
                                 "shard funcsion_rpc.routing.shard_of_function names (by its group of "
                                 f"{group}), so no two shards hand out its blocks", function=ev.function)
        held = self.allocator.daemon_of(ev.function)
        if ev.function in self.allocator.functions and held != ev.daemon:
            raise InvalidRequest(f"storage function {ev.function!r} is registered by daemon {held or '(the only one)'!r}; "
                                 f"daemon {ev.daemon or '(the only one)'!r} cannot register it too: function names "
                                 "are unique across a deployment (each daemon's carry its id)", function=ev.function)
        total = self.allocator.register(ev.function, ev.blocks, ev.daemon)
        return [CapacityChanged(ev.function, ev.blocks, total)]

    def _unregister_capacity(self, ev: UnregisterCapacity) -> list[Instruction]:
        in_use = self.allocator.unregister(ev.function)
        return [CapacityChanged(ev.function, -1, in_use)]

    def _cos_fallback(self, ev: CosFallback) -> list[Instruction]:
        """The store refused ``ev.object`` where it was placed: its memory goes back to the
        allocator and its placement becomes the COS tier. Only its writer, before its put
        finished; once in COS, the same call again is a repeat (a retried writer)."""
        run = self._running(ev.run_id, ev.now)
        rec = run.objects.get(ev.object)
        if rec is None:
            raise ObjectNotWritten(f"fallback_to_cos of {ev.object!r} in run {run.run_id} before its begin_put",
                                   run_id=run.run_id, function=ev.function, object=ev.object)
        if rec.writer != ev.function:
            raise UndeclaredOutput(f"{ev.object!r} of run {run.run_id} is written by {rec.writer or 'the client'}; "
                                   f"{ev.function or 'the client'} cannot move it to COS",
                                   run_id=run.run_id, function=ev.function, object=ev.object)
        if rec.placement.tier == "cos":
            return [Placed(rec.name, rec.size, rec.placement, existing=True)]
        if rec.state != "allocated" or rec.placement.tier != "memory":
            raise InvalidRequest(f"{ev.object!r} of run {run.run_id} is {rec.state} in the {rec.placement.tier} "
                                 "tier: only an object whose put has not finished moves to COS",
                                 run_id=run.run_id, function=ev.function, object=ev.object)
        out: list[Instruction] = []
        run.live_bytes -= rec.size
        self.live_bytes -= rec.size
        self._free_memory(run, rec, out)
        rec.placement = COS_TIER
        rec.tier_reason = f"the store refused its placement: {ev.reason[:300] or 'no room'}"
        run.cos_bytes += rec.size
        run.bump("cos_after_refusal")
        self._bump("cos_after_refusal")
        self._refresh(run)
        out.insert(0, Placed(rec.name, rec.size, rec.placement))
        return out

    def pool_size(self) -> int:
        """The storage functions the allocator places on (not withdrawn)."""
        return sum(1 for f in self.allocator.functions.values() if not f.retired)

    def _report_load(self, ev: ReportLoad) -> list[Instruction]:
        """The daemon's load report: the busy set follows it (``_busy``)."""
        loads = {fn: (int(v[0]), int(v[1])) for fn, v in ev.loads.items()}
        was = set(self.busy.until)
        self.busy.report(ev.now, loads, self.pool_size())
        if set(self.busy.until) - was:
            self._bump("busy_marks")
        return []

    def _report_buckets(self, ev: ReportBuckets) -> list[Instruction]:
        """The daemon's GC window: the bucket filters follow it (``_buckets``)."""
        self.buckets.report(ev.buckets, ev.daemon)
        return []

    def _ack(self, ev: AckInstructions) -> list[Instruction]:
        upto = ev.upto
        if ev.daemon:       # one of several daemons: what every one of them has carried out
            self.acks[ev.daemon] = max(self.acks.get(ev.daemon, 0), ev.upto)
            upto = min(self.acks.get(d, 0) for d in (self.allocator.daemons - {""}) | set(self.acks))
        while self.pending and self.pending[0].seq <= upto:
            self.pending.popleft()
        return []

    # -- GC compaction of allocator-placed chunks ------------------------------------------
    def wants_move(self, run_id: str, name: str) -> bool:
        """Whether a read of ``name`` just answered should move it (``MoveObject``): it is in
        memory, written, not released at read, and on a degraded function."""
        run = self.runs.get(run_id)
        rec = run.objects.get(name) if run is not None else None
        return run is not None and rec is not None and _movable(run, rec) and self.buckets.on_degraded(
            rec.placement.extents)

    def _move_object(self, ev: MoveObject) -> list[Instruction]:
        run = self.runs.get(ev.run_id)
        rec = run.objects.get(ev.object) if run is not None else None
        if run is None or rec is None or not _movable(run, rec) or not self.buckets.on_degraded(
                rec.placement.extents):
            return []
        old = rec.placement
        a = self.allocator
        key: object = "adhoc" if rec.adhoc else group_key(run.policy, run.predicted.get(rec.name, 0.0),
                                                           ev.now - run.started, rec.name)
        new = a.allocate(rec.size, run.run_id, key, old.chunk_size, run.policy.fills_holes, old.daemon or None)
        if new is None or new.tier != "memory" or self.buckets.on_degraded(new.extents):
            if new is not None and new.tier == "memory":
                a.free(new)                     # (the strict filter keeps this from happening)
            self._bump("moves_without_room")    # the next read tries again, once more functions came
            out: list[Instruction] = []
            if not self.buckets.asked:          # once per bucket report, as new data asks
                self.buckets.asked = True
                self._emit(out, ScaleOut(max(1, a.blocks_needed(rec.size, old.chunk_size)),
                                         f"no room outside degraded GC buckets to move {rec.name!r} "
                                         f"(run {run.run_id})"))
            return out
        rec.placement = new
        out = []
        self._emit(out, MoveChunks(run.run_id, rec.name, old.extents, new.extents, old.daemon))
        for fn in a.free(old):
            run.bump("functions_released")
            self._emit(out, ReleaseFunction(fn))
        run.bump("objects_moved")
        self._bump("objects_moved")
        self._bump("extents_moved", sum(1 for e in new.extents if e not in old.extents))
        self._refresh(run)
        return out


def _movable(run: RunRecord, rec: ObjectRecord) -> bool:
    """An object whose chunks a move may take elsewhere: written, in function memory in the
    allocator's blocks, not released at its last read, of a running run."""
    return (run.state == "running" and rec.state == "readable" and rec.released_at is None
            and rec.placement.tier == "memory" and rec.placement.kind in ("slice", "blocks"))
