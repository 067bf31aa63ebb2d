"""The storage-function entry point ``handler(event, context)``; runs
unchanged in AWS Lambda and on the local platform. Covers dialing out to the
daemon, serving chunk requests on a small and a large connection, the
idle/billing-tick exit rule, sealing the insertion log, the term/hash check
that tells a new instance it lost its memory (SION Sec. 5.5.1) and RECOVER
requests (download one chunk from COS into its planned place, or into the
cache space of a recovery function, Sec. 5.5.2); not placement, erasure
coding, nor deciding what to recover (the daemon does).

Event (JSON)::

    {"daemon": [host, port], "name": "sion-3", "secret": "...",
     "idle_s": 2.0, "tick_ms": 1, "block_size": 1048576,
     "capacity": 1610612736, "cos_url": "file:///...", "cos_prefix": "sion",
     "warmup": false, "verify": true, "debug": false,
     "term": 7, "hash": "...", "diff_rank": 42,      # the daemon's last report of this function
     "cache_cap": 322961408, "recover_workers": 4, "bandwidth_mbps": 0, "send_mbps": 0,
     "tls_ca": "-----BEGIN CERTIFICATE-----...", "tls_name": "10.0.3.7"}

``tls_ca`` (the deployment CA's PEM text) and ``tls_name`` (the name the daemon's
certificate must hold: the host it advertises, a DNS name or an IP address) are
present when the daemon serves TLS: both connections are then TLS 1.2+ and the
daemon is verified against that CA for that name (``storage_functions.tls``); a
daemon that fails verification ends the invocation as an unreachable one does.
Absent (or empty): plaintext.

RECOVER (``key`` a chunk key, ``a``/``b`` its block/offset, ``crc``; meta
``{"src": cos key, "off": int, "len": int, "cache": bool}``) runs on a pool of
``recover_workers`` threads so PUTs and GETs are served meanwhile; the reply
(OK, NOT_FOUND when COS lacks it, CORRUPT on a CRC mismatch, FULL) is sent
when the chunk is in memory. A cached copy (``cache``) lives in blocks above
``CACHE_BASE``, within ``cache_cap`` bytes, and is never logged: it is a
temporary copy that nobody recovers. ``bandwidth_mbps`` models the
instance's network bandwidth for these downloads (the local platform has no
real per-instance limit; benchmarks set it), ``send_mbps`` for the chunks
its GET replies send, ``recv_mbps`` for the chunks PUTs send it (one slow
instance among fast ones: the busy-aware placement's straggler). A GET whose meta names the chunk's COS copy
(``src``/``off``/``len``) makes this a cache function: a miss loads the chunk
into the demand cache first (``_demand``: least recently used evicted first,
and before any regular data); with ``"prefetch": true`` it only loads (the
daemon readies a broadcast's copies) and the reply carries no bytes.

Memory lives in a module-global :class:`FunctionState` per function name so a
warm instance keeps its blocks between invocations (one name per process on
AWS; the name key only matters when several run in one test process).
"""

from __future__ import annotations

import functools
import json
import math
from concurrent.futures import ThreadPoolExecutor
import socket
import ssl
import threading
import time
import uuid
from typing import Any

from .. import tls
from ..checksum import crc32
from ..protocol import Frame, Op, Status, drain, recv_frame, recv_into, send_frame, tune_socket
from ..readiness import readable
from ..throttle import Throttle as _Throttle  # the modelled per-instance link (its home is ``throttle``)
from ._demand import DemandCache, evict_for, load, read_cos_chunk
from ._log import SNAPSHOT_EVERY, LogState, consistent, log_key, snapshot_key
from ._memory import BlockMemory, MemoryFull, grain_of

__all__ = ["handler", "leave_at", "latency_bound", "FunctionState", "reset_state", "CACHE_BASE", "SPIN_PUT_MAX"]

DEFAULT_BLOCK = 1 << 20


#: entries a STAT reply lists at most
STAT_ENTRIES = 4096

#: first block of the cache space (copies a recovery function holds for another function)
CACHE_BASE = 1 << 40

#: a PUT of at most this many bytes is latency-bound (a small object, the client waits for
#: it): the small connection is busy-polled ``spin_us`` after it. A coded object's chunks
#: (~100 KiB and up with d = 10) are bulk traffic, whose spinning would take the CPU the
#: transfer needs (1 MiB PUTs measured 25% slower when every PUT spun)
SPIN_PUT_MAX = 64 << 10


