"""The metadata core: one state machine, ``handle(event) -> list[Instruction]``.

It holds registered workflows, runs with their read counters, commit buffers
and committed functions, the allocator, the pending storage instructions and
the accounting. No sockets, no clock, no journal: the Thrift handler stamps
events with the time, journals them, and carries out the instructions. A
refused event raises a ``funcsion_rpc.errors.MetadataError`` *before* changing
anything, so the journal only ever holds events that applied.

Semantics (see DESIGN.md "Data path and invariants"):

- A ``Get`` by a declared reader adds the object to the reader's commit buffer
  once, however often the reader is retried (FuncStore Fig. 7).
- ``FinishPut`` of a function's last declared output, or ``Commit`` for a
  function with no outputs, commits the buffer: each record decrements its
  object once; the function is remembered as committed.
- Retry after a commit: the run remembers committed functions. Their gets are
  answered with ``already_committed=True`` and never fail on a freed input or
  record anything; their puts of the same bytes are accepted as the same write;
  their commits are no-ops. So nothing is decremented twice and the SDK returns
  the recorded result.
- What frees an object is the run's ``ReleasePolicy``; freeing returns memory
  to the allocator and queues a ``DropObject`` for the storage layer (chunks
  and COS copy; only chunks for workflow outputs and persisted objects).
- Under ``funcstore`` the read that makes every declared reader have read an
  object (a reader's repeats and retries count once: ``read_by``) is answered
  as its last (``LastRead``); once that reader has the bytes it says so
  (``ReadDone``), which *releases* the object's function memory (``_release``:
  blocks back to the allocator, a ``DropObject`` whose reason is
  ``RELEASED_AT_READ``, which the daemon carries out by letting the chunks go
  and keeping the durable copy). A reader that dies before it reports leaves
  the memory held; its re-run reports. The object stays readable, a re-run
  reader's read served from the durable copy, until the last reader's commit
  frees it (``funcstore:commit``: the memory too waits for it).
- ``EndRun`` and an idle run's TTL (``Tick``) free everything left; workflow
  outputs and persisted objects stay ``kept`` in COS and in the summary.
- Storage instructions stay pending until the storage layer acknowledges them
  (``AckInstructions``); none is ever discarded. Several daemons each
  acknowledge for themselves (``acks``): an instruction stays until every daemon
  that registered capacity or fetched has carried it out (each needs the drops of
  its own objects, every one a run's end). Back-pressure instead: while
  ``max_pending`` or more wait, ``StartRun`` is refused (``ServiceUnavailable``)
  and running runs go on. The journal replays with back-pressure off
  (``backpressure``), since every journaled ``StartRun`` was accepted once.
- Objects in the COS tier say why (``tier_reason``): a latency-insensitive run,
  over the run's capacity hint or the server's memory budget, no room in the
  pool, or the store refused the placement (``CosFallback``).

Layout: this module holds ``MetadataState`` (its fields, ``handle``, the queries, and the
handlers of workflows, runs, puts and TTLs); its other handlers come from two groups it
inherits, each over the fields ``_state_base.StateBase`` declares: ``_state_reads`` (reads,
commits, deletes, release at read) and ``_state_storage`` (capacity, COS fallback, load and
bucket reports, acknowledgements). The state is one object whatever module a handler lives in:
a snapshot (``_snapshot``) pickles its fields, never the class.
"""

from __future__ import annotations

import difflib
import hmac
from collections import deque
from typing import Any, Callable

import hdag
import wds
from funcsion_rpc import routing
from funcsion_rpc.errors import (DuplicateWrite, InvalidRequest, ObjectNotWritten, ServiceUnavailable, Unauthorized,
                                 UndeclaredOutput, UnknownObject, UnknownRun, UnknownWorkflow)

from ._allocator import MIB, Allocator
from ._buckets import GcBuckets
from ._busy import BusyFunctions
from ._daemons import choose_daemon
from ._events import (AckInstructions, BeginPut, Commit, CosFallback, Delete, DeregisterWorkflow, EndRun, Event,
                      FinishPut, Get, GetMany, Instruction, MoveObject, Placed, Placement, PutFinished, ReadDone, ReadRecorded,
                      RegisterCapacity, RegisterWorkflow, ReportBuckets, ReportLoad, RunFinished, RunStarted,
                      ScaleOut, StartRun, StorageInstruction, Tick, Touch, UnregisterCapacity, WorkflowRegistered)
