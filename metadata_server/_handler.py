"""The Thrift handler: decode, stamp, apply, journal, reply. Nothing else.

Every call checks its token, builds events stamped with the injected clock,
applies them to ``MetadataState`` under one lock, journals the applied events
(the server writes everything one loop round applied as one group, before any
of its replies goes out), hands storage instructions to listeners, and turns
the reply instructions into Thrift structs.

Lease-only reads are not journaled one by one: a ``Get`` that recorded
nothing (a repeated read, an undeclared reader, a read after the reader
committed) moves only the run's TTL clock, the object's lease clock and some
counters. The handler notes its time and journals one coalesced ``Touch`` per
``tick``, before the ``Tick`` that could read those clocks, so a replay takes
every TTL and lease decision the live server took. A crash forgets at most one
tick interval of such reads (as if the server had been down that much longer)
and the counters of lease-only reads (``reads_deduplicated``,
``reads_undeclared``, ``reads_adhoc``, ``reads_after_commit``) count again
from the replay. A ``MetadataError`` from
the core becomes a ``MetadataFault`` with its code; anything else becomes
``MetadataFault(INTERNAL)`` so a client never sees a raw transport error for a
server bug.

A read (``get``, ``get_batch``, ``read_batch``) of an object whose extents lie on a
function the daemon's GC window calls degraded is followed by a ``MoveObject`` event,
applied and journaled on its own after the read (a lease-only read leaves no event a replay
could derive it from): GC compaction of what the allocator placed (``_state_storage``).

Storage instructions reach the storage layer two ways: in-process listeners
(``add_listener``; the local stack's daemon) and ``fetch_instructions`` (a
remote daemon polls with the last ``seq`` it carried out, which acknowledges
everything up to it).
"""

from __future__ import annotations

import functools
import hmac
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import wds
from funcsion_rpc.errors import InvalidRequest, MetadataError, Unauthorized, UnknownRun
from funcsion_rpc.gen.metadata import ttypes as T
from funcsion_rpc.limits import MAX_WDS_BYTES

from . import _events as ev
from ._buckets import GcBuckets
from ._journal import Journal
from ._snapshot import decode_snapshot, encode_snapshot, restore_into
from ._lifetimes import expires_at_ms
from ._records import RunRecord
from ._replies import GetResultEncoder, freed_or_last, read_columns, to_thrift_instruction, to_thrift_placement
from ._state import MetadataState
from ._tokens import same_token, token_digest

__all__ = ["CONTROL_CALLS", "MetadataHandler", "RUN_CALLS", "to_thrift_placement", "to_thrift_instruction"]

log = logging.getLogger("funcsion.metadata")
F = TypeVar("F", bound=Callable[..., Any])
_Get, _ReadRecorded = ev.Get, ev.ReadRecorded
#: Service methods by the token their first argument carries (``health`` takes none).
CONTROL_CALLS = frozenset({"register_workflow", "deregister_workflow", "start_run", "register_capacity",
                           "unregister_capacity", "stats", "fetch_instructions"})
RUN_CALLS = frozenset({"end_run", "begin_put", "finish_put", "get", "commit", "delete_object", "lookup",
                       "list_objects", "describe_function", "get_batch", "read_batch", "read_done", "begin_put_batch", "finish_put_batch",
                       "fallback_to_cos"})
Listener = Callable[[ev.StorageInstruction], None]
VERSION = "1"