class FunctionState:
    """Everything a warm instance keeps between invocations."""

    def __init__(self, name: str, block_size: int, capacity: int, grain: int | None = None) -> None:
        self.name = name
        self.instance = uuid.uuid4().hex[:12]
        self.memory = BlockMemory(block_size, capacity, grain)
        self.log = LogState(name)
        self.lock = threading.Lock()  # guards log and the cache space
        self.invocations = 0
        self.cached: dict[str, int] = {}  # cache-space key -> bytes
        self.demand = DemandCache()  # the cache-space keys that GETs demand-cached (``_demand``)
        self.cache_next = CACHE_BASE
        self.losses = 0  # invocations that found this instance was not the one the daemon knew
        self.cos: tuple[str, Any] | None = None  # (url, adapter), opened once per instance


_STATES: dict[str, FunctionState] = {}
_STATES_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _tls_context(ca_pem: str) -> ssl.SSLContext:
    """The client context for a CA (kept: a warm instance's next invocation reuses it)."""
    return tls.client_context(ca_pem)


def reset_state() -> None:
    """Forget every function's memory (tests; a cold start does this on AWS)."""
    with _STATES_LOCK:
        _STATES.clear()


def leave_at(started: float, last_activity: float, idle_s: float, tick_s: float, margin_s: float,
             hard_deadline: float = math.inf) -> float:
    """When an idle invocation should return (INFINICACHE billed-duration
    control): after ``idle_s`` without a request, but not before the end of
    the billing tick it is already paying for (minus ``margin_s``), and never
    after ``hard_deadline``."""
    t = last_activity + idle_s
    if tick_s > 0:
        ticks = max(1, math.ceil((t - started) / tick_s - 1e-9))
        t = max(t, started + ticks * tick_s - margin_s)
    return min(t, hard_deadline)


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    name = str(event["name"])
    block = int(event.get("block_size", DEFAULT_BLOCK))
    capacity = int(event.get("capacity", 1 << 30))
    grain = grain_of(block, int(event.get("memory_grain", 0) or 0) or None)
    with _STATES_LOCK:
        state = _STATES.get(name)
        if state is None or state.memory.block_size != block or state.memory.grain != grain:
            state = _STATES[name] = FunctionState(name, block, capacity, grain)
        state.memory.capacity = capacity
        state.invocations += 1
    return _Invocation(state, event, context).run()


def latency_bound(f: Frame) -> bool:
    """A request whose client waits for it alone, after which the small connection is
    busy-polled: a GET the daemon hinted (``b == 1``: a single-slice object) or a PUT of
    at most ``SPIN_PUT_MAX`` bytes; not a coded object's chunks (bulk traffic)."""
    return (f.op == Op.GET and f.b == 1) or (f.op == Op.PUT and f.paylen <= SPIN_PUT_MAX)


def _poll(sock: socket.socket, wait: float, last: float, spin_s: float) -> bool:
    """Is a request waiting? Busy-polls for up to ``spin_s`` after the last
    request (a sleeping CPU takes tens of microseconds to wake on a VM),
    then blocks in select for the rest of ``wait``."""
    if spin_s > 0:
        start = time.monotonic()
        end = min(last + spin_s, start + wait)
        while time.monotonic() < end:
            if readable([sock], 0):
                return True
        wait = max(0.0, wait - (time.monotonic() - start))
    return bool(readable([sock], wait))


