"""The daemon's side of the storage functions: one :class:`FunctionHandle`
per function of the pool, with its connection states (INFINICACHE Sec. 3:
sleeping -> invoking -> active -> BYE -> sleeping), its two connections
(small and large queue, SION Sec. 5.3.4) and request dispatch. Covers
invoking on demand, the per-invocation secret, queuing requests while a
function starts, the BYE handshake, connection loss, and keeping the function's
insertion-log state as last reported (term, hash, ``diff_rank``: HELLO, BYE and
every PUT reply) for the next invocation's consistency check (SION Sec.
5.5.1); not placement nor what a request means to the object table.

A loss is what the instance says in its HELLO (``lost``: its log was behind the
daemon's report, so its memory is not what was placed there); a changed
instance id alone (a warm instance the platform replaced while nothing was
stored, or a recovery function's copies) is reported through ``on_instance``. Every
instance that goes (its connection closes without a BYE, or another instance answers in
its place) is reported once through ``on_instance_gone``, whether or not it held chunks.

PING revalidation (INFINICACHE Sec. 3-4): a request to an active instance none of whose
connections said anything for ``ping_idle_s`` is held while a PING goes out on the small
connection; the PONG sends it (and whatever queued behind it). No PONG within
``ping_timeout_s`` closes the instance's connections as if it had died
(``on_instance_gone``), makes the function ``silent`` until its next instance says HELLO,
invokes that instance and fails the held requests at once (a GET asks other chunks, a PUT
stores its chunk elsewhere or goes on degraded; a DEL waits for the next instance).
``on_ping`` hears of every ping and of its verdict.

Requests never block the caller: ``request`` queues when the function is not
connected and triggers an invocation; the reply callback runs on the
connection's reader thread and must consume exactly ``frame.paylen`` bytes
from the socket it is given (or receives ``None, None`` when the request
failed because the instance went away). An error reply's payload (its
message) is read by the reader itself and the callback sees ``paylen`` 0: a
callback that forgot it would leave the message to be read as the next frame's
header and break the connection (as prefetches did).
"""

from __future__ import annotations

import hmac
import itertools
import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..protocol import Frame, Op, Status, recv_frame, send_frame
from ..threads import ThreadCache

__all__ = ["FunctionHandle", "ReplyCallback", "WARMUP_RETRIES"]

#: Times a warm-up whose invocation ended before its instance connected is invoked again
#: (Lambda retries a failed asynchronous invocation twice).
WARMUP_RETRIES = 2

log = logging.getLogger("storage_functions.daemon")

# the threads that invoke functions: a new thread is started under the function's lock, which
# every request to it waits for, so a burst of invocations reuses the threads of the last
_INVOKERS = ThreadCache("sion-invoke", keep=64)

ReplyCallback = Callable[[Frame | None, socket.socket | None], None]


