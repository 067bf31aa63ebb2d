"""``MetadataState``'s read side (``_state``): reads, commits, deletes and release at
read, as event handlers on the state's fields (``_state_base``). Pure: no clock, no I/O.

- ``Get``: a declared reader's read goes into its commit buffer once, however often it is
  retried; a read after the reader's commit is answered ``already_committed``; the read that
  makes every declared reader have read an object is answered as its last (``LastRead``) under
  ``funcstore``, or frees it at once under the oracle; ad-hoc objects have no read count
  (``delete`` frees them at the reader's commit, or at once for the client).
- ``ReadDone``: the readers answered as last have the bytes: the object's function memory is
  released (``_release``), the object stays readable from its durable copy until its last
  reader commits.
- ``Commit`` (and ``_commit``, which ``FinishPut`` of a function's last output calls too): each
  buffered read decrements its object once; at zero the run's policy frees it.
- ``Delete``: an object freed by its name, or a kept one's COS copy dropped.

Not covered: puts, runs and workflows (``_state``), the storage layer's events
(``_state_storage``), the shared bookkeeping (``_state_base``), the batched read path
(``MetadataState.handle_gets``).
"""

from __future__ import annotations

from funcsion_rpc.errors import InvalidRequest, ObjectExpired, ObjectNotWritten, UnknownObject

from ._events import (RELEASED_AT_READ, Commit, Committed, Delete, DropObject, Freed, Get, Instruction, LastRead,
                      Placement, ReadDone, ReadRecorded, Released)
from ._records import ObjectRecord, RunRecord
from ._state_base import StateBase

__all__ = ["ReadEvents"]

_ORD = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}


def _nth(n: int) -> str:
    return _ORD.get(n, f"{n}th")