def _boundary(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MetadataError as exc:
            raise T.MetadataFault(exc.code, exc.message, exc.run_id, exc.function, exc.object) from None
        except Exception as exc:  # a bug: report it, keep serving
            log.exception("internal error in %s", fn.__name__)
            raise T.MetadataFault(T.ErrorCode.INTERNAL, f"internal error in {fn.__name__}: {exc!r}", "", "",
                                  "") from None
    return wrapper  # type: ignore[return-value]


def _freed(out: list[ev.Instruction]) -> list[str]:
    return [i.object for i in out if isinstance(i, ev.Freed)]


class MetadataHandler:
    """Implements the ``Metadata`` Thrift service over one ``MetadataState``."""

    def __init__(self, state: MetadataState | None = None, *, journal: Journal | None = None,
                 admin_token: str = "", clock: Callable[[], float] = time.time,
                 default_ttl_s: float = 3600.0) -> None:
        self.state = state or MetadataState()
        self.journal = journal
        self.admin_token = admin_token
        self.clock = clock
        self.default_ttl_s = default_ttl_s
        self.lock = threading.RLock()
        self.started = clock()
        self.instance = secrets.token_hex(8)        # this process (stats "instance": a follower sees a replacement)
        self._rids = map("m{}".format, itertools.count(1))     # request ids m1, m2, ...
        self._listeners: list[Listener] = []
        self._run_observers: list[Callable[[RunRecord], None]] = []
        # group commit: the server loop sets this, applies every ready request, then calls
        # flush_journal() before it sends any reply, so no reply leaves before its events are durable
        self.defer_journal = False
        self._unflushed: list[ev.Event] = []
        # called after each journal write (under the lock, before the replies it covers): a
        # synchronous shipper to COS (``_ship``); what it raises fails the write's requests
        self.after_journal: Callable[[], object] | None = None
        # lease-only reads not journaled yet (see the module docstring): run -> time, run -> object -> time
        self._touched_runs: dict[str, float] = {}
        self._touched_objects: dict[str, dict[str, float]] = {}
        self._placements: dict[int, tuple[ev.Placement, T.Placement]] = {}
        self._replies = GetResultEncoder(self._placement)
        if journal is not None:
            self.replay()

    # -- plumbing -------------------------------------------------------------------
    def replay(self) -> int:
        """Rebuild the state from the journal; returns how many events were replayed."""
        assert self.journal is not None
        n = 0
        # every journaled workflow passed the limits of its day, and every journaled run started
        # under the back-pressure of its day; lower ones now must not refuse them
        limits, self.state.wds_limits = self.state.wds_limits, wds.Limits.unlimited()
        with self.lock:
            self.state.backpressure = False
            try:
                blob = self.journal.snapshot()
                if blob is not None:
                    seq, fields = decode_snapshot(blob, f"snapshot {self.journal.snapshot_path}")
                    restore_into(self.state, fields)
                    log.info("restored the snapshot of %d events", seq)
                for event in self.journal.replay():
                    self.state.handle(event)
                    n += 1
            finally:
                self.state.wds_limits = limits
                self.state.backpressure = True
        log.info("replayed %d journaled events", n)
        return n

    def _journal(self, events: Sequence[ev.Event]) -> None:
        assert self.journal is not None
        if not events:
            return
        if self.defer_journal:
            self._unflushed.extend(events)
        else:
            self._append(events)

    def _append(self, events: Sequence[ev.Event]) -> None:
        """Journal ``events`` (applied, under the lock) and compact the journal when it asks."""
        assert self.journal is not None
        self.journal.append(events)
        if not self._unflushed and self.journal.wants_compaction():
            self.journal.compact(encode_snapshot(self.state, self.journal.seq))
        if self.after_journal is not None:
            self.after_journal()

    @staticmethod
    def _lease_only(e: ev.Event, out: list[ev.Instruction]) -> ev.ReadRecorded | None:
        """The reply of a ``Get`` that changed only clocks and counters, else None."""
        if type(e) is _Get and len(out) == 1 and not e.delete:
            r = out[0]
            if type(r) is _ReadRecorded and not r.recorded:
                return r
        return None

    def _durable(self, events: Sequence[ev.Event], outs: list[list[ev.Instruction]]) -> Sequence[ev.Event]:
        """The applied events to journal: all but lease-only reads, which are noted as touches
        (``_lease_only`` and ``_note_touch``, inline: a batch of reads runs this per object)."""
        keep: list[ev.Event] | None = None
        runs, objects = self._touched_runs, self._touched_objects
        for i, e in enumerate(events):
            out = outs[i]
            if type(e) is _Get and len(out) == 1 and not e.delete:
                r = out[0]
                if type(r) is _ReadRecorded and not r.recorded:
                    if keep is None:
                        keep = list(events[:i])
                    t, run_id = e.now, e.run_id
                    if t > runs.get(run_id, -1.0):
                        runs[run_id] = t
                    if not r.already_committed:
                        names = objects.get(run_id)
                        if names is None:
                            names = objects[run_id] = {}
                        if t > names.get(e.object, -1.0):
                            names[e.object] = t
                    continue
            if keep is not None:
                keep.append(e)
        return events if keep is None else keep

    def _note_touch(self, e: ev.Get, run_only: bool) -> None:
        runs = self._touched_runs
        if e.now > runs.get(e.run_id, -1.0):
            runs[e.run_id] = e.now
        if not run_only:          # a read after the reader's commit does not touch the object's lease
            objs = self._touched_objects.get(e.run_id)
            if objs is None:
                objs = self._touched_objects[e.run_id] = {}
            if e.now > objs.get(e.object, -1.0):
                objs[e.object] = e.now

    def _journal_touches(self) -> None:
        """Journal the lease-only reads noted since the last call as one ``Touch`` (under the lock)."""
        if not self._touched_runs:
            return
        touch = ev.Touch(self.clock(), self._rid_next(), self._touched_runs, self._touched_objects)
        self._touched_runs, self._touched_objects = {}, {}
        self.state.handle(touch)              # a no-op for the live state: its clocks are there already
        self._journal([touch])

    def flush_journal(self, *, touches: bool = False) -> None:
        """Write every deferred event as one group; ``touches``: also the lease-only reads
        noted since the last tick (the server does at shutdown)."""
        if not (self._unflushed or touches):
            return                    # nothing deferred (the server asks every round)
        with self.lock:
            if self.journal is None:
                return
            if touches:
                was, self.defer_journal = self.defer_journal, True
                try:
                    self._journal_touches()
                finally:
                    self.defer_journal = was
            if self._unflushed:
                events, self._unflushed = self._unflushed, []
                self._append(events)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every new storage instruction (in the applying thread)."""
        self._listeners.append(listener)

    def add_run_observer(self, observe: Callable[[RunRecord], None]) -> None:
        """Call ``observe`` with every run that finishes from now on (not the journal's
        replayed ones), after the call that ended it applied: e.g. to record its lifetimes."""
        self._run_observers.append(observe)

    def apply(self, events: Sequence[ev.Event]) -> list[list[ev.Instruction]]:
        """Apply events in order; journal those that applied (all, or up to the refused one)."""
        outs: list[list[ev.Instruction]] = []
        with self.lock:
            try:
                for e in events:
                    outs.append(self.state.handle(e))
            finally:
                if self.journal is not None and outs:
                    self._journal(self._durable(events[:len(outs)], outs))
        for out in outs:
            self._carry_out(out)
        return outs

    def _one(self, event: ev.Event) -> list[ev.Instruction]:
        """``apply([event])[0]``, without the lists (the path of every single call)."""
        with self.lock:
            out = self.state.handle(event)
            if self.journal is not None:
                r = self._lease_only(event, out)
                if r is not None:
                    self._note_touch(event, r.already_committed)  # type: ignore[arg-type]
                elif self.defer_journal:
                    self._unflushed.append(event)
                else:
                    self._append((event,))
        self._carry_out(out)
        return out

    def _carry_out(self, out: list[ev.Instruction]) -> None:
        """Hand storage instructions to the listeners and finished runs to the run observers."""
        if not (self._listeners or self._run_observers):
            return
        for i in out:
            if isinstance(i, ev.StorageInstruction):
                for listener in self._listeners:
                    listener(i)
            elif isinstance(i, ev.RunFinished) and self._run_observers:
                run = self.state.runs.get(i.run_id)
                if run is not None:
                    for observe in self._run_observers:
                        try:
                            observe(run)
                        except Exception:  # an observer (a dataset file) must not fail the call
                            log.exception("run observer failed for run %s", i.run_id)

    def _rid_next(self) -> str:
        return next(self._rids)

    def _admin(self, token: str) -> None:
        if not self.admin_token or not same_token(self.admin_token, token or ""):
            raise Unauthorized(("missing" if not token else "wrong") + " admin token: control calls need the "
                               "server's admin token (funcsion serve metadata --admin-token / "
                               "FUNCSION_ADMIN_TOKEN)")

    @property
    def admin_token(self) -> str:
        return self._admin_token

    @admin_token.setter
    def admin_token(self, token: str) -> None:
        self._admin_token = token
        self._admin_bytes = token.encode("utf-8", "surrogatepass")

    def _run(self, token: str, run_id: str) -> None:
        """A run's token, or the admin token (drivers manage every run, e.g. persisted objects).
        The run's token is tried first: it is what almost every call carries. A run another
        metadata shard owns is refused first, whatever the token (``MetadataState.check_run_owner``)."""
        self.state.check_run_owner(run_id)
        try:
            self.state.authorize(run_id, token)
        except (Unauthorized, UnknownRun):
            if self._admin_bytes and token and hmac.compare_digest(self._admin_bytes,
                                                                   token.encode("utf-8", "surrogatepass")):
                self.state.run_record(run_id)   # UnknownRun for a run this server does not have
                return
            raise

    def check_caller(self, method: str, token: str, run_id: str) -> MetadataError | None:
        """The refusal a call of ``method`` with ``token`` (and ``run_id``) would get from its
        token check, or None. The server asks before it reads a large frame's body."""
        try:
            if method in CONTROL_CALLS:
                self._admin(token)
            elif method in RUN_CALLS:
                with self.lock:
                    self._run(token, run_id)
            else:
                return InvalidRequest(f"{method!r} takes no large request")
        except MetadataError as exc:
            return exc
        return None

    def tick(self) -> list[ev.Instruction]:
        """Let time pass (TTL, leases); journaled only when it changed something."""
        with self.lock:
            if self.journal is not None:
                self._journal_touches()       # before a Tick that reads the clocks they moved
            event = ev.Tick(self.clock(), self._rid_next())
            out = self.state.handle(event)
            if out and self.journal is not None:
                self._journal([event])
        self._carry_out(out)
        return out

    # -- service: control -----------------------------------------------------------
    def health(self) -> T.Health:
        return T.Health("ok", self.clock() - self.started,
                        sum(r.state == "running" for r in self.state.runs.values()),
                        self.journal.seq if self.journal else 0, VERSION)

    @_boundary
    def register_workflow(self, admin_token: str, wds_json: str, params: dict[str, int], source: str
                          ) -> T.WorkflowInfo:
        self._admin(admin_token)
        size = len((wds_json or "").encode("utf-8", "surrogatepass"))
        if size > MAX_WDS_BYTES:
            raise InvalidRequest(f"workflow {source or '<rpc>'} is {size:,} bytes of WDS JSON; the metadata server "
                                 f"registers at most {MAX_WDS_BYTES:,} (funcsion_rpc.MAX_WDS_BYTES): describe "
                                 "repeated functions with a fan-out template instead of listing each one")
        from wds import FuncsionError  # a WDS error is bad input, not a server bug
        try:
            out = self._one(ev.RegisterWorkflow(self.clock(), self._rid_next(), wds_json, dict(params or {}),
                                                source or "<rpc>"))
        except MetadataError:
            raise
        except FuncsionError as exc:
            raise InvalidRequest(str(exc)) from None
        r = out[0]
        assert isinstance(r, ev.WorkflowRegistered)
        return T.WorkflowInfo(r.key, r.functions, r.objects)

    @_boundary
    def deregister_workflow(self, admin_token: str, key: str) -> None:
        self._admin(admin_token)
        self._one(ev.DeregisterWorkflow(self.clock(), self._rid_next(), key))

    @_boundary
    def start_run(self, admin_token: str, workflow_key: str, policy: str, ttl_ms: int,
                  hints: T.RunHints | None = None) -> T.RunInfo:
        self._admin(admin_token)
        ttl = ttl_ms / 1000.0 if ttl_ms and ttl_ms > 0 else self.default_ttl_s
        h = hints or T.RunHints()
        token = secrets.token_hex(16)        # returned once; the core and the journal see its digest
        out = self._one(ev.StartRun(self.clock(), self._rid_next(), workflow_key, token_digest(token),
                                    policy or "funcstore", ttl, int(h.max_concurrency or 0),
                                    int(h.capacity_bytes or 0), h.latency_sensitive is not False,
                                    input_bytes=int(h.input_bytes or 0)))   # unset: a client before the field
        r = out[0]
        assert isinstance(r, ev.RunStarted)
        return T.RunInfo(r.run_id, token, workflow_key, self.state.runs[r.run_id].policy.spec,
                         json.dumps(r.plan))

    @_boundary
    def register_capacity(self, admin_token: str, function_name: str, blocks: int, daemon: str | None = None) -> int:
        self._admin(admin_token)
        out = self._one(ev.RegisterCapacity(self.clock(), self._rid_next(), function_name, blocks, daemon or ""))
        return out[0].total_blocks  # type: ignore[attr-defined, no-any-return]

    @_boundary
    def unregister_capacity(self, admin_token: str, function_name: str) -> int:
        self._admin(admin_token)
        out = self._one(ev.UnregisterCapacity(self.clock(), self._rid_next(), function_name))
        return out[0].total_blocks  # type: ignore[attr-defined, no-any-return]

    @_boundary
    def stats(self, admin_token: str) -> str:
        self._admin(admin_token)
        with self.lock:
            doc = self.state.stats()
        doc["journal_seq"] = self.journal.seq if self.journal else 0
        doc["instance"] = self.instance
        return json.dumps(doc)

    @_boundary
    def fetch_instructions(self, admin_token: str, after_seq: int, max_items: int,
                           loads: dict[str, T.FunctionLoad] | None = None,
                           buckets: dict[str, str] | None = None,
                           daemon: str | None = None) -> list[T.Instruction]:
        self._admin(admin_token)
        if loads is not None:
            self._report_load(loads)
        if buckets is not None:
            self._report_buckets(buckets, daemon or "")
        with self.lock:
            acked = self.state.pending and self.state.pending[0].seq <= after_seq and (
                not daemon or after_seq > self.state.acks.get(daemon, 0))
        if acked:
            self._one(ev.AckInstructions(self.clock(), self._rid_next(), after_seq, daemon or ""))
        with self.lock:
            items = self.state.pending_instructions(after_seq, max(1, min(max_items or 1000, 10_000)))
        return [to_thrift_instruction(i) for i in items]

    def _report_load(self, loads: dict[str, T.FunctionLoad]) -> None:
        """The daemon's load report; journaled (``ReportLoad``) only when it changes the busy set."""
        if len(loads) > 100_000:
            raise InvalidRequest(f"a load report names {len(loads):,} storage functions; at most 100,000")
        got = {str(fn)[:256]: (max(0, int(v.queued or 0)), max(0, int(v.inflight_bytes or 0)))
               for fn, v in loads.items() if v is not None}
        now = self.clock()
        with self.lock:
            if not self.state.busy.changes(now, got, self.state.pool_size()):
                return
        self._one(ev.ReportLoad(now, self._rid_next(), {fn: [q, b] for fn, (q, b) in got.items()}))

    def _report_buckets(self, buckets: dict[str, str], daemon: str = "") -> None:
        """The daemon's GC window (``daemon``: one of several, reporting its own functions);
        journaled (``ReportBuckets``) only when it changed."""
        if len(buckets) > 100_000:
            raise InvalidRequest(f"a bucket report names {len(buckets):,} storage functions; at most 100,000")
        try:
            got = GcBuckets.check({str(fn)[:256]: str(s) for fn, s in buckets.items()})
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        with self.lock:
            if not self.state.buckets.changes(got, daemon):
                return
        self._one(ev.ReportBuckets(self.clock(), self._rid_next(), got, daemon))

    # -- service: one run -----------------------------------------------------------
    @_boundary
    def end_run(self, token: str, run_id: str, outcome: str) -> str:
        self._run(token, run_id)
        self._one(ev.EndRun(self.clock(), self._rid_next(), run_id, outcome or "succeeded"))
        return json.dumps(self.state.runs[run_id].summary())

    def _grant(self, p: ev.Placed, run_id: str) -> T.PutGrant:
        readable, expires, readers = False, None, None
        if not p.freed:
            with self.lock:
                run = self.state.runs.get(run_id)
                rec = run.objects.get(p.object) if run is not None else None
                readable = p.existing and rec is not None and rec.state == "readable"  # a retry's write finished
                expires = expires_at_ms(run, rec) if run is not None else None
                if rec is not None and not rec.adhoc and rec.declared > 0:
                    readers = rec.declared  # the HDAG's read count: the daemon readies a broadcast's copies
        return T.PutGrant(p.object, p.size, self._placement(p.placement), p.existing, p.freed,
                          p.already_committed, readable, expires, readers)

    def _put_result(self, out: list[ev.Instruction]) -> T.PutResult:
        r = out[0]
        assert isinstance(r, ev.PutFinished)
        return T.PutResult(r.object, r.committed, r.already_committed, _freed(out))

    def _placement(self, p: ev.Placement) -> T.Placement:
        """``to_thrift_placement``, cached per placement object (an object's placement is built
        once and read many times; the cache holds the placement, so its id stays unique)."""
        hit = self._placements.get(id(p))
        if hit is not None and hit[0] is p:
            return hit[1]
        tp = to_thrift_placement(p)
        if len(self._placements) >= 100_000:
            self._placements.clear()
        self._placements[id(p)] = (p, tp)
        return tp

    def _get_result(self, out: list[ev.Instruction]) -> T.GetResult:
        r = out[0]
        assert type(r) is _ReadRecorded
        p = r.placement
        hit = self._placements.get(id(p))     # self._placement(p), inline: the hottest path
        freed, last = freed_or_last(out, r.object)   # oracle: the read freed it; funcstore: its last read
        return T.GetResult(r.object, r.size, r.checksum, hit[1] if hit is not None and hit[0] is p
                           else self._placement(p), r.recorded, r.already_committed, freed or None,
                           last or None)

    @_boundary
    def begin_put(self, token: str, run_id: str, function_name: str, request: T.PutRequest) -> T.PutGrant:
        self._run(token, run_id)
        out = self._one(ev.BeginPut(self.clock(), self._rid_next(), run_id, function_name, request.object_name,
                                    request.size, request.checksum or "", bool(request.persist),
                                    bool(request.adhoc), int(request.chunk_bytes or 0)))
        return self._grant(out[0], run_id)  # type: ignore[arg-type]

    @_boundary
    def fallback_to_cos(self, token: str, run_id: str, function_name: str, object_name: str,
                        reason: str) -> T.PutGrant:
        self._run(token, run_id)
        return self._grant(self._one(ev.CosFallback(self.clock(), self._rid_next(), run_id, function_name or "",
                                                    object_name, (reason or "")[:1000]))[0],  # type: ignore[arg-type]
                           run_id)

    @_boundary
    def finish_put(self, token: str, run_id: str, function_name: str, object_name: str) -> T.PutResult:
        self._run(token, run_id)
        return self._put_result(self._one(ev.FinishPut(self.clock(), self._rid_next(), run_id, function_name,
                                                       object_name)))

    @_boundary
    def get(self, token: str, run_id: str, function_name: str, object_name: str,
            delete_after: bool | None = False) -> T.GetResult:
        self._run(token, run_id)
        out = self._one(ev.Get(self.clock(), self._rid_next(), run_id, function_name, object_name,
                               bool(delete_after)))
        if self.state.buckets.state:
            self._move_read(run_id, (object_name,))
        return self._get_result(out)

    def _move_read(self, run_id: str, names: Sequence[str]) -> None:
        """Objects just read that lie on a degraded GC bucket's functions move to the newest
        bucket's (``MoveObject``, journaled after the reads: SION's compaction of read data)."""
        with self.lock:
            hot = [n for n in dict.fromkeys(names) if self.state.wants_move(run_id, n)]
        for name in hot:
            self._one(ev.MoveObject(self.clock(), self._rid_next(), run_id, name))

    @_boundary
    def commit(self, token: str, run_id: str, function_name: str) -> T.CommitResult:
        self._run(token, run_id)
        out = self._one(ev.Commit(self.clock(), self._rid_next(), run_id, function_name))
        r = out[0]
        assert isinstance(r, ev.Committed)
        return T.CommitResult(r.function, r.records, r.already_committed, _freed(out))

    @_boundary
    def delete_object(self, token: str, run_id: str, object_name: str) -> None:
        self._run(token, run_id)
        self._one(ev.Delete(self.clock(), self._rid_next(), run_id, object_name))

    def _status(self, d: dict[str, Any]) -> T.ObjectStatus:
        p = d["placement"]
        return T.ObjectStatus(d["object"], d["state"], d["producer"], d["declared_reads"], d["remaining"],
                              d["size"], d["checksum"], d["persist"], d["committed_by"],
                              to_thrift_placement(p) if p is not None else None, d.get("freed_reason", ""),
                              d.get("written_at", 0.0), d.get("readable_at", 0.0), d.get("freed_at", 0.0),
                              bool(d.get("adhoc")), d.get("tier_reason") or None, d.get("released_at"))

    @_boundary
    def lookup(self, token: str, run_id: str, object_name: str) -> T.ObjectStatus:
        self._run(token, run_id)
        with self.lock:
            return self._status(self.state.lookup(run_id, object_name))

    @_boundary
    def list_objects(self, token: str, run_id: str, prefix: str) -> list[T.ObjectStatus]:
        self._run(token, run_id)
        with self.lock:
            return [self._status(d) for d in self.state.list_objects(run_id, prefix or "")]

    @_boundary
    def describe_function(self, token: str, run_id: str, function_name: str) -> T.FunctionStatus:
        self._run(token, run_id)
        with self.lock:
            d = self.state.describe_function(run_id, function_name)
        return T.FunctionStatus(d["function"], d["stage"], d["inputs"], d["outputs"], d["committed"])

    # -- service: batches -----------------------------------------------------------
    def _read_batch(self, token: str, run_id: str, function_name: str, object_names: list[str]
                    ) -> list[list[ev.Instruction]]:
        """``apply`` of one ``Get`` per object, through the core's batched path
        (``MetadataState.handle_gets``): event structs are built only for the reads the
        journal keeps; lease-only reads are noted as touches."""
        self._run(token, run_id)
        now, rid = self.clock(), self._rid_next()
        outs: list[list[ev.Instruction]] = []
        with self.lock:
            try:
                self.state.handle_gets(now, rid, run_id, function_name, object_names, outs)
            finally:
                if self.journal is not None and outs:
                    self._journal_reads(now, rid, run_id, function_name, object_names, outs)
        if self._listeners or self._run_observers:
            for out in outs:
                self._carry_out(out)
        if self.state.buckets.state:
            self._move_read(run_id, object_names[:len(outs)])
        return outs

    def _journal_reads(self, now: float, rid: str, run_id: str, function: str, objects: list[str],
                       outs: list[list[ev.Instruction]]) -> None:
        """``_journal(_durable(events, outs))`` for the batch of reads ``_read_batch`` applied,
        the reads it keeps as one ``GetMany``."""
        keep: list[str] = []
        touched: dict[str, float] | None = None
        for o, out in zip(objects, outs):
            r = out[0]
            if len(out) == 1 and type(r) is _ReadRecorded and not r.recorded:    # lease-only
                if not r.already_committed:
                    if touched is None:
                        touched = self._touched_objects.get(run_id)
                        if touched is None:
                            touched = self._touched_objects[run_id] = {}
                    if now > touched.get(o, -1.0):
                        touched[o] = now
                if now > self._touched_runs.get(run_id, -1.0):
                    self._touched_runs[run_id] = now
            else:
                keep.append(o)
        if len(keep) == 1:
            self._journal([ev.Get(now, rid, run_id, function, keep[0])])
        elif keep:
            self._journal([ev.GetMany(now, rid, run_id, function, keep)])

    @_boundary
    def get_batch(self, token: str, run_id: str, function_name: str, object_names: list[str]
                  ) -> list[T.GetResult]:
        return [self._get_result(o) for o in self._read_batch(token, run_id, function_name, object_names)]

    @_boundary
    def get_batch_encoded(self, token: str, run_id: str, function_name: str, object_names: list[str]) -> bytes:
        """``get_batch``, its reply already in wire form: the TBinaryProtocol bytes of the
        ``list<GetResult>`` (``_replies``), for the server's frame processor."""
        return self._replies.encode(self._read_batch(token, run_id, function_name, object_names))

    @_boundary
    def read_batch(self, token: str, run_id: str, function_name: str, object_names: list[str]) -> T.ReadBatch:
        """``get_batch``'s reads, answered as one byte of tier and one of flags per object."""
        return read_columns(self._read_batch(token, run_id, function_name, object_names))

    @_boundary
    def read_done(self, token: str, run_id: str, function_name: str, object_names: list[str]) -> list[str]:
        """The reader has the bytes of reads answered as last ones: their memory is released."""
        self._run(token, run_id)
        out = self._one(ev.ReadDone(self.clock(), self._rid_next(), run_id, function_name, list(object_names)))
        return [i.object for i in out if isinstance(i, ev.Released)]

    @_boundary
    def begin_put_batch(self, token: str, run_id: str, function_name: str, requests: list[T.PutRequest]
                        ) -> list[T.PutGrant]:
        self._run(token, run_id)
        now, rid = self.clock(), self._rid_next()
        outs = self.apply([ev.BeginPut(now, rid, run_id, function_name, r.object_name, r.size, r.checksum or "",
                                       bool(r.persist), bool(r.adhoc), int(r.chunk_bytes or 0)) for r in requests])
        return [self._grant(o[0], run_id) for o in outs]  # type: ignore[arg-type]

    @_boundary
    def finish_put_batch(self, token: str, run_id: str, function_name: str, object_names: list[str]
                         ) -> list[T.PutResult]:
        self._run(token, run_id)
        now, rid = self.clock(), self._rid_next()
        outs = self.apply([ev.FinishPut(now, rid, run_id, function_name, o) for o in object_names])
        return [self._put_result(o) for o in outs]