from ._invariants import validate
from ._policy import (HeuristicPredictor, LifetimePredictor, group_key, parse_policy, predict_lifetimes,
                      predictor_revision)
from ._records import ObjectRecord, RunRecord, WorkflowEntry
from ._state_base import COS_TIER
from ._state_reads import ReadEvents
from ._state_storage import StorageEvents
from ._tokens import is_digest, token_digest

__all__ = ["MetadataState"]

#: predictions a workflow keeps per (run concurrency, input bytes) before it starts afresh
_PREDICTIONS_KEPT = 64


class MetadataState(ReadEvents, StorageEvents):
    """Everything the metadata server knows. Drive it with ``handle``."""

    def __init__(self, *, block_size: int = MIB, data_chunks: int = 10, parity_chunks: int = 2,
                 memory_budget: int | None = None, predictor: LifetimePredictor | None = None,
                 sample_interval_s: float = 0.1, max_samples: int = 10_000, max_pending: int = 100_000,
                 max_finished_runs: int = 1000, wds_limits: wds.Limits | None = None, memory_grain: int = 0,
                 shard: int = 0, shards: int = 1, busy: BusyFunctions | None = None) -> None:
        if not 0 <= shard < shards:
            raise ValueError(f"metadata shard {shard} of {shards}: the shard is an index into the shard list, "
                             f"0 to {shards - 1} (funcsion serve metadata --shard I/M)")
        #: this server is shard ``shard`` of ``shards`` (``funcsion_rpc.routing``): it mints only run
        #: ids it owns and takes capacity only for the functions it owns
        self.shard, self.shards = shard, shards
        self.allocator = Allocator(block_size, data_chunks, parity_chunks, memory_grain)
        #: the functions the daemon reports busy (``ReportLoad``): coded placement skips them
        self.busy = busy or BusyFunctions()
        #: the daemon's GC buckets (``ReportBuckets``): new data on the newest bucket's functions
        self.buckets = GcBuckets(self.allocator)
        self.link_filters()
        self.memory_budget = memory_budget
        self.wds_limits = wds_limits or wds.Limits()  # what a registered WDS may be and expand to
        self.predictor: LifetimePredictor = predictor or HeuristicPredictor()
        self.workflows: dict[str, WorkflowEntry] = {}
        self.runs: dict[str, RunRecord] = {}
        self.next_run = 1
        self.next_seq = 1
        self.pending: deque[StorageInstruction] = deque()
        self.acks: dict[str, int] = {}      # several daemons: the last seq each acknowledged
        self.max_pending = max_pending      # back-pressure: no new runs while this many wait
        self.backpressure = True
        self.max_finished_runs = max_finished_runs
        self.finished: deque[str] = deque()
        self.counters: dict[str, int] = {}
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=max_samples)
        self.sample_interval_s = sample_interval_s
        self.live_bytes = 0
        self.now = 0.0
        self._handlers: dict[type[Event], Callable[[Any], list[Instruction]]] = {
            RegisterWorkflow: self._register_workflow, DeregisterWorkflow: self._deregister_workflow,
            StartRun: self._start_run, EndRun: self._end_run, BeginPut: self._begin_put,
            FinishPut: self._finish_put, Get: self._get, Commit: self._commit_event, Delete: self._delete,
            RegisterCapacity: self._register_capacity, UnregisterCapacity: self._unregister_capacity,
            Tick: self._tick, AckInstructions: self._ack, Touch: self._touch,
            CosFallback: self._cos_fallback, GetMany: self._get_many, ReadDone: self._read_done,
            ReportLoad: self._report_load, ReportBuckets: self._report_buckets, MoveObject: self._move_object,
        }

    def link_filters(self) -> None:
        """Give the allocator this state's candidate filters (again after a snapshot restored
        both: one written before a filter existed has none)."""
        self.buckets.allocator = self.allocator
        self.allocator.filters = [(self.buckets.sealed, True), (self.buckets.newest, False), (self.busy, False)]

    def check_run_owner(self, run_id: str) -> None:
        """Refuse a call for a run another shard owns (``funcsion_rpc.routing.shard_of_run``):
        this shard never minted it, and answering would only mislead the caller."""
        if self.shards > 1 and (owner := routing.shard_of_run(run_id, self.shards)) != self.shard:
            raise InvalidRequest(f"run {run_id[:64]!r} belongs to metadata shard {owner} of {self.shards}, not this "
                                 f"one ({self.shard}): send each call to the shard its run id hashes to "
                                 "(funcsion_rpc.routing.shard_of_run over Endpoints.metadata_shards, in order)",
                                 run_id=run_id[:64])

    # -- entry point ----------------------------------------------------------------
    def handle(self, event: Event) -> list[Instruction]:
        if event.now > self.now:
            self.now = event.now
        out = self._handlers[type(event)](event)
        if self.now - (self.samples[-1][0] if self.samples else -1e18) >= self.sample_interval_s:
            self.samples.append((self.now, self.live_bytes, self.allocator.allocated_bytes))
        return out

    def handle_gets(self, now: float, rid: str, run_id: str, function: str, objects: list[str],
                    outs: list[list[Instruction]]) -> None:
        """``outs.append(handle(Get(now, rid, run_id, function, o)))`` for each object in order,
        with the checks that hold for the whole batch made once: a plain first or repeat read
        of a readable declared object by a running reader takes a short path, anything else
        the general one. Raises at the first refused read; ``outs`` then holds what applied."""
        if not objects:
            return
        outs.append(self.handle(Get(now, rid, run_id, function, objects[0])))   # run checks, clocks
        run = self.runs[run_id]
        if function not in run.graph.functions or function in run.committed or run.state != "running":
            outs.extend(self.handle(Get(now, rid, run_id, function, o)) for o in objects[1:])
            return
        infos, recs, buffers, counters = run.graph.objects, run.objects, run.buffers, run.counters
        buf = buffers.get(function)
        samples, interval = self.samples, self.sample_interval_s
        for o in objects[1:]:
            info, rec = infos.get(o), recs.get(o)
            if info is None or rec is None or rec.state != "readable" or rec.read_by is not None \
                    or function not in info.readers:
                outs.append(self.handle(Get(now, rid, run_id, function, o)))
                buf = buffers.get(function)
                continue
            rec.last_access = now                                       # _get's path, inline
            if buf is None:
                buf = buffers[function] = {}
            if o in buf:
                counters["reads_deduplicated"] = counters.get("reads_deduplicated", 0) + 1
                outs.append([ReadRecorded(o, rec.size, rec.checksum, rec.placement, False)])
            else:
                buf[o] = None
                counters["reads_recorded"] = counters.get("reads_recorded", 0) + 1
                outs.append([ReadRecorded(o, rec.size, rec.checksum, rec.placement, True)])
            if self.now - (samples[-1][0] if samples else -1e18) >= interval:      # handle's tail
                samples.append((self.now, self.live_bytes, self.allocator.allocated_bytes))

    def _get_many(self, ev: GetMany) -> list[Instruction]:
        outs: list[list[Instruction]] = []
        self.handle_gets(ev.now, ev.rid, ev.run_id, ev.function, ev.objects, outs)
        return [i for out in outs for i in out]

    # -- queries (not events: they change nothing) ------------------------------------
    def authorize(self, run_id: str, token: str) -> RunRecord:
        run = self.runs.get(run_id)
        if run is None:
            raise UnknownRun(f"no run {run_id!r} on this server (ended runs are kept for the last "
                             f"{self.max_finished_runs})", run_id=run_id)
        if not token or not hmac.compare_digest(run.token_digest, token_digest(token)):
            raise Unauthorized(f"{'missing' if not token else 'wrong'} token for run {run_id}: use the token "
                               "start_run returned for this run", run_id=run_id)
        return run

    def run_record(self, run_id: str) -> RunRecord:
        """The run (UnknownRun if this server never had it or forgot it)."""
        return self._run(run_id)

    def pending_instructions(self, after: int = 0, limit: int = 1000) -> list[StorageInstruction]:
        return [i for i in self.pending if i.seq > after][:limit]

    def lookup(self, run_id: str, name: str) -> dict[str, Any]:
        run = self._run(run_id)
        info = run.graph.objects.get(name)
        rec = run.objects.get(name)
        if info is None and rec is None:
            raise UnknownObject(self._unknown_msg(run, name), run_id=run_id, object=name)
        if rec is None:
            assert info is not None
            return {"object": name, "state": "pending", "producer": info.producer or "",
                    "declared_reads": info.read_count, "remaining": info.read_count, "size": 0,
                    "checksum": "", "persist": False, "committed_by": [], "placement": None, "adhoc": False,
                "tier_reason": ""}
        return {"object": name, "state": rec.state, "producer": rec.writer, "declared_reads": rec.declared,
                "adhoc": rec.adhoc,
                "remaining": rec.remaining, "size": rec.size, "checksum": rec.checksum, "persist": rec.persist,
                "committed_by": list(rec.committed_by), "placement": rec.placement,
                "freed_reason": rec.freed_reason, "written_at": rec.written_at, "readable_at": rec.readable_at,
                "freed_at": rec.freed_at, "tier_reason": rec.tier_reason, "released_at": rec.released_at}

    def describe_function(self, run_id: str, function: str) -> dict[str, Any]:
        run = self._run(run_id)
        fn = run.graph.functions.get(function)
        if fn is None:
            raise InvalidRequest(f"workflow {run.workflow_key} of run {run_id} has no function {function!r}",
                                 run_id=run_id, function=function)
        return {"function": function, "stage": fn.stage, "inputs": list(fn.inputs), "outputs": list(fn.outputs),
                "committed": function in run.committed}

    def list_objects(self, run_id: str, prefix: str = "") -> list[dict[str, Any]]:
        run = self._run(run_id)
        names = list(run.graph.objects) + [n for n in run.objects if n not in run.graph.objects]
        return [self.lookup(run_id, n) for n in names if n.startswith(prefix)]

    def stats(self) -> dict[str, Any]:
        a = self.allocator
        return {
            "now": self.now, "live_bytes": self.live_bytes, "allocated_bytes": a.allocated_bytes,
            "total_blocks": a.total_blocks, "free_blocks": a.free_blocks, "block_size": a.block_size,
            "storage_functions": len(a.functions), "workflows": len(self.workflows),
            "running_runs": sum(r.state == "running" for r in self.runs.values()),
            "pending_instructions": len(self.pending), "max_pending": self.max_pending,
            "last_seq": self.next_seq - 1,
            "functions": {f.name: f.blocks for f in a.functions.values() if not f.retired},
            "busy": sorted(fn for fn, t in self.busy.until.items() if t > self.now),
            "buckets": dict(self.buckets.state),
            "counters": dict(self.counters),
            "samples": list(self.samples), "runs": [r.summary() for r in self.runs.values()],
        }

    # -- helpers ----------------------------------------------------------------------
    @staticmethod
    def _undeclared_write_msg(run: RunRecord, function: str, name: str, outputs: tuple[str, ...]) -> str:
        """A task wrote a name its workflow does not declare: most often a typo of one of its outputs."""
        close = difflib.get_close_matches(name, outputs, n=1, cutoff=0.5)
        guess = f"; did you mean {close[0]!r}?" if close else "."
        return (f"task {function} of run {run.run_id} wrote {name!r}, which workflow {run.workflow_key} does not "
                f"declare (its outputs: {', '.join(outputs) or 'none'}){guess} Write a declared output, add "
                f"{name!r} to the function's \"output\" list, or, for a key the WDS cannot name, put it with "
                "adhoc=True")

    # -- workflows ------------------------------------------------------------------
    def _register_workflow(self, ev: RegisterWorkflow) -> list[Instruction]:
        workflow = wds.loads(ev.wds_text, source=ev.source, params=ev.params or None, limits=self.wds_limits)
        graph = hdag.build(workflow)
        entry = self.workflows[graph.key] = WorkflowEntry(graph.key, graph, ev.wds_text, dict(ev.params))
        self._predict(entry)
        self._bump("workflows_registered")
        return [WorkflowRegistered(graph.key, len(graph.functions), len(graph.objects))]

    def _predict(self, entry: WorkflowEntry, concurrency: int = 0, input_bytes: int = 0) -> dict[str, float]:
        """Every object's predicted lifetime for a run of ``concurrency`` tasks at once and
        ``input_bytes`` of inputs (0: unknown), made again when what predicts for the workflow's
        category changed (a new model, or it went). Kept per (concurrency, input size), the
        ``_PREDICTIONS_KEPT`` latest (input sizes vary from run to run)."""
        rev = predictor_revision(self.predictor, entry.graph.workflow.category)
        if rev != entry.revision or not entry.revision:
            entry.lifetimes, entry.revision, entry.at = predict_lifetimes(self.predictor, entry.graph), rev, {}
        if concurrency <= 0 and input_bytes <= 0:
            return entry.lifetimes
        at = (max(concurrency, 0), max(input_bytes, 0))
        hit = entry.at.get(at)
        if hit is None:
            if len(entry.at) >= _PREDICTIONS_KEPT:
                entry.at.clear()
            hit = entry.at[at] = predict_lifetimes(self.predictor, entry.graph, at[0], at[1])
        return hit

    def _deregister_workflow(self, ev: DeregisterWorkflow) -> list[Instruction]:
        if self.workflows.pop(ev.key, None) is None:
            raise UnknownWorkflow(f"no registered workflow {ev.key!r} (registered: "
                                  f"{', '.join(sorted(self.workflows)) or 'none'})")
        return []

    # -- runs -------------------------------------------------------------------------
    def _start_run(self, ev: StartRun) -> list[Instruction]:
        entry = self.workflows.get(ev.workflow_key)
        if entry is None:
            raise UnknownWorkflow(f"no registered workflow {ev.workflow_key!r}: register its WDS first "
                                  f"(registered: {', '.join(sorted(self.workflows)) or 'none'})")
        policy = parse_policy(ev.policy)
        if ev.ttl_s <= 0:
            raise InvalidRequest(f"ttl must be positive, got {ev.ttl_s}")
        if not is_digest(ev.token_digest):
            raise InvalidRequest("a run needs the SHA-256 digest of its token (64 hex digits), got "
                                 f"{len(ev.token_digest)} characters")
        if ev.max_concurrency < 0 or ev.capacity_bytes < 0 or ev.input_bytes < 0:
            raise InvalidRequest(f"run hints must be >= 0, got max_concurrency={ev.max_concurrency}, "
                                 f"capacity_bytes={ev.capacity_bytes}, input_bytes={ev.input_bytes}")
        if self.backpressure and len(self.pending) >= self.max_pending:
            self._bump("runs_refused_backlog")
            raise ServiceUnavailable(
                f"{len(self.pending):,} storage instructions (from #{self.pending[0].seq}) wait for the storage "
                f"daemon to acknowledge them, the most this server lets wait is {self.max_pending:,}: is "
                "`funcsion serve daemon --metadata` running and reaching this server? Running runs go on; new "
                "runs start once it catches up")
        if ev.run_id:                           # a replay: the id this server minted then
            run_id = ev.run_id
            if self.shards > 1 and (owner := routing.shard_of_run(run_id, self.shards)) != self.shard:
                raise InvalidRequest(f"the journal holds run {run_id}, which belongs to metadata shard {owner} of "
                                     f"{self.shards}, but this server is shard {self.shard}: restart it with the "
                                     "--shard I/M it wrote the journal with", run_id=run_id)
            number = run_id[2:]
            if run_id.startswith("r-") and number.isdigit():
                self.next_run = max(self.next_run, int(number) + 1)
        else:
            while routing.shard_of_run(f"r-{self.next_run}", self.shards) != self.shard:
                self.next_run += 1  # owned by another shard: ids never collide, with no coordination
            run_id = ev.run_id = f"r-{self.next_run}"
            self.next_run += 1
        run = self.runs[run_id] = RunRecord(run_id, ev.token_digest, entry.key, entry.graph, policy, ev.ttl_s, ev.now,
                                            ev.now, last_t=ev.now, concurrency=ev.max_concurrency,
                                            input_bytes=ev.input_bytes)
        if not ev.lifetimes:             # live (a replay has the journaled ones): see StartRun.lifetimes
            ev.lifetimes = dict(self._predict(entry, ev.max_concurrency, ev.input_bytes))
        run.predicted = ev.lifetimes
        out: list[Instruction] = []
        self._plan(run, ev, out)
        self._bump("runs_started")
        out.insert(0, RunStarted(run_id, dict(run.plan)))
        return out

    def _plan(self, run: RunRecord, ev: StartRun, out: list[Instruction]) -> None:
        """Rightsize a run from its hints (Pocket Sec. 4.1, Table 3), over storage functions:

        - not latency sensitive: no function memory at all, every object goes to COS
          (Pocket skips DRAM for such jobs and takes the cheapest tier);
        - ``capacity_bytes``: the run's memory budget (beyond it objects spill to COS, the
          next tier) and a reservation: when the pool has fewer free blocks, ask the storage
          layer to scale out now, before the first put waits for it;
        - ``max_concurrency`` N: Pocket provisions N times one Lambda's bandwidth; a storage
          function is a Lambda too, so the pool should hold N functions (or one erasure-code
          group, whichever is more) to serve N tasks at full speed.
        """
        a = self.allocator
        plan: dict[str, Any] = {"tier": "memory" if ev.latency_sensitive else "cos"}
        if not ev.latency_sensitive:
            run.cos_only = True
            run.plan = plan
            return
        want = 0
        if ev.capacity_bytes:
            run.budget_bytes = ev.capacity_bytes
            want = -(-ev.capacity_bytes // a.block_size)
            plan["budget_bytes"] = ev.capacity_bytes
        if ev.max_concurrency:
            per_fn = max((f.blocks for f in a.functions.values() if not f.retired), default=0)
            n = max(ev.max_concurrency, a.data_chunks + a.parity_chunks)
            missing_fns = n - sum(1 for f in a.functions.values() if not f.retired)
            plan["functions"] = n
            if missing_fns > 0 and per_fn:
                want = max(want, a.free_blocks + missing_fns * per_fn)
        short = want - a.free_blocks
        plan["reserve_blocks"] = want
        if short > 0:
            plan["scale_out_blocks"] = short
            self._emit(out, ScaleOut(short, f"run {run.run_id} hints: reserve {want} blocks"))
        run.plan = plan

    def _end_run(self, ev: EndRun) -> list[Instruction]:
        run = self._running(ev.run_id, ev.now)
        return self._finish_run(run, "ended", ev.outcome or "succeeded", ev.now)

    def _finish_run(self, run: RunRecord, state: Any, outcome: str, now: float) -> list[Instruction]:
        self._advance(run, now)
        out: list[Instruction] = []
        for rec in list(run.objects.values()):
            if rec.state == "readable" and (rec.keep or rec.persist):
                self._free(run, rec, f"run {state}", out, keep=True)
            elif rec.state in ("allocated", "readable"):
                self._free(run, rec, f"run {state}", out)
        run.cos_bytes = sum(r.size for r in run.objects.values() if r.state == "kept")
        run.buffers.clear()
        run.deletes.clear()
        run.state, run.outcome, run.ended = state, outcome, now
        self._refresh(run)
        # drop what no one can ask about any more: only kept objects stay listed
        run.objects = {n: r for n, r in run.objects.items() if r.state == "kept"}
        self._bump("runs_" + state)
        self.finished.append(run.run_id)
        while len(self.finished) > self.max_finished_runs:
            self.runs.pop(self.finished.popleft(), None)
        out.append(RunFinished(run.run_id, state, tuple(sorted(run.objects))))
        return out

    def _tick(self, ev: Tick) -> list[Instruction]:
        out: list[Instruction] = []
        for run in list(self.runs.values()):
            if run.state != "running":
                continue
            if ev.now - run.last_activity > run.ttl_s:
                out += self._finish_run(run, "expired", "ttl passed with no activity", ev.now)
            elif run.policy.has_lease:
                self._advance(run, ev.now)
                for rec in list(run.objects.values()):
                    if rec.state == "readable" and ev.now - rec.last_access > run.policy.lease_s:
                        self._free(run, rec, "lease expired", out, keep=rec.keep or rec.persist)
                self._refresh(run)
        return out

    def _touch(self, ev: Touch) -> list[Instruction]:
        """Lease-only reads, coalesced (see ``Touch``): clocks only move forward."""
        for run_id, t in ev.runs.items():
            run = self.runs.get(run_id)
            if run is not None and t > run.last_activity:
                run.last_activity = t
        for run_id, names in ev.objects.items():
            run = self.runs.get(run_id)
            if run is None:
                continue
            for name, t in names.items():
                rec = run.objects.get(name)
                if rec is not None and t > rec.last_access:
                    rec.last_access = t
        return []

    # -- puts -------------------------------------------------------------------------
    def _check_writer(self, run: RunRecord, function: str, name: str, adhoc: bool = False) -> hdag.ObjectInfo | None:
        """The declared object ``function`` may write, or None for a valid ad-hoc write."""
        info = run.graph.objects.get(name)
        if adhoc:
            if info is not None:
                raise InvalidRequest(f"{name!r} is declared in workflow {run.workflow_key}; write it without "
                                     "adhoc=True (ad-hoc keys are for objects the WDS does not list)",
                                     run_id=run.run_id, function=function, object=name)
            if not name or len(name) > 1024:
                raise InvalidRequest(f"ad-hoc object names must be 1 to 1024 characters, got {len(name)}",
                                     run_id=run.run_id, function=function, object=name[:64])
            if function and function not in run.graph.functions:
                raise InvalidRequest(f"workflow {run.workflow_key} of run {run.run_id} has no function "
                                     f"{function!r}", run_id=run.run_id, function=function, object=name)
            return None
        if info is None:
            fn_info = run.graph.functions.get(function) if function else None
            if fn_info is None:
                raise UnknownObject(self._unknown_msg(run, name), run_id=run.run_id, function=function, object=name)
            raise UndeclaredOutput(self._undeclared_write_msg(run, function, name, fn_info.outputs),
                                   run_id=run.run_id, function=function, object=name)
        if function == "":
            if info.producer is not None:
                raise UndeclaredOutput(f"the client wrote {name!r} in run {run.run_id}, but it is an output of "
                                       f"{info.producer}; the client may only write workflow inputs",
                                       run_id=run.run_id, object=name)
            return info
        fn = run.graph.functions.get(function)
        if fn is None:
            raise InvalidRequest(f"workflow {run.workflow_key} of run {run.run_id} has no function {function!r}",
                                 run_id=run.run_id, function=function, object=name)
        if info.producer != function:     # = name not in fn.outputs (one writer per object), O(1)
            raise UndeclaredOutput(f"task {function} of run {run.run_id} wrote {name!r}, which it does not "
                                   f"declare; its outputs are {', '.join(fn.outputs) or 'none'}",
                                   run_id=run.run_id, function=function, object=name)
        return info

    def _begin_put(self, ev: BeginPut) -> list[Instruction]:
        run = self._running(ev.run_id, ev.now)
        info = self._check_writer(run, ev.function, ev.object, ev.adhoc)
        if ev.size < 0:
            raise InvalidRequest(f"negative size {ev.size} for {ev.object!r} of run {run.run_id}",
                                 run_id=run.run_id, function=ev.function, object=ev.object)
        done = ev.function in run.committed
        rec = run.objects.get(ev.object)
        if rec is not None:
            if rec.size == ev.size and rec.checksum == ev.checksum:
                run.bump("same_write_retries")
                return [Placed(ev.object, rec.size, rec.placement, existing=True,
                               freed=rec.state in ("freed", "kept"), already_committed=done)]
            raise DuplicateWrite(
                f"{ev.object!r} of run {run.run_id} was already written by {rec.writer or 'the client'} "
                f"({rec.size} bytes, checksum {rec.checksum or '-'}); task {ev.function or 'client'} wrote it again "
                f"with {ev.size} bytes, checksum {ev.checksum or '-'}; objects are write-once",
                run_id=run.run_id, function=ev.function, object=ev.object)
        out: list[Instruction] = []
        placement, why = self._place(run, info, ev.size, out, ev.object, ev.chunk_bytes)
        reads = info.read_count if info is not None else 0
        keep = info is not None and info.is_output
        rec = ObjectRecord(ev.object, ev.function, reads, ev.size, ev.checksum, ev.persist, keep,
                           placement, reads, ev.now)
        rec.written_at = ev.now
        rec.tier_reason = why
        rec.adhoc = info is None
        if run.policy.counts_readers:
            rec.read_by = set()
        run.objects[ev.object] = rec
        if placement.tier == "memory":
            run.live_bytes += ev.size
            self.live_bytes += ev.size
            if not run.policy.exact_bytes:
                run.pending_alloc += self._grain_bytes(placement)
        elif placement.tier == "cos":
            run.cos_bytes += ev.size
        self._refresh(run)
        run.bump("puts")
        out.insert(0, Placed(ev.object, ev.size, placement, already_committed=done))
        return out

    def _place(self, run: RunRecord, info: hdag.ObjectInfo | None, size: int, out: list[Instruction],
               name: str = "", chunk_bytes: int = 0) -> tuple[Placement, str]:
        """Where the object goes, and why when that is the COS tier."""
        a = self.allocator
        if run.cos_only and size:
            run.bump("cos_by_hint")
            return COS_TIER, "the run is latency-insensitive (its data lives in COS only)"
        if info is None:
            key: Any = "adhoc"
        else:
            key = group_key(run.policy, run.predicted.get(name, 0.0), self.now - run.started, name)
        if size > a.block_size and chunk_bytes:
            try:
                a.chunk_bytes(size, chunk_bytes)
            except ValueError as exc:
                raise InvalidRequest(f"put of {name!r} in run {run.run_id}: {exc}", run_id=run.run_id,
                                     object=name) from None
        daemon = choose_daemon(a, f"{run.run_id}/{name}", size, run.run_id, key, chunk_bytes,
                               run.policy.fills_holes)      # None: one daemon
        need = a.new_blocks(size, run.run_id, key, chunk_bytes, run.policy.fills_holes, daemon)
        over_run = run.budget_bytes and need and run.alloc_bytes + need * a.block_size > run.budget_bytes
        if over_run or (self.memory_budget is not None and need
                        and a.allocated_bytes + need * a.block_size > self.memory_budget):
            run.bump("spilled_to_cos")
            self._bump("spilled_to_cos")
            if over_run:
                return COS_TIER, f"over the run's capacity hint of {run.budget_bytes:,} bytes"
            return COS_TIER, f"over the server's memory budget of {self.memory_budget:,} bytes"
        self.busy.advance(self.now)
        placement = a.allocate(size, run.run_id, key, chunk_bytes, run.policy.fills_holes, daemon)
        if placement is None:
            run.bump("cos_fallback")
            self._bump("cos_fallback")
            self._emit(out, ScaleOut(need, f"no room for {size} bytes of {name!r} (run {run.run_id})"))
            return COS_TIER, (f"no room in the storage functions' pool ({need} blocks of {a.block_size:,} bytes "
                          f"needed, {a.free_blocks} free of {a.total_blocks}); scale-out asked")
        if placement.kind == "blocks" and self.buckets.want_scale_out({e.function for e in placement.extents}):
            self._bump("scale_out_for_newest_bucket")
            self._emit(out, ScaleOut(max(1, need), f"the newest GC bucket had no room for {name!r} "
                                                   f"(run {run.run_id})"))
        return placement, ""

    def _finish_put(self, ev: FinishPut) -> list[Instruction]:
        run = self._running(ev.run_id, ev.now)
        rec = run.objects.get(ev.object)
        if rec is not None and rec.adhoc:
            if rec.writer != ev.function:
                raise UndeclaredOutput(f"ad-hoc {ev.object!r} of run {run.run_id} was begun by "
                                       f"{rec.writer or 'the client'}; {ev.function or 'the client'} cannot finish it",
                                       run_id=run.run_id, function=ev.function, object=ev.object)
        else:
            self._check_writer(run, ev.function, ev.object)
        if rec is None:
            raise ObjectNotWritten(f"finish_put of {ev.object!r} in run {run.run_id} by "
                                   f"{ev.function or 'the client'} before its begin_put",
                                   run_id=run.run_id, function=ev.function, object=ev.object)
        out: list[Instruction] = []
        if rec.state == "allocated":
            rec.state = "readable"
            rec.last_access = ev.now
            rec.readable_at = ev.now
            if rec.placement.tier == "memory":
                run.written_bytes += rec.size
                if not run.policy.exact_bytes:
                    run.pending_alloc -= self._grain_bytes(rec.placement)
                self._refresh(run)
        if ev.function in run.committed:
            return [PutFinished(ev.object, False, already_committed=True)]
        fn = run.graph.functions.get(ev.function)
        committed = fn is not None and fn.last_output == ev.object
        out.append(PutFinished(ev.object, committed))
        if committed:
            out += self._commit(run, ev.function, ev.now)
        return out

    # -- invariants --------------------------------------------------------------------
    def validate_state(self) -> None:
        """Assert every invariant of DESIGN.md that the state can see (``_invariants``)."""
        validate(self)