def _int(v: Any) -> int:
    """A non-negative integer a function reported, or 0."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


@dataclass(slots=True)
class _Request:
    op: int
    key: str
    a: int
    b: int
    crc: int
    meta: dict[str, Any] | None
    payload: Any
    large: bool
    on_reply: ReplyCallback


@dataclass
class _Conn:
    kind: str
    sock: socket.socket
    wlock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[int, ReplyCallback] = field(default_factory=dict)
    closed: bool = False


class FunctionHandle:
    def __init__(self, index: int, name: str, *, invoke: Callable[[str, dict[str, Any]], None],
                 event: Callable[[FunctionHandle, bool], dict[str, Any]], invoke_timeout_s: float,
                 on_lost: Callable[[FunctionHandle], None], on_mem: Callable[[FunctionHandle, int], None],
                 on_instance: Callable[[FunctionHandle], None] | None = None,
                 on_get: Callable[[int, str], None] | None = None,
                 on_errors: Callable[[FunctionHandle, list[str]], None] | None = None,
                 on_instance_gone: Callable[[FunctionHandle], None] | None = None,
                 ping_idle_s: float = 0.0, ping_timeout_s: float = 0.5,
                 on_ping: Callable[[FunctionHandle, bool | None], None] | None = None) -> None:
        self.index = index
        self.name = name
        self._invoke = invoke
        self._event = event
        self._invoke_timeout = invoke_timeout_s
        self._on_lost = on_lost
        self._on_mem = on_mem
        self._on_instance = on_instance
        self._on_get = on_get  # (function, chunk key) of every GET asked of it (the GC window's marks)
        self._on_errors = on_errors  # what a BYE reports went wrong (a seal that did not reach COS)
        # once per instance that went away: its connection closed without a BYE, or a new
        # instance answered in its place (reclaimed or killed while it slept)
        self._on_gone = on_instance_gone
        self._gone: str | None = None  # the instance last reported gone
        self._ping_idle = ping_idle_s  # 0: never revalidate
        self._ping_timeout = ping_timeout_s
        self._on_ping = on_ping  # (handle, None) a PING went out; (handle, ok) its verdict
        # requests held while a PING checks an instance that was silent for ping_idle_s
        # (None: no PING out); sent on its PONG, failed when none comes in time
        self._probe: list[_Request] | None = None
        self.last_heard = 0.0  # monotonic: when the instance last said anything (HELLO, any frame)
        self.pings = 0
        self.pings_failed = 0
        self.cond = threading.Condition()
        self.state = "sleeping"  # sleeping | invoking | active
        self.secret = ""
        self.conns: dict[str, _Conn] = {}
        # the invocation's first HELLO has been acted on (a lost or replaced instance handed to
        # recovery): requests go to the instance only after that, whichever connection is last
        self._greeted = False
        self.backlog: list[_Request] = []
        self.pending_deletes: list[str] = []
        self.inflight = 0
        self.inflight_bytes = 0  # bytes of the PUT chunks among ``inflight`` (streaming or waiting to)
        self.invoked_at = 0.0
        # a warm-up whose invocation ended before it connected (its instance was killed or
        # failed to start) is invoked again at once, WARMUP_RETRIES times, as Lambda retries an
        # asynchronous invocation; then ``warm_failed`` says so (``Daemon.wait_warm`` stops waiting)
        self._warming = False
        self._warm_retries = 0
        self.warm_failed = False
        self.last_bye = 0.0
        self.last_died = -1.0  # monotonic: when an instance's connection last went without a BYE
        # monotonic: since when the instance has let a request go unanswered past its timeout
        # (stopped or hung, its connections open); 0.0 once anything comes from it again
        self.silent_since = 0.0
        self.last_used = 0.0
        self.instance: str | None = None
        self.term = 0  # the function's insertion log as last reported (SION's term/hash check)
        self.hash = ""
        self.diff_rank = 0
        self.mem = 0
        self.invocations = 0
        self.lost_count = 0
        self._reqids = itertools.count(1)

    @property
    def silent(self) -> bool:
        """The instance let a request go unanswered past its timeout and has said nothing
        since: PUTs store their chunks elsewhere (or go on degraded) instead of waiting for
        it again, and GETs ask it last."""
        return self.silent_since > 0.0

    def mark_silent(self) -> bool:
        """The instance let a request go unanswered past its timeout; True when it was not
        silent before."""
        if self.silent_since:
            return False
        self.silent_since = time.monotonic()
        log.warning("function %s did not answer in time: its chunks go elsewhere until it answers", self.name)
        return True

    # -- requests -------------------------------------------------------------
    def request(self, op: int, key: str, on_reply: ReplyCallback, *, a: int = 0, b: int = 0, crc: int = 0,
                meta: dict[str, Any] | None = None, payload: Any = None, large: bool = False) -> None:
        if op in (Op.PUT, Op.RECOVER) and not (meta and meta.get("cache")):
            on_reply = self._ranked(on_reply)
        elif op == Op.GET and self._on_get is not None:
            self._on_get(self.index, key)
        req = _Request(op, key, a, b, crc, meta, payload, large, on_reply)
        with self.cond:
            self.last_used = now = time.monotonic()
            if self.state != "active":
                self.backlog.append(req)
                self._start_locked(warmup=False)
                return
            if self._probe is not None:  # a PING is out: its answer sends or fails this
                self._probe.append(req)
                return
            ping = self._stale_locked(now)
            if ping:
                self._probe = [req]
            else:
                self.inflight += 1
        if ping:
            self._ping()
        else:
            self._send(req)

    def request_put_stream(self, key: str, block: int, offset: int, crc: int, length: int,
                           write: Callable[[socket.socket], None] | None, on_reply: ReplyCallback, *,
                           large: bool = True, payload: Any = None) -> None:
        """PUT whose payload ``write(sock)`` streams (from the client socket)
        while holding the large connection, or is ``payload`` (bytes in hand: sent
        with its header in one ``sendmsg``, so the function wakes once); waits for
        the function to be connected first (the bytes have nowhere else to go)."""
        deadline = time.monotonic() + self._invoke_timeout * 2
        while True:
            with self.cond:
                self.last_used = time.monotonic()
                while self.state != "active" or self._probe is not None:
                    if self.silent:  # its PING went unanswered: the caller stores the chunk elsewhere
                        raise TimeoutError(f"storage function {self.name} did not answer a PING")
                    if self.state != "active":
                        self._start_locked(warmup=False)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"storage function {self.name} did not connect")
                    self.cond.wait(min(left, 0.5))
                ping = self._stale_locked(time.monotonic())
                if ping:
                    self._probe = []  # nothing held: this thread waits for the verdict above
                else:
                    self.inflight += 1
                    self.inflight_bytes += length
                    conn = self.conns["large" if large else "small"]
                    break
            self._ping()
        reqid = next(self._reqids)
        with conn.wlock:
            conn.pending[reqid] = self._wrap(self._ranked(self._unload(on_reply, length)))
            try:
                if write is None:
                    send_frame(conn.sock, Op.PUT, reqid=reqid, key=key, crc=crc, a=block, b=offset, payload=payload)
                else:
                    send_frame(conn.sock, Op.PUT, reqid=reqid, key=key, crc=crc, a=block, b=offset, paylen=length)
            except OSError:
                conn.closed = True
            if write is not None:
                write(conn.sock)  # never raises for the function side; see Daemon._stream_chunk
        if conn.closed:
            self._conn_lost(conn)

    def delete(self, keys: list[str]) -> None:
        """Drop chunks; delivered now if connected, else on the next invocation."""
        if not keys:
            return
        with self.cond:
            if self.state != "active":
                self.pending_deletes.extend(keys)
                return
            self.inflight += 1
        self._send(_Request(Op.DEL, "", 0, 0, 0, {"keys": keys}, None, False, lambda f, s: None))

    # -- PING revalidation ------------------------------------------------------
    def _stale_locked(self, now: float) -> bool:
        """Whether a request now must wait for a PING: the instance said nothing for
        ``ping_idle_s`` (locked; the state is active). Requests in flight do not spare it
        the PING: a frozen instance keeps them in flight; a live one answers on its small
        connection even while a large transfer runs."""
        return bool(self._ping_idle) and now - self.last_heard > self._ping_idle

    def _ping(self) -> None:
        """PING the instance on its small connection (``_probe`` is set) and watch for the PONG."""
        with self.cond:
            conn = self.conns.get("small")
            self.pings += 1
        if self._on_ping is not None:
            self._on_ping(self, None)
        if conn is None or conn.closed:
            self._probed(None)
            return
        answered = threading.Event()

        def pong(frame: Frame | None, sock: socket.socket | None) -> None:
            answered.set()
            self._probed(conn if frame is not None else None)

        reqid = next(self._reqids)
        with conn.wlock:
            conn.pending[reqid] = pong
            try:
                send_frame(conn.sock, Op.PING, reqid=reqid)
            except OSError:
                conn.closed = True
        if conn.closed:
            self._conn_lost(conn)  # fails the ping too
            return
        _INVOKERS.submit(self._ping_watch, conn, reqid, answered)

    def _ping_watch(self, conn: _Conn, reqid: int, answered: threading.Event) -> None:
        if answered.wait(self._ping_timeout):
            return
        with conn.wlock:
            unanswered = reqid in conn.pending
        if not unanswered:
            return
        log.warning("function %s did not answer a PING in %.3g s after %.3g s of silence: its instance is "
                    "taken as gone and a new one invoked", self.name, self._ping_timeout, self._ping_idle)
        self._conn_lost(conn)  # as if it died: the other connection goes too, the ping fails

    def _probed(self, conn: _Conn | None) -> None:
        """The PING's verdict: ``conn`` answered (send what was held), or None (the instance
        is gone: a new one is invoked, the held requests fail at once; DELs wait for it)."""
        ok = conn is not None
        send: list[_Request]
        fail: list[_Request]
        with self.cond:
            held, self._probe = self._probe or [], None
            if ok:
                self.last_heard = time.monotonic()
            else:  # silent until its next instance says HELLO: PUTs go elsewhere, GETs ask it last
                self.pings_failed += 1
                self.silent_since = self.silent_since or time.monotonic()
            if ok and self.state == "active":
                self.inflight += len(held)
                send, fail = held, []
            elif ok:  # it answered, then went: the held requests wait for the next instance
                self.backlog.extend(held)
                self._start_locked(warmup=False)
                send, fail = [], []
            else:
                send = []
                fail = [r for r in held if r.op != Op.DEL]
                for r in held:
                    if r.op == Op.DEL and r.meta:
                        self.pending_deletes.extend(r.meta.get("keys", []))
                if self.state == "sleeping":
                    self._start_locked(warmup=False)
            self.cond.notify_all()
        if self._on_ping is not None:
            self._on_ping(self, ok)
        for req in send:
            self._send(req)
        for req in fail:
            req.on_reply(None, None)

    def _ranked(self, cb: ReplyCallback) -> ReplyCallback:
        """A stored chunk's reply carries the function's ``diff_rank``: the daemon's
        report follows it, so an instance that dies before sealing is still caught."""
        def done(frame: Frame | None, sock: socket.socket | None) -> None:
            if frame is not None and frame.status == Status.OK:
                with self.cond:
                    self.diff_rank = max(self.diff_rank, frame.b)
            cb(frame, sock)
        return done

    def _unload(self, cb: ReplyCallback, length: int) -> ReplyCallback:
        """A PUT chunk's ``length`` bytes leave ``inflight_bytes`` when its request ends."""
        def done(frame: Frame | None, sock: socket.socket | None) -> None:
            try:
                cb(frame, sock)
            finally:
                with self.cond:
                    self.inflight_bytes -= length
        return done

    @property
    def load(self) -> tuple[int, int]:
        """(requests queued or in flight, bytes of the PUT chunks among them): what the
        daemon reports to the metadata server's busy test (SION Fig. 5 ``TestAndPlace``)."""
        return self.inflight + len(self.backlog) + len(self._probe or ()), self.inflight_bytes

    def _wrap(self, cb: ReplyCallback) -> ReplyCallback:
        def done(frame: Frame | None, sock: socket.socket | None) -> None:
            try:
                cb(frame, sock)
            finally:
                with self.cond:
                    self.inflight -= 1
                    self.cond.notify_all()
        return done

    def _send(self, req: _Request) -> None:
        with self.cond:
            conn = self.conns.get("large" if req.large else "small")
        if conn is None or conn.closed:
            with self.cond:
                self.inflight -= 1
            req.on_reply(None, None)
            return
        reqid = next(self._reqids)
        with conn.wlock:
            conn.pending[reqid] = self._wrap(req.on_reply)
            try:
                send_frame(conn.sock, req.op, reqid=reqid, key=req.key, meta=req.meta, crc=req.crc, a=req.a,
                           b=req.b, payload=req.payload)
            except OSError:
                pass  # the reader sees the loss and fails every pending request
        if conn.closed:
            self._conn_lost(conn)

    # -- lifecycle ------------------------------------------------------------
    def warm(self) -> None:
        with self.cond:
            if self.state == "sleeping":
                self._warming, self._warm_retries, self.warm_failed = True, 0, False
                self._start_locked(warmup=True)

    def _start_locked(self, *, warmup: bool) -> None:
        now = time.monotonic()
        if self.state == "invoking" and now - self.invoked_at < self._invoke_timeout:
            return
        if self.state == "active":
            return
        self.state = "invoking"
        self.invoked_at = now
        self.secret = secrets.token_hex(16)
        self.invocations += 1
        ev = self._event(self, warmup)
        # give a warm instance that just said BYE time to return, so the
        # platform reuses it rather than cold-starting another one
        gap = 0.03 - (now - self.last_bye)
        _INVOKERS.submit(self._do_invoke, ev, gap)

    def _do_invoke(self, ev: dict[str, Any], gap: float) -> None:
        if gap > 0:
            time.sleep(gap)
        try:
            ret = self._invoke(self.name, ev)
            fut = getattr(ret, "future", None)
            if fut is not None and hasattr(fut, "add_done_callback"):
                secret = ev.get("secret", "")
                fut.add_done_callback(lambda _f: self._invocation_ended(secret))
        except Exception as exc:  # noqa: BLE001 - any invoker failure: fail the backlog
            log.warning("invoking %s failed: %r", self.name, exc)
            with self.cond:
                self.state = "sleeping"
                backlog, self.backlog = self.backlog, []
                self.cond.notify_all()
            for req in backlog:
                req.on_reply(None, None)

    def _invocation_ended(self, secret: str) -> None:
        """The invocation returned (or its instance died) before connecting:
        invoke again now rather than after ``invoke_timeout_s``."""
        with self.cond:
            if self.secret != secret or self.state != "invoking":
                return
            self.state = "sleeping"
            self.conns = {}
            if self.backlog or self.pending_deletes:
                self._start_locked(warmup=False)
            elif self._warming and self._warm_retries < WARMUP_RETRIES:
                self._warm_retries += 1
                self._start_locked(warmup=True)
            elif self._warming:
                self._warming, self.warm_failed = False, True
            self.cond.notify_all()

    def attach(self, hello: Frame, sock: socket.socket) -> _Conn | None:
        """A connection from an instance of this function said HELLO."""
        m = hello.meta
        kind = m.get("conn")
        conn = _Conn(str(kind), sock)
        # nothing goes out on this connection before its welcome: once it is in ``conns``, the
        # other connection's HELLO may open the handle and send the backlog on it, and a
        # request read as the welcome leaves its payload to be read as frames
        with conn.wlock:
            with self.cond:
                if self.state != "invoking" or kind not in ("small", "large") or \
                        not self._secret_ok(m.get("secret")):
                    return None
                instance = str(m.get("instance", ""))
                first = not self.conns  # the invocation's first connection: its HELLO speaks for it
                if first:
                    self._greeted = False
                    self.silent_since = 0.0  # a new instance answers
                lost = first and m.get("lost") is True
                changed = first and self.instance is not None and instance != self.instance
                gone = changed and self._gone != self.instance  # its death not seen yet
                if gone:
                    self._gone = self.instance
                self.instance = instance
                if first:
                    self.term = _int(m.get("term"))
                    self.hash = str(m.get("hash", ""))
                    self.diff_rank = max(_int(m.get("diff_rank")), 0 if lost else self.diff_rank)
                self.mem = _int(m.get("mem"))
                self.last_heard = time.monotonic()
                self.conns[kind] = conn
            send_frame(sock, Op.REPLY)
        if gone and self._on_gone is not None:
            self._on_gone(self)
        if changed and self._on_instance is not None:
            self._on_instance(self)
        if lost:
            self.lost_count += 1
            self._on_lost(self)
        with self.cond:
            if first and self.conns.get(kind) is conn:  # still this invocation's connection
                self._greeted = True
            if len(self.conns) == 2 and self.state == "invoking" and self._greeted:
                self.state = "active"
                self._warming = self.warm_failed = False
                backlog, self.backlog = self.backlog, []
                deletes, self.pending_deletes = self.pending_deletes, []
                self.inflight += len(backlog) + (1 if deletes else 0)
                self.cond.notify_all()
            else:
                backlog, deletes = [], []
        if deletes:
            self._send(_Request(Op.DEL, "", 0, 0, 0, {"keys": deletes}, None, False, lambda f, s: None))
        for req in backlog:
            self._send(req)
        return conn

    def proves(self, secret: Any) -> bool:
        """Whether ``secret`` (a HELLO's) is this invocation's: checked before the
        connection gets a thread; ``attach`` checks it again with the state."""
        return self._secret_ok(secret)

    def _secret_ok(self, secret: Any) -> bool:
        """Constant-time; anything but this invocation's secret string is wrong."""
        if not isinstance(secret, str):
            return False
        try:
            return hmac.compare_digest(secret.encode(), self.secret.encode())
        except UnicodeEncodeError:
            return False

    def serve(self, conn: _Conn) -> None:
        """Reader loop of one connection (runs on the accepting thread)."""
        sock = conn.sock
        head = bytearray(40)
        try:
            while True:
                frame = recv_frame(sock, head)
                if frame is None:
                    break
                self.last_heard = time.monotonic()
                if self.silent_since:  # it answers again
                    self.silent_since = 0.0
                if frame.op == Op.BYE:
                    self._bye(frame)
                    continue
                if frame.op in (Op.REPLY, Op.PONG):
                    self.mem = frame.a
                    self._on_mem(self, frame.a)
                with conn.wlock:
                    cb = conn.pending.pop(frame.reqid, None)
                if cb is None:
                    _skip(sock, frame.paylen)
                    continue
                if frame.paylen and frame.status != Status.OK:  # an error's message: read here
                    _skip(sock, frame.paylen)
                    frame = replace(frame, paylen=0)
                cb(frame, sock)
        except (OSError, ConnectionError) as exc:
            if not conn.closed:
                log.info("connection %s/%s lost: %r", self.name, conn.kind, exc)
        finally:
            self._conn_lost(conn)

    def _bye(self, frame: Frame) -> None:
        errors = frame.meta.get("errors")
        if errors and self._on_errors is not None:
            self._on_errors(self, [str(e)[:500] for e in errors[:8]] if isinstance(errors, list) else [str(errors)[:500]])
        with self.cond:
            # (a PING out holds requests: the instance must stay for them, or its answer fails them)
            ok = self.state == "active" and self.inflight == 0 and not self.backlog and self._probe is None
            if ok:
                self.state = "sleeping"
                self.term = int(frame.meta.get("term", self.term))
                self.hash = str(frame.meta.get("hash", self.hash))
                self.diff_rank = max(self.diff_rank, _int(frame.meta.get("diff_rank")))
                self.mem = int(frame.meta.get("mem", self.mem))
                self.last_bye = time.monotonic()
                conns = list(self.conns.values())
                self.conns = {}
            else:
                conns = [self.conns["small"]] if "small" in self.conns else []
        for c in conns:
            with c.wlock:
                try:
                    send_frame(c.sock, Op.BYE_ACK if ok else Op.BYE_NACK)
                except OSError:
                    pass
            if ok:
                c.closed = True

    def release(self) -> bool:
        """Scale-in: end the current invocation now if the function is idle (as if it had
        said BYE and been acknowledged), so an instance that holds nothing stops running
        and billing at once; a later request invokes it again. Returns whether it ended one."""
        with self.cond:
            if self.state != "active" or self.inflight or self.backlog or self._probe is not None:
                return False
            self.state = "sleeping"
            self.last_bye = time.monotonic()
            conns = list(self.conns.values())
            self.conns = {}
        for c in conns:
            with c.wlock:
                try:
                    send_frame(c.sock, Op.BYE_ACK)
                except OSError:
                    pass
            c.closed = True
        return True

    def _conn_lost(self, conn: _Conn) -> None:
        with conn.wlock:
            pending, conn.pending = conn.pending, {}
            was_closed, conn.closed = conn.closed, True
        try:
            conn.sock.close()
        except OSError:
            pass
        if was_closed and not pending:
            return
        # the handle forgets the instance before the callbacks run: a PUT they retry at once
        # goes to a new instance, not to this dead connection again
        gone = False
        with self.cond:
            if self.conns.get(conn.kind) is conn:
                # died without BYE: the other connection goes with it
                gone, self._gone = self._gone != self.instance, self.instance
                self.last_died = time.monotonic()
                self.silent_since = 0.0  # the next instance is a new one
                others = [c for c in self.conns.values() if c is not conn]
                self.conns = {}
                self.state = "sleeping"
                self.cond.notify_all()
            else:
                others = []
        for c in others:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if gone and self._on_gone is not None:
            self._on_gone(self)
        for cb in pending.values():
            cb(None, None)

    def close(self) -> None:
        with self.cond:
            conns = list(self.conns.values())
            self.conns = {}
            self.state = "sleeping"
        for c in conns:
            c.closed = True
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _skip(sock: socket.socket, n: int) -> None:
    from ..protocol import drain

    if n:
        drain(sock, n)