class _Invocation:
    def __init__(self, state: FunctionState, event: dict[str, Any], context: Any) -> None:
        self.state = state
        self.event = event
        self.started = time.monotonic()
        self.last = self.started
        # spin only after a latency-bound request: a GET hinted b=1 (a single-slice object) or a
        # PUT of at most SPIN_PUT_MAX bytes; never on bulk traffic (a coded object's chunks)
        self.last_small = 0.0
        self.idle_s = float(event.get("idle_s", 2.0))
        self.tick_s = float(event.get("tick_ms", 1)) / 1000.0
        self.verify = bool(event.get("verify", True))
        self.debug = bool(event.get("debug", False))
        # over TLS the bytes reach the small connection through this process's relay thread
        # (``tls``), which a spinning main thread would keep from the GIL: no spinning then
        self.spin_s = 0.0 if event.get("tls_ca") else float(event.get("spin_us", 0)) / 1e6
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        self.hard = self.started + remaining() / 1000.0 - 1.0 if callable(remaining) else math.inf
        self.served = 0
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._cos: Any = None
        self._cos_base = (0, 0, 0)  # the COS adapter's counters when this invocation took it
        self._wlocks: dict[int, threading.Lock] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._throttle = _Throttle(float(event.get("bandwidth_mbps", 0) or 0))
        self._send_throttle = _Throttle(float(event.get("send_mbps", 0) or 0))
        self._recv_throttle = _Throttle(float(event.get("recv_mbps", 0) or 0))
        self.lost = self._check_term(state)
        lg = state.log
        self._log_counts = (lg.seals, lg.snapshots, lg.deferred)

    def _check_term(self, st: FunctionState) -> bool:
        """SION's consistency check: is this instance the one the daemon last heard from?
        If not its memory is not what the daemon placed there: it starts empty and
        continues the daemon's log chain."""
        ev = self.event
        want = (int(ev.get("term", 0) or 0), str(ev.get("hash", "") or ""), int(ev.get("diff_rank", 0) or 0))
        with st.lock:
            lg = st.log
            if consistent(lg.term, lg.hash, lg.diff_rank, *want):
                return False
            st.memory = BlockMemory(st.memory.block_size, st.memory.capacity, st.memory.grain)
            st.cached.clear()
            st.demand = DemandCache()
            lg.ops = []
            lg.adopt(*want)
            st.losses += 1
        return True

    # -- connection ---------------------------------------------------------
    def _dial(self, kind: str) -> socket.socket:
        """Connect to the daemon and say HELLO (the welcome is read by :meth:`_welcomed`)."""
        host, port = self.event["daemon"]
        ca = str(self.event.get("tls_ca") or "")
        sock = tls.connect((host, int(port)), float(self.event.get("connect_timeout_s", 10)),
                           _tls_context(ca) if ca else None, str(self.event.get("tls_name") or host))
        try:
            tune_socket(sock)
            st = self.state
            send_frame(sock, Op.HELLO, meta={
                "role": "function", "name": st.name, "secret": self.event.get("secret", ""), "conn": kind,
                "instance": st.instance, "term": st.log.term, "hash": st.log.hash,
                "diff_rank": st.log.diff_rank, "mem": st.memory.used(), "chunks": len(st.memory.index),
                "lost": self.lost})
        except BaseException:
            sock.close()
            raise
        return sock

    def _welcomed(self, sock: socket.socket, kind: str) -> None:
        reply = recv_frame(sock)
        if reply is None or reply.op != Op.REPLY or reply.status != Status.OK:  # a request first: out of step
            raise ConnectionRefusedError(f"daemon refused function {self.state.name} ({kind})")
        sock.settimeout(None)

    def _connect(self) -> tuple[socket.socket, socket.socket]:
        """Both connections, dialled before either welcome is awaited."""
        socks: list[socket.socket] = []
        try:
            for kind in ("small", "large"):
                socks.append(self._dial(kind))
            for sock, kind in zip(socks, ("small", "large")):
                self._welcomed(sock, kind)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        return socks[0], socks[1]

    def run(self) -> dict[str, Any]:
        try:  # before HELLO: importing boto3 later would stall the requests this instance serves
            self._open_cos()
        except Exception as exc:  # noqa: BLE001 - a bad COS fails the reads that need it, not the invocation
            self.errors.append(f"opening COS: {exc!r}")
        small, large = self._connect()
        worker = threading.Thread(target=self._serve_guarded, args=(large, False), daemon=True,
                                  name=f"{self.state.name}-large")
        worker.start()
        try:
            self._serve_guarded(small, True)
        finally:
            self.stopping.set()
            try:
                large.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            worker.join(5)
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
            small.close()
            large.close()
            self._seal()  # whatever arrived after the BYE handshake
        st = self.state
        return {"function": st.name, "instance": st.instance, "term": st.log.term, "hash": st.log.hash,
                "served": self.served, "mem": st.memory.used(), "chunks": len(st.memory.index),
                "duration_ms": round((time.monotonic() - self.started) * 1000, 3), "errors": self.errors,
                "metrics": self.metrics()}

    def metrics(self) -> dict[str, int]:
        """What this invocation did, for the cost account (the platform records a result's
        ``metrics``): a warm-up or not, requests served, its own COS requests (the
        insertion log's PUTs) and its seals (nodes written, snapshots among them, and seals
        that wrote nothing: deletes alone)."""
        cos = self._cos.stats if self._cos is not None else None
        b = self._cos_base  # the adapter is the instance's: its counters run over every invocation
        lg, (seals, snaps, deferred) = self.state.log, self._log_counts
        return {"warmup": int(bool(self.event.get("warmup"))), "served": self.served,
                "cos_puts": cos.puts - b[0] if cos is not None else 0,
                "cos_gets": cos.gets - b[1] if cos is not None else 0,
                "cos_lists": cos.lists - b[2] if cos is not None else 0, "seals": lg.seals - seals,
                "snapshots": lg.snapshots - snaps, "seals_deferred": lg.deferred - deferred}

    def _serve_guarded(self, sock: socket.socket, small: bool) -> None:
        """Serve one connection; whatever ends it ends the invocation with a result that
        names it (``errors``), never with an exception before the connections close."""
        try:
            self._serve(sock, small)
        except (OSError, ConnectionError) as exc:
            if not self.stopping.is_set():
                self.errors.append(f"{'small' if small else 'large'}: {exc!r}")
        except Exception as exc:  # noqa: BLE001 - a bug or a broken frame: the daemon sees the connection go
            self.errors.append(f"{'small' if small else 'large'}: {exc!r}")
        finally:
            self.stopping.set()

    def _serve(self, sock: socket.socket, small: bool) -> None:
        head = bytearray(40)
        bye_sent_at = 0.0
        while not self.stopping.is_set():
            if small:
                if self.event.get("warmup") and not bye_sent_at:
                    wait = 0.0
                else:
                    deadline = leave_at(self.started, self.last, self.idle_s, self.tick_s, 0.002, self.hard)
                    wait = max(0.0, deadline - time.monotonic())
                if bye_sent_at:
                    wait = max(0.0, bye_sent_at + 10.0 - time.monotonic())
                readable = _poll(sock, wait, self.last_small, self.spin_s)
                if not readable:
                    if bye_sent_at:
                        return  # the daemon never answered our BYE: leave
                    failed = len(self.errors)
                    self._seal()
                    lg = self.state.log
                    meta: dict[str, Any] = {"term": lg.term, "hash": lg.hash, "diff_rank": lg.diff_rank,
                                            "mem": self.state.memory.used()}
                    if len(self.errors) > failed:  # the daemon learns why this seal did not reach COS
                        meta["errors"] = self.errors[failed:]
                    with self._wlock(sock):
                        send_frame(sock, Op.BYE, meta=meta)
                    bye_sent_at = time.monotonic()
                    continue
            frame = recv_frame(sock, head)
            if frame is None:
                return
            if frame.op == Op.BYE_ACK:
                return
            if frame.op == Op.BYE_NACK:
                bye_sent_at = 0.0
                self.last = time.monotonic()
                continue
            if frame.op == Op.RECOVER:
                self._recover_later(sock, frame)
            else:
                with self._wlock(sock):
                    self._handle(sock, frame)
            self.served += 1
            self.last = time.monotonic()
            if small and latency_bound(frame):
                self.last_small = self.last

    def _wlock(self, sock: socket.socket) -> threading.Lock:
        """Replies of RECOVER requests come from worker threads: every write to a
        connection takes its lock."""
        lock = self._wlocks.get(id(sock))
        if lock is None:
            lock = self._wlocks.setdefault(id(sock), threading.Lock())
        return lock

    # -- recovery -----------------------------------------------------------
    def _recover_later(self, sock: socket.socket, f: Any) -> None:
        drain(sock, f.paylen)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, int(self.event.get("recover_workers", 4))),
                                            thread_name_prefix=f"{self.state.name}-recover")
        self._pool.submit(self._recover_guarded, sock, f)

    def _recover_guarded(self, sock: socket.socket, f: Any) -> None:
        try:
            status, msg = self._recover(f)
        except Exception as exc:  # noqa: BLE001 - any COS or memory failure: this chunk is not recovered
            status, msg = Status.ERROR, f"recovering {f.key}: {exc!r}"
        try:
            with self._wlock(sock):
                send_frame(sock, Op.REPLY, status=status, reqid=f.reqid, a=self.state.memory.used(),
                           b=self.state.log.diff_rank, payload=msg.encode() if msg else b"")
        except OSError:
            pass  # the connection went away: the daemon fails the request itself
        self.last = time.monotonic()

    def _recover(self, f: Any) -> tuple[int, str]:
        """Download one chunk from COS into memory; (status, message)."""
        st = self.state
        cache = bool(f.meta.get("cache"))
        data, status, message = read_cos_chunk(st, self._open_cos(), f, self._throttle, f.crc, "recover")
        if data is None:  # missing object or COS failure: the daemon pushes it
            return status, message
        length = len(data)
        mem = st.memory
        if cache:
            with st.lock:
                cap = int(self.event.get("cache_cap", 0) or 0)
                if f.key in st.cached:
                    return Status.OK, ""
                if sum(st.cached.values()) + length > cap:
                    return Status.FULL, f"{f.key}: the cache space of {st.name} is full"
                block = st.cache_next
                st.cache_next += max(1, -(-length // mem.block_size))
                st.cached[f.key] = length
            offset = 0
        else:
            block, offset = f.a, f.b
        try:  # never over a live entry: a chunk whose place was reused is dead (Overlap)
            entry, views = mem.reserve(f.key, block, offset, length, f.crc, supersede=cache)
        except (MemoryFull, ValueError) as exc:
            if cache:
                with st.lock:
                    st.cached.pop(f.key, None)
            return Status.FULL, str(exc)
        mem.fill(entry, views, data)
        if not cache:
            with st.lock:
                st.log.record_put(f.key, block, offset, length, f.crc)
        return Status.OK, ""

    # -- requests -----------------------------------------------------------
    def _handle(self, sock: socket.socket, f: Any) -> None:
        mem = self.state.memory
        if f.op == Op.PUT:
            try:
                supersede = not (f.meta and f.meta.get("restore"))  # a recovery's push: never over live data
                try:
                    entry, views = mem.reserve(f.key, f.a, f.b, f.paylen, f.crc, supersede=supersede)
                except MemoryFull:  # demand-cached chunks go before regular data
                    if not evict_for(self.state, f.paylen + mem.block_size):
                        raise
                    entry, views = mem.reserve(f.key, f.a, f.b, f.paylen, f.crc, supersede=supersede)
            except (MemoryFull, ValueError) as exc:
                drain(sock, f.paylen)
                send_frame(sock, Op.REPLY, status=Status.FULL, reqid=f.reqid, a=mem.used(),
                           payload=str(exc).encode())
                return
            try:
                self._recv_throttle.take(f.paylen)  # the modelled transfer time (0: none)
                for v in views:
                    recv_into(sock, v)
            except BaseException:
                mem.abort(entry)
                raise
            mem.commit(entry)
            gone = mem.take_superseded() if mem.superseded else []
            with self.state.lock:
                for k in gone:  # dead chunks this PUT's place was reused from (freed, the drop not here yet)
                    self.state.log.record_del(k)
                self.state.log.record_put(f.key, f.a, f.b, f.paylen, f.crc)
                rank = self.state.log.diff_rank
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(), b=rank)
        elif f.op == Op.GET:
            got = mem.get(f.key, pin=True)
            loaded = 0
            if got is None and f.meta and "src" in f.meta:  # a cache function: load it from COS
                loaded = 1
                status, msg = load(self.state, self.event, self._open_cos(), f, self._throttle)
                if status != Status.OK:
                    send_frame(sock, Op.REPLY, status=status, reqid=f.reqid, a=mem.used(), payload=msg.encode())
                    return
                got = mem.get(f.key, pin=True)
            elif got is not None and f.key in self.state.demand:
                with self.state.lock:
                    self.state.demand.touch(f.key)
            if got is None:
                send_frame(sock, Op.REPLY, status=Status.NOT_FOUND, reqid=f.reqid, a=mem.used())
                return
            try:  # pinned: no grain of this memory is given back while its bytes go out
                self._send_chunk(sock, f, got, loaded)
            finally:
                mem.unpin()
        elif f.op == Op.DEL:
            keys = list(f.meta.get("keys", [])) or [f.key]
            n = 0
            for k in keys:
                if mem.delete(k):
                    n += 1
                    with self.state.lock:
                        self.state.demand.discard(k)
                        if self.state.cached.pop(k, None) is None:
                            self.state.log.record_del(k)
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(), b=n)
        elif f.op == Op.PING:
            send_frame(sock, Op.PONG, reqid=f.reqid, a=mem.used(), b=len(mem.index))
        elif f.op == Op.STAT:  # what this instance holds: its blocks, and the entries under a key prefix
            drain(sock, f.paylen)
            entries = {e.key: [e.block, e.offset, e.length] for e in list(mem.index.values())
                       if e.key.split("/", 3)[-1].startswith(f.key)}
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(),
                       meta={"blocks": sorted(mem.blocks), "entries": dict(list(entries.items())[:STAT_ENTRIES])})
        elif f.op == Op.CORRUPT and self.debug:
            got = mem.get(f.key)
            if got is not None and got[0].length:
                got[1][0][0] ^= 0xFF
            send_frame(sock, Op.REPLY, reqid=f.reqid, status=Status.OK if got else Status.NOT_FOUND)
        else:
            drain(sock, f.paylen)
            send_frame(sock, Op.REPLY, status=Status.PROTOCOL, reqid=f.reqid,
                       payload=f"function {self.state.name}: unexpected op {f.op}".encode())

    def _send_chunk(self, sock: socket.socket, f: Any, got: tuple[Any, list[memoryview]], loaded: int) -> None:
        mem = self.state.memory
        if f.meta and f.meta.get("prefetch"):  # a cache function readied ahead of a burst: no bytes back
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(), b=loaded)
            return
        entry, views = got
        if self.verify:
            crc = 0
            for v in views:
                crc = crc32(v, crc)  # ISA-L's for a large chunk (``checksum``): 4-5x zlib's speed
            if crc != entry.crc:
                send_frame(sock, Op.REPLY, status=Status.CORRUPT, reqid=f.reqid, a=mem.used(),
                           payload=f"chunk {f.key}: crc {crc:08x} != {entry.crc:08x}".encode())
                return
        self._send_throttle.take(entry.length)
        send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(), b=loaded, crc=entry.crc, payload=views,
                   paylen=entry.length)  # b: 1 when this GET loaded the chunk from COS

    # -- persistence --------------------------------------------------------
    def _seal(self) -> None:
        """Seal the insertion log (``_log``: a node when a chunk stored since the last one is
        still in memory, a snapshot every ``snapshot_every`` terms) and write it to COS.
        Never raises: a COS that cannot be opened or written is an entry of ``errors`` (the
        BYE carries it to the daemon), and the next seal writes a snapshot, so that the
        chain recovery reads no longer needs the node that did not land (until then a loss
        recovers what the daemon's table placed here, ``daemon._recovery``)."""
        st = self.state

        def chunks() -> list[list[Any]]:
            with st.memory._lock:
                return [[e.key, e.block, e.offset, e.length, e.crc] for e in st.memory.index.values()
                        if e.key not in st.cached]

        with st.lock:
            if not st.log.ops:
                return
            sealed = st.log.seal(chunks, int(self.event.get("snapshot_every", SNAPSHOT_EVERY) or SNAPSHOT_EVERY))
        if sealed is None:
            return
        node, snap = sealed
        try:
            cos = self._open_cos()
        except Exception as exc:  # noqa: BLE001 - a missing module or a bad URL: as a COS that cannot be written
            self._seal_failed(node["term"], f"opening COS: {exc!r}")
            return
        if cos is None:
            return
        prefix = str(self.event.get("cos_prefix", "sion"))
        for attempt in range(3):
            try:
                cos.put(log_key(prefix, st.name, node["term"]), json.dumps(node).encode())
                if snap is not None:
                    cos.put(snapshot_key(prefix, st.name), json.dumps(snap).encode())
                elif node["term"] == 1:  # a new chain: an earlier chain's snapshot would not lead to it
                    cos.delete(snapshot_key(prefix, st.name))
                return
            except Exception as exc:  # noqa: BLE001 - COS errors vary by backend
                if attempt == 2:
                    self._seal_failed(node["term"], repr(exc))
                    return
                time.sleep(0.05 * (attempt + 1))

    def _seal_failed(self, term: int, why: str) -> None:
        with self.state.lock:
            self.state.log.snap_term = -1  # the next seal writes a snapshot: the chain skips this node
        self.errors.append(f"insertion log term {term} of {self.state.name} not written to COS: {why}")

    def _open_cos(self) -> Any:
        url = self.event.get("cos_url")
        if self._cos is None and url:
            st = self.state
            with st.lock:
                if st.cos is None or st.cos[0] != url:
                    from ..cos import open_cos  # lazy: boto3 only when the URL asks for S3

                    st.cos = (str(url), open_cos(str(url)))
                self._cos = st.cos[1]
                c = self._cos.stats
                self._cos_base = (c.puts, c.gets, c.lists)
        return self._cos
