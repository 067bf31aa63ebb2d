"""The client daemon (the I/O shell around the store core): one TCP listener
for SDK clients and storage functions, the function pool, free, warm-ups,
stats and the admin operations; it stamps events with the time, feeds them to
the pure ``StoreState`` (``_state``: objects, placements, counts, ledger,
recovery progress) under one lock, and carries out the instructions it
returns (``_do``). The PUT path is ``_put``, the GET path ``_get`` (modules); a
connection's handshake, token scope and request dispatch (``_session``), what
a request may declare (``_checks``), placement policy (``_placement``),
function connections (``_functions``), the buffer (``_buffer``), a GET's
first-d window (``_window``, ``_collect``) and the writes to a client
(``_outbox``) live in their own modules.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from typing import Any, Callable, Iterable

from .. import tls
from ..exceptions import StoreError, TlsError, UnknownKey
from ..protocol import Frame, Op, Status, tune_socket
from ..threads import ThreadCache
from ..throttle import HostLink
from ._buffer import PersistentBuffer
from ._burst_io import CacheFunctions
from ._collect import Collector
from ._config import CHECK_STATE_ENV, DaemonConfig
from ._functions import FunctionHandle
from ._gc_io import ReadNotes, carry_out, gc_window
from ._get import GetPath
from ._hello import HelloGate
from ._ledger import MemoryLedger
from ._objects import ObjectTable, ObjectVersion, chunk_key
from ._outbox import BufferPool
from ._placement import PlaceChunk
from ._put import PutPath
from ._recovery import LostChunk, Recovery
from ._restore import DurableTable
from ._persisted_io import PersistedLifetimes
from ._runs import drop_run_files, held_by_run, run_of, sweep_files
from ._session import admit, serve_connection
from ._state import StoreState
from ._store_events import (ChunkRecovered, Discard, Event, Evict, Evicted, Free, Freed, FunctionLost, Instruction,
                            Migrate, Migrated, Move, Place, PutReady, Recover, Release, Tick, Upload, Warm)
from ._upload_plan import UploadPolicy

__all__ = ["Daemon"]

log = logging.getLogger("storage_functions.daemon")


class Daemon(PutPath, GetPath):
    """``Daemon(config, invoker).start()`` -> (host, port).

    ``invoker`` is anything with ``invoke_async(function_name, payload)``
    (``storage_functions.invoker.Invoker``). ``cos`` is a COS adapter or
    None (then ``config.cos_url`` is opened, or nothing is made durable).
    ``placement`` replaces the default :class:`PlaceChunk`;
    ``on_new_function(name)`` runs before a function first joins the pool
    (deploy it there when the platform needs it).
    """

    def __init__(self, config: DaemonConfig, invoker: Any, *, cos: Any = None, placement: PlaceChunk | None = None,
                 on_new_function: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.invoker = invoker
        if cos is None and config.cos_url:
            from ..cos import open_cos

            cos = open_cos(config.cos_url)
        self.cos = cos
        placement = placement or PlaceChunk(group_size=config.group_size, hardcap=config.hardcap,
                                            block_size=config.block_size, max_functions=config.max_functions,
                                            capacity=config.capacity)
        self.on_new_function = on_new_function
        # the store core: the table, placements, counts, ledger, recovery progress; driven under _state_lock
        self.state = StoreState(placement, block_size=config.block_size, memory_grain=config.memory_grain,
                                function_prefix=config.function_prefix,
                                cos_prefix=config.cos_prefix, warm_interval_s=config.warm_interval_s,
                                gc=gc_window(config, time.monotonic()))
        self.reads = ReadNotes(self.state.gc is not None)  # chunks GETs read on degraded functions
        self._state_lock = threading.Lock()
        self.check_state = config.check_state if config.check_state is not None else \
            os.environ.get(CHECK_STATE_ENV, "") not in ("", "0")
        self.recovery = Recovery(self)
        self.cache_functions = CacheFunctions(self)  # cache functions for GET bursts (``_burst``)
        self._own_buffer_dir = config.buffer_dir is None
        self.buffer_dir = config.buffer_dir or tempfile.mkdtemp(prefix="sion-buffer-")
        now = config.durable_puts       # a durable PUT waits for its upload: due at once, no linger
        self.buffer = PersistentBuffer(self.buffer_dir, cos, workers=config.upload_workers,
                                       policy=UploadPolicy(delay_s=0.0 if now else config.upload_delay_s,
                                                           parity_delay_s=0.0 if now else config.parity_upload_delay_s),
                                       fsync=config.buffer_fsync, memory_bytes=config.buffer_memory_bytes,
                                       memory_max_object=config.buffer_memory_max_object,
                                       pack_max_bytes=config.pack_max_bytes,
                                       pack_linger_s=0.0 if now else config.pack_linger_s,
                                       cos_prefix=config.cos_prefix, direct_io=config.buffer_direct_io,
                                       on_uploaded=self._uploaded,
                                       on_deletes=lambda queued, keys: self.durable.deletes(queued, keys))
        self.durable: DurableTable = DurableTable(self)  # the table on disk: a restarted daemon rebuilds it (_restore)
        self.handles: list[FunctionHandle] = []
        self._by_name: dict[str, FunctionHandle] = {}
        self._lock = threading.Lock()
        self._counters_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._tls_edge: tls.TlsAcceptor | None = None
        self._tls_event: dict[str, str] = {}      # what a storage function needs to verify the daemon
        self._threads: list[threading.Thread] = []
        self._clients: set[socket.socket] = set()
        self._gets: set[Collector] = set()
        self.pool = BufferPool()  # chunks queued behind slow clients
        self.host_link = HostLink(config.host_bandwidth_mbps)  # the modelled NIC (0: none), GET and PUT hold to it
        self._gets_lock = threading.Lock()
        self._watch_cond = threading.Condition()
        self._stopping = threading.Event()
        self.address: tuple[str, int] = (config.host, config.port)
        self.persisted = PersistedLifetimes(cos, config.cos_prefix, config.persist_ttl_s, self.count)
        self.counters = {"persisted_expired": 0, "puts": 0, "gets": 0, "buffer_hits": 0, "cos_fallbacks": 0,
                         "gets_from_functions": 0, "gets_from_cache": 0, "gets_from_buffer": 0, "gets_from_cos": 0,
                         "corrupt_chunks": 0,
                         "missing_chunks": 0, "chunk_retries": 0, "lost_functions": 0, "lost_instances": 0,
                         "auth_failures": 0, "scope_refusals": 0, "bad_frames": 0, "hello_timeouts": 0,
                         "hello_evicted": 0, "conn_errors": 0, "prewarmed": 0, "pings": 0, "pings_failed": 0}
        # connections before their HELLO: one thread reads them all (``_hello``)
        self._hellos = HelloGate(self._on_hello, self.count, timeout_s=config.hello_timeout_s,
                                 max_pending=config.hello_pending_max)
        # an authenticated connection's thread: a waiting one when a connection ended lately, so
        # the HELLO gate does not wait for a thread start (``Thread.start`` waits for it to run)
        self._conn_threads = ThreadCache("sion-conn", keep=32)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> tuple[str, int]:
        """Listen, serve; returns the bound address. ``TlsError`` (before listening) for a
        certificate, key or CA that cannot be used, or one that does not name the advertised host."""
        c = self.config
        if c.tls_cert:
            name = c.dial_address((c.host, c.port))[0]
            if name in ("0.0.0.0", "::", ""):
                raise TlsError(f"the daemon binds {c.host or 'every interface'}: with --tls-cert pass --advertise "
                               "HOST[:PORT], a name its certificate holds, for the storage functions to verify")
            ca = tls.read_pem(c.tls_ca, "--tls-ca")
            tls.check_certificate(c.tls_cert, c.tls_key, name, ca)
            self._tls_edge = tls.TlsAcceptor(tls.server_context(c.tls_cert, c.tls_key), self._serve_plain,
                                             handshake_timeout_s=c.hello_timeout_s)
            self._tls_event = {"tls_ca": ca, "tls_name": name}
        self.durable.restore()
        self.persisted.load()
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.config.host, self.config.port))
        ls.listen(512)
        self._listener = ls
        self.address = ls.getsockname()[:2]
        self._hellos.start()
        for target, name in ((self._accept_loop, "sion-accept"), (self._warm_loop, "sion-warm"),
                             (self._get_watch_loop, "sion-get-watch"), (self._persist_loop, "sion-persist")):
            t = threading.Thread(target=target, daemon=True, name=name)
            t.start()
            self._threads.append(t)
        self.durable.verify()
        return self.address

    def stop(self) -> None:
        """Stop serving. With ``check_state`` (tests), the store core's invariants are
        asserted first (``validate_state``); a violation is raised once all is stopped."""
        problem: AssertionError | None = None
        if self.check_state:
            try:
                self.validate_state()
            except AssertionError as exc:
                problem = exc
        self._stopping.set()
        self.recovery.stop()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        self._hellos.stop()
        self._conn_threads.close()
        for h in list(self.handles):
            h.close()
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(5)
        self.buffer.close()
        self.durable.close()
        if self._own_buffer_dir:
            shutil.rmtree(self.buffer_dir, ignore_errors=True)
        if problem is not None:
            raise problem

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_durable(self, p: Any, timeout: float) -> bool:
        """Wait until the version of PUT ``p`` (a ``PendingPut``) is in COS, its copy logged
        (``durable_puts``); False past ``timeout``."""
        return self.buffer.wait_durable(p.obj, timeout)

    def wait_uploads(self, timeout: float = 30.0) -> bool:
        return self.buffer.wait_idle(timeout)

    def cos_copy(self, key: str) -> tuple[str, int] | None:
        """Where the latest version of ``key`` sits in COS once its upload landed: (COS
        object, offset) -- its own object at 0, or a pack of small versions."""
        obj = self.table.latest(key)
        if obj is None or not obj.uploaded:
            return None
        return obj.pack if obj.pack is not None else (obj.cos_key, 0)

    # -- public operations --------------------------------------------------------
    # -- the store core -------------------------------------------------------------
    @property
    def table(self) -> ObjectTable:
        return self.state.table

    @property
    def placement(self) -> PlaceChunk:
        return self.state.placement

    @property
    def ledger(self) -> MemoryLedger:
        return self.state.ledger

    def _do(self, ev: Event) -> list[Instruction]:
        """Feed ``ev`` to the store core and carry out its instructions; returns them
        (the replies, and ``SendChunk`` for the PUT path to stream)."""
        with self._state_lock:
            # the durable table (``_restore``) follows the core under its lock: a free is on disk
            # before its bytes go, a version before its PUT is acknowledged, and never in between
            if isinstance(ev, Free):
                self.durable.freed(ev.keys)
            out = self.state.handle(ev)
            if isinstance(ev, PutReady) and any(isinstance(x, Upload) for x in out):
                self.durable.put(ev.obj)
            elif isinstance(ev, Migrated) and ev.obj.alloc is not None and \
                    ev.obj.stripes[ev.stripe].places[ev.index] == ev.place:   # a metadata server's move landed
                self.durable.moved(ev.obj)
        for ins in out:
            if isinstance(ins, Release):
                self._handle(ins.fn).delete(list(ins.keys))
            elif isinstance(ins, Discard):
                self.buffer.discard(ins.obj)
                self.recovery.forget(ins.obj)
                self.cache_functions.forget(ins.obj)
            elif isinstance(ins, Upload):
                self.buffer.submit(ins.obj)
                if self.cache_functions.wants(ins.obj):  # a broadcast: COS first, then its cache copies
                    self.buffer.expedite(ins.obj)
            elif isinstance(ins, Recover):
                for obj in {id(c[0]): c[0] for c in ins.chunks}.values():
                    self.buffer.expedite(obj)  # its parity covers fewer losses now: upload it at once
                self.recovery.lost([LostChunk(obj, s, i, place) for obj, s, i, place in ins.chunks], ins.fn)
            elif isinstance(ins, Warm):
                h = self.handles[ins.fn]
                h.last_used = ev.now
                h.warm()
            else:
                carry_out(self, ins)
        return out

    def _uploaded(self, objs: list[ObjectVersion]) -> None:
        """Versions reached COS (an uploader thread): the durable table records it, and a
        broadcast's copies load into cache functions."""
        self.durable.uploaded(objs)
        self.cache_functions.prefetch(objs)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (threads of every connection count: one lock,
        no lost updates)."""
        with self._counters_lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def validate_state(self) -> None:
        """Assert the store core's invariants (``StoreState.validate_state``)."""
        with self._state_lock:
            self.state.validate_state()

    def chunks_on(self, fn: int) -> int:
        """Chunks placed on function ``fn``."""
        with self._state_lock:
            return self.state.chunks(fn)

    def recovered(self, obj: ObjectVersion, s: int, i: int, place: Place) -> bool:
        """Recovery stored a lost chunk again; False (and it is deleted again) when its
        version was freed or the chunk placed again meanwhile."""
        out = self._do(ChunkRecovered(obj=obj, stripe=s, index=i, place=place, now=time.monotonic()))
        return not any(isinstance(x, Release) for x in out)

    # -- public operations --------------------------------------------------------
    def free(self, keys: Iterable[str]) -> int:
        """Drop every version of ``keys`` from function memory, the buffer and
        COS (the metadata server calls this when objects expire). A version
        whose upload had not started is never uploaded. Returns the number of
        versions freed; unknown keys are ignored."""
        out = self._do(Free(keys=tuple(keys), now=time.monotonic()))
        return sum(x.versions for x in out if isinstance(x, Freed))

    def evict(self, keys: Iterable[str]) -> int:
        """Let the chunks of ``keys``' readable versions go from function memory, keeping
        each version readable from its durable copy (the persistent buffer's, or COS's) until
        ``free`` (the metadata server released the objects once their last declared readers
        had the bytes); a version still in its upload window goes up to COS at once.
        Returns the versions evicted; unknown keys, evicted ones and versions with no durable
        copy are left as they are."""
        ks = tuple(keys)
        out = self._do(Evict(keys=ks, now=time.monotonic()))
        got = next((x for x in out if isinstance(x, Evicted)), None)
        if got is None:
            return 0
        self.count("evicted_versions", got.versions)
        if got.kept:
            self.count("evict_kept_no_copy", got.kept)
        if got.versions:
            self.durable.evicted(ks)
        for obj in got.objs:     # its buffer copy is the only one now: to COS at once, not after its delay
            if not obj.uploaded:
                self.buffer.expedite(obj)
        return got.versions

    def memory(self, run_id: str | None = None) -> dict[str, Any]:
        """Physically held memory: one run's figures (``MemoryLedger.run_summary``), or per
        function the bytes of blocks the ledger counts and the bytes its runtime reported."""
        now = time.monotonic()
        with self._state_lock:
            if run_id is not None:
                return self.ledger.run_summary(run_id, now) or {"run_id": run_id, "allocated_bytes": 0,
                                                                 "live_bytes": 0, "allocated_mb_s": 0.0,
                                                                 "live_mb_s": 0.0, "peak_allocated_bytes": 0,
                                                                 "peak_live_bytes": 0, "series": []}
            return {"allocated_bytes": self.ledger.allocated_bytes(),
                    "functions": {h.name: {"ledger_bytes": self.ledger.function_bytes(h.name), "reported": h.mem}
                                  for h in self.handles}}

    def function_memory(self, name: str, prefix: str = "", timeout_s: float = 10.0) -> dict[str, Any]:
        """Ask function ``name``'s instance what it holds: ``blocks`` (the block numbers it
        has allocated), ``mem`` (the bytes of memory it holds: its grains, or whole blocks)
        and ``entries`` (chunk key -> [block, offset, length]) of store keys under
        ``prefix``. Invokes it if it is not running (then it holds nothing)."""
        h = self._by_name.get(name)
        if h is None:
            raise UnknownKey(f"no storage function {name!r} in the pool")
        done = threading.Event()
        got: list[dict[str, Any]] = []

        def cb(f: Frame | None, s: socket.socket | None) -> None:
            if f is not None and f.status == Status.OK:
                got.append({**f.meta, "mem": f.a})
            done.set()

        h.request(Op.STAT, prefix, cb)
        if not done.wait(timeout_s) or not got:
            raise StoreError(f"function {name} did not answer STAT within {timeout_s:g} s")
        return got[0]

    def move(self, key: str, moves: Iterable[tuple[int, Any, int, int, int]]) -> None:
        """The metadata server moved chunks of ``key`` it placed (GC compaction: ``move``
        instructions): per chunk ``(chunk, function, block, offset, length reserved)``, its new
        start. Each stripe's chunk loads there from COS and its old copy goes once it landed;
        GETs read the old copy until then. Idempotent."""
        try:
            got = tuple((int(c), self._index_of(fn), int(b), int(o), int(n)) for c, fn, b, o, n in moves)
        except StoreError:  # another daemon's functions: not this one's to carry out
            self.count("moves_refused")
            return
        out = self._do(Move(key=key, moves=got, now=time.monotonic()))
        self.count("moves", 1)
        self.count("move_loads", sum(1 for x in out if isinstance(x, Migrate)))

    def release_function(self, name: str) -> bool:
        """Scale-in (the metadata server's ``release_function``): a function none of whose
        blocks are in use leaves the pool at once: its invocation ends (no more billing, no
        warm-ups: it holds no chunks) until a placement needs it again. A function that
        still holds chunks (the instruction raced a new placement) is left alone."""
        h = self._by_name.get(name)
        if h is None:
            return False
        with self._state_lock:
            held = self.ledger.function_bytes(name) or self.state.chunks(h.index)
        if held:
            return False
        self.count("released_functions")
        return h.release()

    def function_loads(self) -> dict[str, tuple[int, int]] | None:
        """The functions with requests queued or in flight: name -> (requests, bytes of the
        PUT chunks among them); None when ``report_loads`` is off. The control loop reports it
        to the metadata server, whose placement skips busy functions a while (SION Fig. 5
        ``TestAndPlace``'s queue test)."""
        if not self.config.report_loads:
            return None
        return {h.name: load for h in list(self.handles) if (load := h.load)[0] or load[1]}

    def function_buckets(self) -> dict[str, str] | None:
        """The GC window's functions that must not take new data, by name: ``active`` (an
        older bucket), ``degraded`` or ``released``; None without a window. The control
        loop reports it to the metadata server, whose allocator places only on the newest
        bucket's functions (SION Sec. 5.3.1)."""
        gc = self.state.gc
        if gc is None:
            return None
        with self._state_lock:
            report = gc.window.report()
        return {self.state.name(fn): state for fn, state in report.items()}

    def drop_run(self, run_id: str) -> int:
        """Drop everything this daemon holds for ``run_id`` (the run ended or expired): every
        version of its keys (as ``free``), and the COS copies and buffer files an earlier
        daemon process left for it. Returns the versions freed from the table."""
        n = self.free([k for k in self.table.keys() if run_of(k) == run_id])
        drop_run_files(self.cos, self.config.cos_prefix, self.buffer_dir, run_id)
        self.persisted.run_ended(run_id)  # its persisted copies' lifetimes start now
        return n

    def sweep_runs(self, keep: Callable[[str], bool]) -> list[str]:
        """At start, before any PUT: drop the COS copies and buffer files that earlier daemon
        processes left for every run ``keep(run_id)`` is false for; returns those runs."""
        dropped = sweep_files(self.cos, self.config.cos_prefix, self.buffer_dir, keep)
        for run in self.persisted.runs_waiting():  # persisted copies of runs that ended while no daemon ran:
            if not keep(run):                      # their lifetimes start now
                self.persisted.run_ended(run)
        self.free([k for k in self.table.keys() if (r := run_of(k)) is not None and not keep(r)])  # restored
        return dropped

    def prewarm(self, count: int, first: int = 0) -> int:
        """Start storage functions ``first..count-1`` now (a warm-up invocation each that
        is not up already), so the puts of a run that announced its needs do not wait for
        cold starts. Returns how many were asked to start (capped at ``max_functions``)."""
        start, end = max(0, first), max(0, min(count, self.config.max_functions))
        for i in range(start, end):
            self._handle(i).warm()
        n = max(0, end - start)
        self.count("prewarmed", n)
        return n

    def wait_warm(self, count: int, timeout_s: float) -> bool:
        """Wait until the first ``count`` functions have an instance up (connected now, or
        connected and gone idle since ``prewarm``); False when ``timeout_s`` ran out first, or
        at once when a function's warm-up failed for good (its instance killed or failing to
        start through every retry: its first request starts it cold, as after reclamation)."""
        deadline = time.monotonic() + timeout_s
        up = True
        for h in self.handles[:count]:
            with h.cond:
                if not h.cond.wait_for(lambda: h.state == "active" or h.instance is not None  # noqa: B023
                                       or h.warm_failed, max(0.0, deadline - time.monotonic())):  # noqa: B023
                    return False
                up = up and (h.state == "active" or h.instance is not None)
        return up

    def stats(self) -> dict[str, Any]:
        objs = self.table.all()
        with self._state_lock:
            chunks = [self.state.chunks(h.index) for h in self.handles]
            slots = self.placement.slots
            sealed = [slots[h.index].sealed if h.index < len(slots) else False for h in self.handles]
            gc = self.state.gc.window.stats() if self.state.gc is not None else None
            if gc is not None and self.state.gc is not None:  # the metadata server's moves that landed
                gc["moved"] = self.state.gc.moved
            buckets = [self.state.gc.window.state_of(h.index) if self.state.gc is not None else "none"
                       for h in self.handles]
        return {
            "address": list(self.address), "gc": gc, "cache": self.cache_functions.router.stats(),
            "objects": len(self.table.keys()), "versions": len(objs),
            "bytes": sum(o.size for o in objs),
            "pending_uploads": sum(1 for o in objs if not o.uploaded and o.state == "ready"),
            **self.buffer.stats(),
            "runs": held_by_run(objs),
            "hello_pending": self._hellos.pending(),
            "host_link": {"mbps": self.host_link.mbps, "waited_s": round(self.host_link.waited_s, 3)},
            **self.counters,
            "functions": [{"name": h.name, "state": h.state, "mem": h.mem, "chunks": chunks[k],
                           "invocations": h.invocations, "lost": h.lost_count, "sealed": sealed[k],
                           "bucket": buckets[k]}
                          for k, h in enumerate(self.handles[:len(chunks)])],
        }

    def corrupt_chunk(self, key: str, stripe: int = 0, index: int = 0) -> bool:
        """Debug: flip a byte of one stored chunk in function memory (the
        runtime accepts this only when ``config.debug``)."""
        obj = self.table.latest(key)
        if obj is None:
            raise UnknownKey(key)
        place = obj.stripes[stripe].places[index]
        if place is None:
            return False
        done = threading.Event()
        result: list[bool] = []

        def cb(f: Frame | None, s: socket.socket | None) -> None:
            result.append(f is not None and f.status == Status.OK)
            done.set()

        self.handles[place[0]].request(Op.CORRUPT, chunk_key(key, obj.version, stripe, index), cb)
        done.wait(self.config.invoke_timeout_s)
        return bool(result and result[0])

    # -- function pool ------------------------------------------------------------
    def _handle(self, index: int) -> FunctionHandle:
        with self._lock:
            while len(self.handles) <= index:
                i = len(self.handles)
                name = f"{self.config.function_prefix}-{i}"
                if self.on_new_function is not None:
                    self.on_new_function(name)
                h = FunctionHandle(i, name, invoke=self.invoker.invoke_async, event=self._event,
                                   invoke_timeout_s=self.config.invoke_timeout_s, on_lost=self._function_lost,
                                   on_mem=lambda h, m: None,
                                   on_instance=lambda h: self.recovery.instance_changed(h.index),
                                   on_get=self.reads.note, on_errors=self._function_errors,
                                   on_instance_gone=lambda h: self.count("lost_instances"),
                                   ping_idle_s=self.config.ping_idle_s, ping_timeout_s=self.config.ping_timeout_s,
                                   on_ping=self._pinged)
                self.handles.append(h)
                self._by_name[name] = h
            return self.handles[index]

    def _pinged(self, h: FunctionHandle, ok: bool | None) -> None:
        """A PING revalidated an idle function (``pings``) and found its instance gone
        (``pings_failed``: a new one is invoked, its requests went elsewhere)."""
        if ok is None:
            self.count("pings")
        elif not ok:
            self.count("pings_failed")

    def _event(self, h: FunctionHandle, warmup: bool) -> dict[str, Any]:
        c = self.config
        host, port = c.dial_address(self.address)
        return {"daemon": [host, port], "name": h.name, "secret": h.secret, "idle_s": c.idle_s,
                "tick_ms": c.tick_ms, "block_size": c.block_size, "memory_grain": c.memory_grain,
                "capacity": c.capacity,
                "cos_url": c.cos_url, "cos_prefix": c.cos_prefix, "warmup": warmup, "debug": c.debug, "spin_us": c.spin_us,
                "term": h.term, "hash": h.hash, "diff_rank": h.diff_rank, "cache_cap": c.capacity - c.hardcap,
                "recover_workers": c.recover_workers, "bandwidth_mbps": c.function_bandwidth_mbps,
                "send_mbps": c.function_send_mbps,
                "recv_mbps": c.recv_mbps_overrides.get(h.name, c.function_recv_mbps), **self._tls_event}

    def _function_errors(self, h: FunctionHandle, errors: list[str]) -> None:
        """A function's BYE reported what went wrong in its invocation (its insertion log
        not written to COS: a loss then recovers what the table placed there)."""
        self.count("function_errors", len(errors))
        log.warning("function %s: %s", h.name, "; ".join(errors))

    def _function_lost(self, h: FunctionHandle) -> None:
        """A new instance answered for ``h`` and found its memory is not what the daemon
        placed there (SION's term/hash check). The store core forgets the chunks it held
        (GETs use the other chunks, recovery functions' copies or COS meanwhile) and hands
        the ones the metadata server placed there to recovery (``_recovery``)."""
        self.count("lost_functions")
        self._do(FunctionLost(fn=h.index, now=time.monotonic()))

    def _persist_loop(self) -> None:
        """Deletes the persisted copies whose lifetime after their run is over."""
        every = max(0.05, self.config.persist_sweep_s)
        while not self._stopping.wait(every):
            if self.cos is not None:
                self.persisted.sweep()

    def _warm_loop(self) -> None:
        c = self.config
        every = min(c.warm_interval_s, c.gc_interval_s or c.warm_interval_s) / 4
        while not self._stopping.wait(max(0.05, every)):
            sleeping = tuple((h.index, h.last_used) for h in list(self.handles) if h.state == "sleeping")
            self._do(Tick(sleeping=sleeping, reads=self.reads.take(), now=time.monotonic()))
            if self.state.gc is not None:
                with self._state_lock:
                    self.reads.watch = self.state.gc.window.degraded_functions()

    # -- connections --------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            if self._tls_edge is not None:
                self._tls_edge.accept(sock)      # its handshake thread hands the plain end to _serve_plain
                continue
            self._admit_accepted(sock)

    def _serve_plain(self, sock: socket.socket, peer: str) -> None:
        """A TLS connection's plain end (``storage_functions.tls``), read by the HELLO gate like any other."""
        if self._stopping.is_set():
            sock.close()
            return
        self._admit_accepted(sock)

    def _admit_accepted(self, sock: socket.socket) -> None:
        """Hand an accepted (or TLS-terminated) connection to the HELLO gate."""
        try:
            conn = self._connection(sock)
        except OSError as exc:
            log.debug("connection ended at accept: %r", exc)
            sock.close()
            return
        self._hellos.add(conn)  # no thread of its own before its HELLO authenticates it

    def _connection(self, sock: socket.socket) -> socket.socket:
        """The connection the handshake reads, from a socket just accepted (the one
        place a connection is made of an accepted socket)."""
        tune_socket(sock)
        return sock

    def _on_hello(self, sock: socket.socket, hello: Frame) -> None:
        """A connection's whole HELLO is in (the HELLO gate's thread): authenticated, it
        gets a thread of its own; refused, it is closed."""
        run = admit(self, sock, hello)
        if run is None:
            sock.close()
            return
        self._conn_threads.submit(serve_connection, self, sock, run)

    def _client_opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._clients.add(sock)

    def _client_closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._clients.discard(sock)