class ReadEvents(StateBase):
    """The handlers of ``Get``, ``ReadDone``, ``Commit`` and ``Delete``."""

    @staticmethod
    def _releasable(run: RunRecord, rec: ObjectRecord) -> bool:
        """Whether ``rec``'s function memory may go before its last commit: funcstore's, held
        in function memory, not released yet."""
        return (run.policy.releases_at_read and rec.released_at is None and rec.state == "readable"
                and rec.placement.tier == "memory" and bool(rec.placement.extents))

    def _read_done(self, ev: ReadDone) -> list[Instruction]:
        """The reader has the bytes of reads answered as last ones (``LastRead``): an object
        releases its memory once every reader so answered said so (a re-run reader answered
        again while another still fetches makes it wait for both; one that died is answered
        again when it re-runs, and its commit frees the object anyway). Any other name
        (released already, freed, not answered so to this reader) changes nothing: a repeat or
        a late report is harmless."""
        run = self._running(ev.run_id, ev.now)
        out: list[Instruction] = []
        for name in ev.objects:
            rec = run.objects.get(name)
            if rec is None or not rec.fetching or ev.function not in rec.fetching:
                continue
            rec.fetching.discard(ev.function)
            if not rec.fetching and self._releasable(run, rec):
                self._release(run, rec, out)
        if out:
            self._refresh(run)
        return out

    def _release(self, run: RunRecord, rec: ObjectRecord, out: list[Instruction]) -> None:
        """Every reader answered as the last of a readable object in function memory has its
        bytes (``releases_at_read``): its memory goes now, the object stays readable until its
        last reader commits. Its blocks go back to the allocator and its placement keeps no
        extents (what it held may be handed out again); the daemon lets its chunks go
        (``DropObject`` with reason ``RELEASED_AT_READ``, carried out at once; the reader
        evicts them itself too) and serves later reads, a re-run reader's, from the durable
        copy (its persistent buffer or COS); the commit that frees it drops that copy (``_free``)."""
        run.live_bytes -= rec.size
        self.live_bytes -= rec.size
        run.written_bytes -= rec.size
        self._free_memory(run, rec, out)
        held = rec.placement
        # no extents now, but the daemon stays: it holds the durable copy a re-run reader reads
        rec.placement = Placement(held.tier, held.kind, (), held.data_chunks, held.parity_chunks, held.chunk_size,
                                  held.daemon)
        rec.released_at = self.now
        rec.fetching = None
        run.bump("released_at_read")
        self._bump("objects_released_at_read")
        out.append(Released(run.run_id, rec.name))
        self._emit(out, DropObject(run.run_id, rec.name, held.extents, True, RELEASED_AT_READ, tier="memory"))

    # -- reads and commits ----------------------------------------------------------
    def _get(self, ev: Get) -> list[Instruction]:
        run = self._running(ev.run_id, ev.now)
        info = run.graph.objects.get(ev.object)
        rec = run.objects.get(ev.object)
        if info is None and (rec is None or not rec.adhoc):
            raise UnknownObject(self._unknown_msg(run, ev.object), run_id=run.run_id, function=ev.function,
                                object=ev.object)
        if info is not None and ev.delete:
            raise InvalidRequest(f"get(delete=True) of {ev.object!r}: it is declared in workflow {run.workflow_key}, "
                                 f"so funcsion frees it after its {info.read_count} declared read(s) commit; "
                                 "delete=True is for ad-hoc objects", run_id=run.run_id, function=ev.function,
                                 object=ev.object)
        if ev.function and ev.function not in run.graph.functions:
            raise InvalidRequest(f"workflow {run.workflow_key} of run {run.run_id} has no function "
                                 f"{ev.function!r}", run_id=run.run_id, function=ev.function, object=ev.object)
        if rec is None or rec.state == "allocated":
            who = (info.producer if info is not None else rec and rec.writer) or "the client"
            raise ObjectNotWritten(f"{'ad-hoc ' if info is None else ''}{ev.object!r} of run {run.run_id} is not "
                                   f"written yet: {who} has not finished its put; task {ev.function or 'client'} "
                                   "read it too early", run_id=run.run_id, function=ev.function, object=ev.object)
        if ev.function in run.committed:
            run.bump("reads_after_commit")
            return [ReadRecorded(ev.object, rec.size, rec.checksum, rec.placement, False, already_committed=True)]
        if rec.state == "freed":
            self._bump("reads_of_freed")
            raise ObjectExpired(self._expired_msg(run, rec, ev.function), run_id=run.run_id,
                                function=ev.function, object=ev.object)
        rec.last_access = ev.now
        if info is None:
            return self._read_adhoc(run, rec, ev)
        out: list[Instruction] = []
        recorded = False
        if ev.function in info.readers:
            buf = run.buffers.get(ev.function)
            if buf is None:
                buf = run.buffers[ev.function] = {}
            if ev.object not in buf:
                buf[ev.object] = None
                recorded = True
                run.bump("reads_recorded")
            else:
                run.bump("reads_deduplicated")
            if rec.read_by is not None and rec.state == "readable":
                rec.read_by.add(ev.function)
                if len(rec.read_by) == rec.declared and run.policy.frees_on_last_read:
                    out.append(ReadRecorded(ev.object, rec.size, rec.checksum, rec.placement, recorded))
                    self._free(run, rec, "last read (oracle)", out, keep=rec.persist)
                    self._refresh(run)
                    return out
                if len(rec.read_by) == rec.declared and self._releasable(run, rec):
                    if rec.fetching is None:
                        rec.fetching = set()
                    rec.fetching.add(ev.function)
                    return [ReadRecorded(ev.object, rec.size, rec.checksum, rec.placement, recorded),
                            LastRead(run.run_id, rec.name)]
        else:
            run.bump("reads_undeclared")
        out.append(ReadRecorded(ev.object, rec.size, rec.checksum, rec.placement, recorded))
        return out

    def _read_adhoc(self, run: RunRecord, rec: ObjectRecord, ev: Get) -> list[Instruction]:
        """A read of an ad-hoc object: no read count. With ``delete`` it is freed when the
        reader commits (so a retried reader still finds it), or at once for the client."""
        run.bump("reads_adhoc")
        out: list[Instruction] = [ReadRecorded(ev.object, rec.size, rec.checksum, rec.placement, False)]
        if ev.delete and rec.state == "readable":
            if ev.function:
                run.deletes.setdefault(ev.function, {})[ev.object] = None
            else:  # the client is still to fetch the bytes: the drop waits its grace (the control loop)
                self._free(run, rec, "deleted at read", out, keep=rec.persist)
                self._refresh(run)
        return out

    def _expired_msg(self, run: RunRecord, rec: ObjectRecord, function: str) -> str:
        who = ", ".join(rec.committed_by) or "no function"
        reads = f"its {rec.declared} declared read{'s' if rec.declared != 1 else ''}"
        task = f"task {function}" if function else "the client"
        if rec.adhoc:
            return f"ad-hoc {rec.name!r} of run {run.run_id} was freed ({rec.freed_reason}); {task} read it afterwards"
        if rec.freed_reason == "committed":
            return (f"{rec.name!r} of run {run.run_id} was freed after {reads} (committed by {who}); "
                    f"{task} read it a {_nth(rec.declared + 1)} time")
        return (f"{rec.name!r} of run {run.run_id} was freed ({rec.freed_reason}) with {rec.remaining} of "
                f"{reads} outstanding (committed by {who}); {task} read it afterwards")

    def _commit_event(self, ev: Commit) -> list[Instruction]:
        run = self._running(ev.run_id, ev.now)
        fn = run.graph.functions.get(ev.function)
        if fn is None:
            raise InvalidRequest(f"workflow {run.workflow_key} of run {run.run_id} has no function "
                                 f"{ev.function!r}", run_id=run.run_id, function=ev.function)
        if ev.function in run.committed:
            run.bump("commits_repeated")
            return [Committed(ev.function, 0, already_committed=True)]
        if fn.outputs:
            raise InvalidRequest(f"task {ev.function} of run {run.run_id} commits when it finishes the put of its "
                                 f"last output {fn.last_output!r}; explicit commit is for functions with no outputs",
                                 run_id=run.run_id, function=ev.function)
        return self._commit(run, ev.function, ev.now)

    def _commit(self, run: RunRecord, function: str, now: float) -> list[Instruction]:
        buf = run.buffers.pop(function, {})
        run.committed[function] = now
        out: list[Instruction] = [Committed(function, len(buf))]
        policy = run.policy
        for name in buf:
            rec = run.objects[name]
            rec.remaining -= 1
            rec.committed_by.append(function)
            if rec.remaining == 0 and policy.frees_on_commit and rec.state == "readable":
                self._free(run, rec, "committed", out, keep=rec.persist)
        for name in run.deletes.pop(function, {}):
            rec = run.objects[name]
            if rec.state in ("allocated", "readable"):
                self._free(run, rec, "deleted after read", out, keep=rec.persist)
        run.bump("commits")
        self._bump("commits")
        self._refresh(run)
        return out

    def _delete(self, ev: Delete) -> list[Instruction]:
        run = self._run(ev.run_id)
        kept = run.objects.get(ev.object)
        if kept is not None and kept.state == "kept":   # a persisted object or output: drop its COS copy
            kept.state, kept.freed_reason, kept.freed_at = "freed", "deleted", ev.now
            if run.state != "running" or kept.placement.tier == "cos":   # what cos_bytes counted
                run.cos_bytes -= kept.size
            run.bump("kept_deleted")
            out: list[Instruction] = [Freed(run.run_id, kept.name, "deleted")]
            self._emit(out, DropObject(run.run_id, kept.name, (), False, "deleted", tier="cos"))
            return out
        run = self._running(ev.run_id, ev.now)
        rec = run.objects.get(ev.object)
        if rec is None:
            if ev.object in run.graph.objects:
                raise ObjectNotWritten(f"delete of {ev.object!r} in run {run.run_id}: it was never written",
                                       run_id=run.run_id, object=ev.object)
            raise UnknownObject(self._unknown_msg(run, ev.object), run_id=run.run_id, object=ev.object)
        out = []
        if rec.state in ("allocated", "readable"):
            self._free(run, rec, "deleted", out)
            self._refresh(run)
        return out
