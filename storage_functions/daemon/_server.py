"""The client daemon: one TCP listener for SDK clients and storage
functions, the object table, PUT (stream chunks to functions and the
persistent buffer), first-d GET with COS fallback, free, warm-ups. Covers
the request paths; a connection's handshake, token scope and request
dispatch (``_session``), what a request may declare (``_checks``),
placement policy (``_placement``), function connections (``_functions``),
the buffer (``_buffer``), a GET's first-d window (``_collect``) and the
writes to a client (``_outbox``) live in their own modules.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import zlib
from typing import Any, Callable, Iterable

from ..exceptions import NoRoom, NotEnoughChunks, ObjectTooLarge, ProtocolError, StorageError, StoreError, UnknownKey
from ..protocol import Frame, Op, Status, drain, pack_header, recv_frame, send_frame, status_for
from ._buffer import PersistentBuffer
from ._checks import StripeShape, alloc_chunks, meta_int, stripe_places, stripe_shape
from ._collect import Collector, NullSock, Waiter
from ._config import DaemonConfig
from ._functions import FunctionHandle
from ._ledger import MemoryLedger
from ._recovery import LostChunk, Recovery
from ._restore import DurableTable
from ._objects import ObjectTable, ObjectVersion, Stripe, chunk_key, cos_object_key, trailer
from ._outbox import BufferPool, Outbox
from ._placement import BadPlacement, PlaceChunk, PoolExhausted
from ._runs import drop_run_files, held_by_run, run_of, sweep_files
from ._session import serve_connection

__all__ = ["Daemon"]

log = logging.getLogger("storage_functions.daemon")
_STRIPE_META = 64 << 10  # a STRIPE's meta: d, p, sizes and one CRC per chunk


def _pad(fsock: socket.socket, n: int) -> None:
    """Send ``n`` zero bytes, or give up quietly (the connection's reader sees it gone)."""
    zeros = memoryview(bytes(min(n, 1 << 20)))
    try:
        while n:
            k = min(n, len(zeros))
            fsock.sendall(zeros[:k])
            n -= k
    except OSError:
        pass


class Daemon:
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
        self.placement = placement or PlaceChunk(group_size=config.group_size, hardcap=config.hardcap,
                                                 block_size=config.block_size, max_functions=config.max_functions,
                                                 capacity=config.capacity)
        self.on_new_function = on_new_function
        self.table = ObjectTable()
        self.ledger = MemoryLedger(config.block_size)  # what the functions physically hold, per run
        self._ledger_lock = threading.Lock()
        self.recovery = Recovery(self)
        self._own_buffer_dir = config.buffer_dir is None
        self.buffer_dir = config.buffer_dir or tempfile.mkdtemp(prefix="sion-buffer-")
        self.buffer = PersistentBuffer(self.buffer_dir, cos, workers=config.upload_workers,
                                       delay_s=config.upload_delay_s, fsync=config.buffer_fsync,
                                       on_uploaded=lambda obj: self.durable.uploaded(obj))
        self.durable = DurableTable(self)  # the table on disk: a restarted daemon rebuilds it (_restore)
        self.handles: list[FunctionHandle] = []
        self._by_name: dict[str, FunctionHandle] = {}
        self._place_lock = threading.Lock()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._clients: set[socket.socket] = set()
        self._gets: set[Collector] = set()
        self.pool = BufferPool()  # chunks queued behind slow clients
        self._gets_lock = threading.Lock()
        self._watch_cond = threading.Condition()
        self._stopping = threading.Event()
        self.address: tuple[str, int] = (config.host, config.port)
        self.counters = {"puts": 0, "gets": 0, "buffer_hits": 0, "cos_fallbacks": 0, "corrupt_chunks": 0,
                         "missing_chunks": 0, "chunk_retries": 0, "lost_functions": 0, "auth_failures": 0,
                         "scope_refusals": 0, "bad_frames": 0, "hello_timeouts": 0, "conn_errors": 0,
                         "prewarmed": 0}

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> tuple[str, int]:
        self.durable.restore()
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.config.host, self.config.port))
        ls.listen(512)
        self._listener = ls
        self.address = ls.getsockname()[:2]
        for target, name in ((self._accept_loop, "sion-accept"), (self._warm_loop, "sion-warm"),
                             (self._get_watch_loop, "sion-get-watch")):
            t = threading.Thread(target=target, daemon=True, name=name)
            t.start()
            self._threads.append(t)
        self.durable.verify()
        return self.address

    def stop(self) -> None:
        self._stopping.set()
        self.recovery.stop()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
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

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_uploads(self, timeout: float = 30.0) -> bool:
        return self.buffer.wait_idle(timeout)

    # -- public operations --------------------------------------------------------
    def free(self, keys: Iterable[str]) -> int:
        """Drop every version of ``keys`` from function memory, the buffer and
        COS (the metadata server calls this when objects expire). A version
        whose upload had not started is never uploaded. Returns the number of
        versions freed; unknown keys are ignored."""
        n = 0
        per_fn: dict[int, list[str]] = {}
        keys = list(keys)
        self.durable.freed(keys)
        for key in keys:
            for obj in self.table.pop(key):
                n += 1
                self.buffer.discard(obj)
                self.recovery.forget(obj)
                with self._place_lock:
                    for s, st in enumerate(obj.stripes):
                        for i, place in enumerate(st.places):
                            if place is None:
                                continue
                            fn, block, off = place
                            self.placement.free(fn, block, off, st.cl)
                            per_fn.setdefault(fn, []).append(chunk_key(obj.key, obj.version, s, i))
                            st.places[i] = None
        self._forget_chunks(per_fn)
        return n

    def _forget_chunks(self, per_fn: dict[int, list[str]], *, count: bool = True) -> None:
        """Delete chunks from their functions and from the memory ledger (``count``: they
        were counted in ``FunctionHandle.chunks``)."""
        now = time.monotonic()
        for fn, ckeys in per_fn.items():
            h = self.handles[fn]
            with self._ledger_lock:
                for k in ckeys:
                    self.ledger.released(now, h.name, k)
            if count:
                h.chunks -= len(ckeys)
            h.delete(ckeys)

    def _stored(self, fn: int, ckey: str, block: int, offset: int, length: int) -> Callable[[], None]:
        """What to note when function ``fn`` acknowledges a chunk: the ledger gains it."""
        def note() -> None:
            with self._ledger_lock:
                self.ledger.stored(time.monotonic(), self.handles[fn].name, ckey, block, offset, length)
        return note

    def memory(self, run_id: str | None = None) -> dict[str, Any]:
        """Physically held memory: one run's figures (``MemoryLedger.run_summary``), or per
        function the bytes of blocks the ledger counts and the bytes its runtime reported."""
        now = time.monotonic()
        with self._ledger_lock:
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
        has allocated) and ``entries`` (chunk key -> [block, offset, length]) of store keys
        under ``prefix``. Invokes it if it is not running (then it holds nothing)."""
        h = self._by_name.get(name)
        if h is None:
            raise UnknownKey(f"no storage function {name!r} in the pool")
        done = threading.Event()
        got: list[dict[str, Any]] = []

        def cb(f: Frame | None, s: socket.socket | None) -> None:
            if f is not None and f.status == Status.OK:
                got.append(dict(f.meta))
            done.set()

        h.request(Op.STAT, prefix, cb)
        if not done.wait(timeout_s) or not got:
            raise StoreError(f"function {name} did not answer STAT within {timeout_s:g} s")
        return got[0]

    def release_function(self, name: str) -> bool:
        """Scale-in (the metadata server's ``release_function``): a function none of whose
        blocks are in use leaves the pool at once: its invocation ends (no more billing, no
        warm-ups: it holds no chunks) until a placement needs it again. A function that
        still holds chunks (the instruction raced a new placement) is left alone."""
        h = self._by_name.get(name)
        if h is None:
            return False
        with self._ledger_lock:
            held = self.ledger.function_bytes(name)
        if held or h.chunks > 0:
            return False
        self.counters["released_functions"] = self.counters.get("released_functions", 0) + 1
        return h.release()

    def drop_run(self, run_id: str) -> int:
        """Drop everything this daemon holds for ``run_id`` (the run ended or expired): every
        version of its keys (as ``free``), and the COS copies and buffer files an earlier
        daemon process left for it. Returns the versions freed from the table."""
        n = self.free([k for k in self.table.keys() if run_of(k) == run_id])
        drop_run_files(self.cos, self.config.cos_prefix, self.buffer_dir, run_id)
        return n

    def sweep_runs(self, keep: Callable[[str], bool]) -> list[str]:
        """At start, before any PUT: drop the COS copies and buffer files that earlier daemon
        processes left for every run ``keep(run_id)`` is false for; returns those runs."""
        dropped = sweep_files(self.cos, self.config.cos_prefix, self.buffer_dir, keep)
        self.free([k for k in self.table.keys() if (r := run_of(k)) is not None and not keep(r)])  # restored
        return dropped

    def prewarm(self, count: int) -> int:
        """Start the first ``count`` storage functions now (a warm-up invocation each), so
        the puts of a run that announced its needs do not wait for cold starts. Returns
        how many were asked to start (capped at ``max_functions``)."""
        n = max(0, min(count, self.config.max_functions))
        for i in range(n):
            self._handle(i).warm()
        self.counters["prewarmed"] += n
        return n

    def wait_warm(self, count: int, timeout_s: float) -> bool:
        """Wait until the first ``count`` functions have an instance up (connected now, or
        connected and gone idle since ``prewarm``); False when ``timeout_s`` ran out first."""
        deadline = time.monotonic() + timeout_s
        for h in self.handles[:count]:
            with h.cond:
                if not h.cond.wait_for(lambda: h.state == "active" or h.instance is not None,  # noqa: B023
                                       max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def stats(self) -> dict[str, Any]:
        objs = self.table.all()
        return {
            "address": list(self.address),
            "objects": len(self.table.keys()), "versions": len(objs),
            "bytes": sum(o.size for o in objs),
            "pending_uploads": sum(1 for o in objs if not o.uploaded and o.state == "ready"),
            "uploads": self.buffer.uploads, "uploads_skipped": self.buffer.skipped,
            "upload_retries": self.buffer.retries,
            "runs": held_by_run(objs),
            **self.counters,
            "functions": [{"name": h.name, "state": h.state, "mem": h.mem, "chunks": h.chunks,
                           "invocations": h.invocations, "lost": h.lost_count,
                           "sealed": self.placement.slots[h.index].sealed if h.index < len(self.placement.slots) else False}
                          for h in self.handles],
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
                                   on_instance=lambda h: self.recovery.instance_changed(h.index))
                self.handles.append(h)
                self._by_name[name] = h
            return self.handles[index]

    def _event(self, h: FunctionHandle, warmup: bool) -> dict[str, Any]:
        c = self.config
        host, port = c.dial_address(self.address)
        return {"daemon": [host, port], "name": h.name, "secret": h.secret, "idle_s": c.idle_s,
                "tick_ms": c.tick_ms, "block_size": c.block_size, "capacity": c.capacity,
                "cos_url": c.cos_url, "cos_prefix": c.cos_prefix, "warmup": warmup, "debug": c.debug, "spin_us": c.spin_us,
                "term": h.term, "hash": h.hash, "diff_rank": h.diff_rank, "cache_cap": c.capacity - c.hardcap,
                "recover_workers": c.recover_workers, "bandwidth_mbps": c.function_bandwidth_mbps}

    def _function_lost(self, h: FunctionHandle) -> None:
        """A new instance answered for ``h`` and found its memory is not what the daemon
        placed there (SION's term/hash check). Forget the chunks it held (GETs use the
        other chunks, recovery functions' copies or COS meanwhile) and hand the ones the
        metadata server placed there to recovery (``_recovery``)."""
        self.counters["lost_functions"] += 1
        lost: list[LostChunk] = []
        with self._place_lock:
            self.placement.lost(h.index)
            for obj in self.table.all():
                for s, st in enumerate(obj.stripes):
                    for i, place in enumerate(st.places):
                        if place is not None and place[0] == h.index:
                            st.places[i] = None
                            if obj.alloc is not None and obj.state == "ready":
                                lost.append(LostChunk(obj, s, i, place))
            h.chunks = 0
        with self._ledger_lock:
            self.ledger.function_lost(time.monotonic(), h.name)
        self.recovery.lost(lost, h.index)

    def _warm_loop(self) -> None:
        while not self._stopping.wait(max(0.05, self.config.warm_interval_s / 4)):
            now = time.monotonic()
            for h in list(self.handles):
                if h.chunks > 0 and h.state == "sleeping" and now - h.last_used >= self.config.warm_interval_s:
                    h.last_used = now
                    h.warm()

    # -- connections --------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            t = threading.Thread(target=serve_connection, args=(self, sock), daemon=True, name="sion-conn")
            t.start()

    # -- PUT ----------------------------------------------------------------------
    def _put(self, sock: socket.socket, f: Frame, scratch: bytearray,
             refuse: StorageError | None = None) -> dict[str, Any]:
        """Store a PUT's stripes; ``refuse`` (or a size over the maximum) reads
        and drops them and raises it, touching nothing."""
        what = f"PUT {f.key!r}"
        size = meta_int(f.meta, "size", what, default=0)
        n = meta_int(f.meta, "n", what, default=0, hi=max(1, size))
        alloc = f.meta.get("alloc")
        error = refuse
        if error is None and size > self.config.max_object_bytes:
            error = ObjectTooLarge(f"{f.key!r}: {size} bytes is over the store's maximum of "
                                   f"{self.config.max_object_bytes} bytes")
        if error is not None:
            left = size
            for s in range(n):
                sf = self._next_stripe(sock, f.key, s, n)
                left -= stripe_shape(f.key, sf, s, left).ol
                drain(sock, sf.paylen, scratch)
            raise error
        obj = self.table.begin(f.key)
        obj.size = size
        obj.cos_key = cos_object_key(self.config.cos_prefix, f.key, obj.version)
        path = self.buffer.path_for(obj)
        waiter = Waiter()
        fh = self.buffer.create(path)
        used: list[int] = []
        try:
            file_off = 0
            left = size
            for s in range(n):
                sf = self._next_stripe(sock, f.key, s, n)
                shape = stripe_shape(f.key, sf, s, left)
                left -= shape.ol
                if error is not None:
                    drain(sock, sf.paylen, scratch)
                    continue
                try:
                    places = None
                    if alloc is not None:
                        if obj.alloc is None:
                            obj.alloc = alloc_chunks(f.key, alloc, shape.n)
                            used = [0] * shape.n
                        elif len(obj.alloc) != shape.n:
                            raise ProtocolError(f"PUT {f.key!r}: stripe {s} has {shape.n} chunks, the allocation "
                                                f"{len(obj.alloc)}")
                        places = stripe_places(f.key, obj.alloc, used, shape.cl, self.config.block_size)
                    elif self.config.placement == "metadata":
                        raise StoreError(f"PUT {f.key!r} carries no placement: this daemon stores chunks only where "
                                         "the metadata server placed them (sdk.Client passes its begin_put grant)")
                    stripe = self._stripe(f.key, shape, file_off, places)
                except StorageError as exc:
                    error = exc
                    drain(sock, sf.paylen, scratch)
                    continue
                obj.stripes.append(stripe)
                for i in range(stripe.n):
                    self._stream_chunk(sock, fh, scratch, obj, s, i, waiter)
                file_off += sf.paylen
            if error is not None:
                raise error
            fh.write(trailer(obj))
            if self.config.buffer_fsync:
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            fh.close()
            os.unlink(path)
            self._abandon(obj)
            raise
        fh.close()
        obj.buffer_path = path
        failed = waiter.wait(self.config.put_timeout_s)
        if failed:
            failed = self._retry_chunks(obj, failed)
        if failed and obj.alloc is not None and self._degraded_ok(obj, failed):
            failed = []  # every stripe has d chunks in memory; parity, the buffer and COS cover the rest
        if failed:
            obj.buffer_path = None
            os.unlink(path)
            self._abandon(obj)
            raise StoreError(f"PUT {f.key!r}: {len(failed)} chunk(s) could not be stored in any function")
        self.durable.put(obj)  # on disk before it is readable and acknowledged
        obj.state = "ready"
        self.buffer.submit(obj)
        self.counters["puts"] += 1
        return {"version": obj.version, "size": size}

    @staticmethod
    def _next_stripe(sock: socket.socket, key: str, s: int, n: int) -> Frame:
        sf = recv_frame(sock, max_meta=_STRIPE_META)
        if sf is None or sf.op != Op.STRIPE:
            raise ProtocolError(f"PUT {key!r}: expected stripe {s} of {n}")
        return sf

    def _stripe(self, key: str, shape: StripeShape, offset: int, alloc: list[tuple[Any, int, int]] | None) -> Stripe:
        n, cl = shape.n, shape.cl
        with self._place_lock:
            if alloc:
                places = [(self._index_of(a[0]), a[1], a[2]) for a in alloc]
                if len({pl[0] for pl in places}) != len(places):
                    raise StoreError(f"PUT {key!r}: the allocation puts two chunks on one function")
                try:
                    for fn, block, off in places:  # all checked before any is reserved
                        self.placement.check(fn, block, off, cl)
                    for fn, block, off in places:
                        self.placement.reserve(fn, block, off, cl)
                except (BadPlacement, PoolExhausted) as exc:  # e.g. a function a larger, earlier pool had
                    raise NoRoom(f"PUT {key!r}: the allocation cannot be used: {exc} (no room there in this "
                                 "daemon's pool)") from None
            else:
                try:
                    places = list(self.placement.place([cl] * n).places)
                except PoolExhausted as exc:
                    raise StoreError(f"PUT {key!r}: {exc}") from None
        for fn, _, _ in places:
            self._handle(fn).chunks += 1
        return Stripe(shape.d, shape.p, shape.fs, shape.ol, cl, list(shape.crcs), list(places), offset)

    def _index_of(self, fn: Any) -> int:
        if isinstance(fn, int) and not isinstance(fn, bool):
            return fn
        prefix = self.config.function_prefix + "-"
        if isinstance(fn, str) and fn.startswith(prefix) and fn[len(prefix):].isdigit():
            return int(fn[len(prefix):])
        raise StoreError(f"allocation names function {fn!r}, not one of {prefix}N")

    def _stream_chunk(self, sock: socket.socket, fh: Any, scratch: bytearray, obj: ObjectVersion, s: int, i: int,
                      waiter: Waiter) -> None:
        st = obj.stripes[s]
        place = st.places[i]
        cl = st.cl
        view = memoryview(scratch)
        fn_ok = [True]

        def write(fsock: socket.socket) -> None:
            left = cl
            try:
                while left:
                    k = sock.recv_into(view, min(left, len(view)))
                    if k == 0:
                        raise ConnectionError("client closed mid-PUT")
                    piece = view[:k]
                    fh.write(piece)
                    if fn_ok[0]:
                        try:
                            fsock.sendall(piece)
                        except OSError:
                            fn_ok[0] = False
                    left -= k
            except BaseException:
                if fn_ok[0] and left:  # keep the function's stream in step: the chunk fails its CRC there
                    _pad(fsock, left)
                raise

        waiter.add()
        if place is None:  # its function was lost since placement: buffer only, re-placed below
            write(NullSock())  # type: ignore[arg-type]
            waiter.fail(s, i)
            return
        fn, block, off = place
        ckey = chunk_key(obj.key, obj.version, s, i)
        try:
            self._handle(fn).request_put_stream(ckey, block, off, st.crcs[i], cl, write,
                                                waiter.callback(s, i, self._stored(fn, ckey, block, off, cl)),
                                                large=cl >= self.config.large_threshold)
        except TimeoutError:
            write(NullSock())  # type: ignore[arg-type]  # keep the client stream in step; the chunk is retried
            waiter.fail(s, i)

    def _degraded_ok(self, obj: ObjectVersion, failed: list[tuple[int, int]]) -> bool:
        """Whether an object whose chunks ``failed`` twice on their placed functions can
        still be readable from memory (at least d chunks of every stripe stored); if so
        the failed chunks' places are given up."""
        if (-1, -1) in failed:
            return False
        lost: dict[int, int] = {}
        for s, _ in failed:
            lost[s] = lost.get(s, 0) + 1
        if any(st.n - lost.get(s, 0) < st.d for s, st in enumerate(obj.stripes)):
            return False
        with self._place_lock:
            for s, i in failed:
                st = obj.stripes[s]
                place = st.places[i]
                if place is not None:
                    self.placement.free(place[0], place[1], place[2], st.cl)
                    self.handles[place[0]].chunks -= 1
                    st.places[i] = None
        self.counters["degraded_puts"] = self.counters.get("degraded_puts", 0) + 1
        return True

    def _planned(self, obj: ObjectVersion, s: int, i: int) -> tuple[int, int, int]:
        """Where the metadata server placed chunk ``i`` of stripe ``s``."""
        assert obj.alloc is not None
        fn, block, off, _ = obj.alloc[i]
        start = off + sum(obj.stripes[k].cl for k in range(s))
        bs = self.config.block_size
        return self._index_of(fn), block + start // bs, start % bs

    def _retry_chunks(self, obj: ObjectVersion, failed: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Store again, from the buffer file, chunks whose function failed: where the
        metadata server placed them (the function's next instance) when it is the
        placement authority, else on another function."""
        waiter = Waiter()
        assert obj.buffer_path is not None
        with open(obj.buffer_path, "rb") as fh:
            for s, i in failed:
                st = obj.stripes[s]
                old = st.places[i]
                if obj.alloc is not None:
                    new = self._planned(obj, s, i)
                    if old is None:
                        with self._place_lock:
                            self.placement.reserve(new[0], new[1], new[2], st.cl)
                        self._handle(new[0]).chunks += 1
                    self._resend(fh, obj, s, i, new, waiter)
                    continue
                with self._place_lock:
                    if old is not None:
                        self.placement.free(old[0], old[1], old[2], st.cl)
                        self.handles[old[0]].chunks -= 1
                    holders = frozenset(pl[0] for pl in st.places if pl is not None and pl is not old)
                    try:
                        new = self.placement.place([st.cl], exclude=holders).places[0]
                    except PoolExhausted:
                        st.places[i] = None
                        continue
                self._handle(new[0]).chunks += 1
                self._resend(fh, obj, s, i, new, waiter)
        return waiter.wait(self.config.put_timeout_s)

    def _resend(self, fh: Any, obj: ObjectVersion, s: int, i: int, place: tuple[int, int, int],
                waiter: Waiter) -> None:
        st = obj.stripes[s]
        st.places[i] = place
        fh.seek(obj.chunk_offset(s, i))
        data = fh.read(st.cl)
        self.counters["chunk_retries"] += 1
        waiter.add()
        fn, block, off = place
        ckey = chunk_key(obj.key, obj.version, s, i)
        self._handle(fn).request(Op.PUT, ckey, waiter.callback(s, i, self._stored(fn, ckey, block, off, st.cl)),
                                 a=block, b=off, crc=st.crcs[i], payload=data,
                                 large=st.cl >= self.config.large_threshold)

    def _abandon(self, obj: ObjectVersion) -> None:
        obj.state = "failed"
        self.table.drop_failed(obj)
        per_fn: dict[int, list[str]] = {}
        with self._place_lock:
            for s, st in enumerate(obj.stripes):
                for i, place in enumerate(st.places):
                    if place is not None:
                        self.placement.free(place[0], place[1], place[2], st.cl)
                        per_fn.setdefault(place[0], []).append(chunk_key(obj.key, obj.version, s, i))
                        st.places[i] = None
        self._forget_chunks(per_fn)

    # -- GET ----------------------------------------------------------------------
    def _get(self, sock: socket.socket, out: Outbox, f: Frame) -> None:
        version = f.meta.get("version")
        if version is not None:
            version = meta_int(f.meta, "version", f"GET {f.key!r}")
        obj = self.table.latest(f.key, version)
        if obj is None:
            raise UnknownKey(f"{f.key!r}{f' version {version}' if version is not None else ''}: no such object")
        self.counters["gets"] += 1
        head = pack_header(Op.REPLY, reqid=f.reqid, meta=obj.head_json())
        fh = self._open_buffer(obj)
        if fh is not None:  # read-after-write from the persistent buffer, in order, on this client's thread
            self.counters["buffer_hits"] += 1
            out.wait_idle(self.config.get_timeout_s)  # (the previous reply is written: the client read it)
            with fh:
                sock.sendall(head)
                for s, st in enumerate(obj.stripes):
                    for i in range(st.d):
                        send_frame(sock, Op.CHUNK, a=s, b=i, paylen=st.cl)
                        if st.cl:
                            sock.sendfile(fh, obj.chunk_offset(s, i), st.cl)
                send_frame(sock, Op.END, reqid=f.reqid)
            return
        # no waiting here: the function reader threads hand the chunks to the outbox
        # and the last one adds END; the GET watchdog handles stragglers and fallbacks
        col = Collector(self, out, obj, f.reqid, head, window=self.config.get_window, extra=self.config.get_extra)
        with self._gets_lock:
            self._gets.add(col)
        col.start()

    def _get_watch_loop(self) -> None:
        """Stripes without a chunk for ``get_straggler_s`` (ask the untried
        chunks), stripes that ran out of chunks or of ``get_timeout_s`` since
        they were requested (finish them from the buffer or COS)."""
        c = self.config
        tick = max(0.002, min(0.02, c.get_straggler_s / 4))
        while not self._stopping.is_set():
            with self._watch_cond:
                self._watch_cond.wait(tick)
            now = time.monotonic()
            with self._gets_lock:
                cols = list(self._gets)
            for col in cols:
                done, short = col.check(now, c.get_straggler_s, c.get_timeout_s)
                if done:
                    with self._gets_lock:
                        self._gets.discard(col)
                for s in short:
                    threading.Thread(target=self._fallback_stripe, args=(col, s), daemon=True,
                                     name="sion-get-fallback").start()

    def _kick(self) -> None:
        with self._watch_cond:
            self._watch_cond.notify()

    def _open_buffer(self, obj: ObjectVersion) -> Any:
        with obj.lock:
            if obj.uploaded or obj.buffer_path is None:
                return None
            try:
                return open(obj.buffer_path, "rb")
            except FileNotFoundError:
                return None

    def _fallback_stripe(self, col: Collector, s: int) -> None:
        """Send the chunks of stripe ``s`` that first-d could not get, from
        the buffer or COS; END with an error if there are not enough."""
        have = col.take_over(s, self.config.get_timeout_s)
        if have is None:
            return
        obj = col.obj
        st = obj.stripes[s]
        if col.full(s):
            return
        self.counters["cos_fallbacks"] += 1
        try:
            for i in range(st.n):
                if col.full(s):
                    break
                if i in have:
                    continue
                data = self._read_chunk(obj, s, i)
                if data is not None:
                    col.forward(s, i, data)
            if not col.full(s):
                raise NotEnoughChunks(f"{obj.key!r} version {obj.version}: stripe {s} has {col.got[s]} of "
                                      f"{st.d} chunks and no readable COS copy")
        except StorageError as exc:
            col.fail(status_for(exc), str(exc).encode())
        except OSError as exc:  # a buffer file that went away under the read: this GET fails, not the daemon
            col.fail(Status.ERROR, f"{obj.key!r}: reading stripe {s} failed: {exc!r}".encode())

    def _read_chunk(self, obj: ObjectVersion, s: int, i: int) -> bytes | None:
        st = obj.stripes[s]
        off = obj.chunk_offset(s, i)
        data: bytes | None = None
        fh = self._open_buffer(obj)
        if fh is not None:
            with fh:
                fh.seek(off)
                data = fh.read(st.cl)
        elif self.cos is not None:
            try:
                data = self.cos.get_range(obj.cos_key, off, st.cl) if st.cl else b""
            except Exception as exc:  # noqa: BLE001
                log.warning("COS read of %s failed: %r", obj.cos_key, exc)
                return None
        if data is None or len(data) != st.cl or zlib.crc32(data) != st.crcs[i]:
            return None
        return data
