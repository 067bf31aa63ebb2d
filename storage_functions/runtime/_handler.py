"""The storage-function entry point ``handler(event, context)``; runs
unchanged in AWS Lambda and on the local platform. Covers dialing out to the
daemon, serving chunk requests on a small and a large connection, the
idle/billing-tick exit rule and sealing the insertion log; not placement,
erasure coding or recovery.

Event (JSON)::

    {"daemon": [host, port], "name": "sion-3", "secret": "...",
     "idle_s": 2.0, "tick_ms": 1, "block_size": 1048576,
     "capacity": 1610612736, "cos_url": "file:///...", "cos_prefix": "sion",
     "warmup": false, "verify": true, "debug": false}

Memory lives in a module-global :class:`FunctionState` per function name so a
warm instance keeps its blocks between invocations (one name per process on
AWS; the name key only matters when several run in one test process).
"""

from __future__ import annotations

import json
import math
import select
import socket
import threading
import time
import uuid
import zlib
from typing import Any

from ..protocol import Op, Status, recv_frame, recv_into, send_frame, tune_socket, drain
from ._log import LogState, log_key, snapshot_key
from ._memory import BlockMemory, MemoryFull

__all__ = ["handler", "leave_at", "FunctionState", "reset_state"]

DEFAULT_BLOCK = 1 << 20


#: entries a STAT reply lists at most
STAT_ENTRIES = 4096


class FunctionState:
    """Everything a warm instance keeps between invocations."""

    def __init__(self, name: str, block_size: int, capacity: int) -> None:
        self.name = name
        self.instance = uuid.uuid4().hex[:12]
        self.memory = BlockMemory(block_size, capacity)
        self.log = LogState(name)
        self.lock = threading.Lock()  # guards log
        self.invocations = 0


_STATES: dict[str, FunctionState] = {}
_STATES_LOCK = threading.Lock()


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
    with _STATES_LOCK:
        state = _STATES.get(name)
        if state is None or state.memory.block_size != block:
            state = _STATES[name] = FunctionState(name, block, capacity)
        state.memory.capacity = capacity
        state.invocations += 1
    return _Invocation(state, event, context).run()


def _poll(sock: socket.socket, wait: float, last: float, spin_s: float) -> bool:
    """Is a request waiting? Busy-polls for up to ``spin_s`` after the last
    request (a sleeping CPU takes tens of microseconds to wake on a VM),
    then blocks in select for the rest of ``wait``."""
    if spin_s > 0:
        start = time.monotonic()
        end = min(last + spin_s, start + wait)
        while time.monotonic() < end:
            if select.select([sock], [], [], 0)[0]:
                return True
        wait = max(0.0, wait - (time.monotonic() - start))
    return bool(select.select([sock], [], [], wait)[0])


class _Invocation:
    def __init__(self, state: FunctionState, event: dict[str, Any], context: Any) -> None:
        self.state = state
        self.event = event
        self.started = time.monotonic()
        self.last = self.started
        self.last_small = 0.0  # spin only after a GET hinted b=1 (single-slice object), never on bulk traffic
        self.idle_s = float(event.get("idle_s", 2.0))
        self.tick_s = float(event.get("tick_ms", 1)) / 1000.0
        self.verify = bool(event.get("verify", True))
        self.debug = bool(event.get("debug", False))
        self.spin_s = float(event.get("spin_us", 0)) / 1e6
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        self.hard = self.started + remaining() / 1000.0 - 1.0 if callable(remaining) else math.inf
        self.served = 0
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._cos: Any = None

    # -- connection ---------------------------------------------------------
    def _connect(self, kind: str) -> socket.socket:
        host, port = self.event["daemon"]
        sock = socket.create_connection((host, int(port)), timeout=float(self.event.get("connect_timeout_s", 10)))
        sock.settimeout(None)
        tune_socket(sock)
        st = self.state
        send_frame(sock, Op.HELLO, meta={
            "role": "function", "name": st.name, "secret": self.event.get("secret", ""), "conn": kind,
            "instance": st.instance, "term": st.log.term, "hash": st.log.hash,
            "diff_rank": st.log.diff_rank, "mem": st.memory.used(), "chunks": len(st.memory.index)})
        reply = recv_frame(sock)
        if reply is None or reply.status != Status.OK:
            sock.close()
            raise ConnectionRefusedError(f"daemon refused function {st.name} ({kind})")
        return sock

    def run(self) -> dict[str, Any]:
        small = self._connect("small")
        try:
            large = self._connect("large")
        except BaseException:
            small.close()
            raise
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
        ``metrics``): a warm-up or not, requests served, and its own COS requests (the
        insertion log's PUTs)."""
        cos = self._cos.stats if self._cos is not None else None
        return {"warmup": int(bool(self.event.get("warmup"))), "served": self.served,
                "cos_puts": cos.puts if cos is not None else 0, "cos_gets": cos.gets if cos is not None else 0,
                "cos_lists": cos.lists if cos is not None else 0}

    def _serve_guarded(self, sock: socket.socket, small: bool) -> None:
        try:
            self._serve(sock, small)
        except (OSError, ConnectionError) as exc:
            if not self.stopping.is_set():
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
                    self._seal()
                    lg = self.state.log
                    send_frame(sock, Op.BYE, meta={"term": lg.term, "hash": lg.hash, "diff_rank": lg.diff_rank,
                                                  "mem": self.state.memory.used()})
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
            self._handle(sock, frame)
            self.served += 1
            self.last = time.monotonic()
            if small and frame.op == Op.GET and frame.b == 1:  # the daemon's hint: a latency-bound slice
                self.last_small = self.last

    # -- requests -----------------------------------------------------------
    def _handle(self, sock: socket.socket, f: Any) -> None:
        mem = self.state.memory
        if f.op == Op.PUT:
            try:
                entry, views = mem.reserve(f.key, f.a, f.b, f.paylen, f.crc)
            except (MemoryFull, ValueError) as exc:
                drain(sock, f.paylen)
                send_frame(sock, Op.REPLY, status=Status.FULL, reqid=f.reqid, a=mem.used(),
                           payload=str(exc).encode())
                return
            try:
                for v in views:
                    recv_into(sock, v)
            except BaseException:
                mem.abort(entry)
                raise
            mem.commit(entry)
            with self.state.lock:
                self.state.log.record_put(f.key, f.a, f.b, f.paylen, f.crc)
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used())
        elif f.op == Op.GET:
            got = mem.get(f.key)
            if got is None:
                send_frame(sock, Op.REPLY, status=Status.NOT_FOUND, reqid=f.reqid, a=mem.used())
                return
            entry, views = got
            if self.verify:
                crc = 0
                for v in views:
                    crc = zlib.crc32(v, crc)
                if crc != entry.crc:
                    send_frame(sock, Op.REPLY, status=Status.CORRUPT, reqid=f.reqid, a=mem.used(),
                               payload=f"chunk {f.key}: crc {crc:08x} != {entry.crc:08x}".encode())
                    return
            send_frame(sock, Op.REPLY, reqid=f.reqid, a=mem.used(), crc=entry.crc, payload=views,
                       paylen=entry.length)
        elif f.op == Op.DEL:
            keys = list(f.meta.get("keys", [])) or [f.key]
            n = 0
            for k in keys:
                if mem.delete(k):
                    n += 1
                    with self.state.lock:
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

    # -- persistence --------------------------------------------------------
    def _seal(self) -> None:
        st = self.state
        with st.lock:
            if not st.log.ops:
                return
            with st.memory._lock:
                chunks = [[e.key, e.block, e.offset, e.length, e.crc] for e in st.memory.index.values()]
            sealed = st.log.seal(chunks)
        if sealed is None:
            return
        node, snap = sealed
        cos = self._open_cos()
        if cos is None:
            return
        prefix = str(self.event.get("cos_prefix", "sion"))
        for attempt in range(3):
            try:
                cos.put(log_key(prefix, st.name, node["term"]), json.dumps(node).encode())
                cos.put(snapshot_key(prefix, st.name), json.dumps(snap).encode())
                return
            except Exception as exc:  # noqa: BLE001 - COS errors vary by backend
                if attempt == 2:
                    self.errors.append(f"insertion log term {node['term']}: {exc!r}")
                time.sleep(0.05 * (attempt + 1))

    def _open_cos(self) -> Any:
        if self._cos is None and self.event.get("cos_url"):
            from ..cos import open_cos  # lazy: boto3 only when the URL asks for S3

            self._cos = open_cos(str(self.event["cos_url"]))
        return self._cos
