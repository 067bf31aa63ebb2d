"""One connection to the daemon, from its first byte: the handshake, then an
SDK client's requests, each checked against its token's scope.

Before a peer authenticates it may declare only a HELLO (``HELLO_LIMIT``
bytes of key + meta, no payload), sent whole within ``hello_timeout_s``; the
HELLO gate (``_hello``) reads it with no thread of its own, a malformed one gets
an error reply and the connection closes. ``admit`` authenticates it there, and
only then is the connection given a thread (``serve_connection``). A client's
token decides what it may touch (``storage_functions.auth``): the store
token every key (the driver and admin side), a run token only keys under
``<run_id>/`` and that run's COS objects (GET, PUT, DEL, FREE, EVICT and the COS
proxy); STAT is the store token's only. A client may pipeline GETs (the
replies come in request order, ``_lanes``); any other request is answered
once every GET before it was. Every declared length is bounded by
what its frame type may carry (``CLIENT_META_LIMITS``, payloads only on
STRIPE and COS_PUT). A client may pipeline PUTs too: while the next request
is already waiting on the socket, a PUT whose chunks went out is not waited
for (up to ``PUT_WINDOW`` of them), so the functions store a window of chunks
at once; the replies go out in request order before anything else is
answered or the session would block. A PUT with nothing behind it is armed
instead: the thread that receives its last function reply makes it readable
and answers it (one thread hand-off less per PUT), while this one waits for the
next request, and answers it itself once ``put_timeout_s`` ran out. The COS
proxy (COS_PUT/GET/DEL) reads and writes the SDK's own COS objects for
clients, so tasks hold no COS credentials.

With ``durable_puts`` no PUT is armed and each is answered only once its copy is in
COS (``PersistentBuffer.wait_durable``): the PUTs of a window are completed
first, so their uploads overlap. Not here: what PUT, GET and free do (``_server``), function connections
after their HELLO (``_functions``).
"""

from __future__ import annotations

import json

import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..auth import cos_in_scope, in_scope, token_scope
from ..cos import validate_key
from ..exceptions import AuthError, ObjectTooLarge, ProtocolError, StorageError, StoreError, UnknownKey
from ..protocol import (META_LIMIT, Frame, Op, Status, drain, frame_bytes, pack_header, recv_exact,
                        recv_frame, send_frame, status_for)
from ._checks import meta_keys
from ._lanes import Lane, Lanes
from ._outbox import Outbox
from ._persisted_io import PersistedLifetimes
from ..readiness import readable

if TYPE_CHECKING:
    from ._config import DaemonConfig
    from ._functions import FunctionHandle
    from ._put import PendingPut

__all__ = ["admit", "serve_connection", "ClientSession", "SessionHost", "CLIENT_META_LIMITS", "PUT_WINDOW"]

log = logging.getLogger("storage_functions.daemon")

_SMALL = (1 << 16) + 4096  # any key a u16 length can declare, and a few meta fields
#: Key + meta bytes each request of an authenticated client may declare.
CLIENT_META_LIMITS: dict[int, int] = {
    Op.PUT: 8 << 20,  # the metadata server's allocation: per stripe, per chunk
    Op.GET: _SMALL, Op.DEL: _SMALL, Op.STAT: _SMALL, Op.PING: _SMALL,
    Op.FREE: META_LIMIT, Op.EVICT: META_LIMIT,  # a list of keys
    Op.COS_PUT: _SMALL, Op.COS_GET: _SMALL, Op.COS_DEL: _SMALL,
}
_SCRATCH = 1 << 20
#: PUTs of one connection whose functions' replies may be outstanding at once
PUT_WINDOW = 32


class SessionHost(Protocol):
    """What a connection uses of the daemon: the config, COS (the proxy), the counters,
    the function handles by name (a function's HELLO), the set of client connections
    (closed at stop), the PUT path (``_put.PutPath``; ``wait_durable``: until a PUT's copy is
    in COS), the GET path (``_get.GetPath``),
    free, and the stats."""

    @property
    def config(self) -> DaemonConfig: ...

    @property
    def cos(self) -> Any: ...

    @property
    def _by_name(self) -> Mapping[str, FunctionHandle]: ...

    @property
    def persisted(self) -> PersistedLifetimes: ...

    def count(self, name: str, n: int = 1) -> None: ...

    def _client_opened(self, sock: socket.socket) -> None: ...

    def _client_closed(self, sock: socket.socket) -> None: ...

    def _put_send(self, sock: socket.socket, f: Frame, scratch: bytearray,
                  refuse: StorageError | None = None) -> PendingPut: ...

    def _put_finish(self, p: PendingPut, timeout: float | None = None) -> dict[str, Any]: ...

    def _put_done(self, p: PendingPut) -> dict[str, Any]: ...

    def wait_durable(self, p: PendingPut, timeout: float) -> bool: ...

    def _get(self, sock: socket.socket, lanes: Lanes, f: Frame) -> None: ...

    def free(self, keys: Iterable[str]) -> int: ...

    def evict(self, keys: Iterable[str]) -> int: ...

    def stats(self) -> dict[str, Any]: ...

    def memory(self, run_id: str | None = None) -> dict[str, Any]: ...


def _reply_error(sock: socket.socket, reqid: int, status: int, message: str, timeout: float = 1.0) -> None:
    """Best effort: the peer may be gone or not reading (``timeout`` 0: without blocking)."""
    try:
        sock.settimeout(timeout)
        send_frame(sock, Op.REPLY, reqid=reqid, status=status, payload=message.encode())
    except OSError:
        pass


def admit(host: SessionHost, sock: socket.socket, hello: Frame) -> Callable[[], socket.socket | None] | None:
    """Authenticate a peer by its ``hello`` (on the HELLO gate's thread, ``_hello``: quick,
    no blocking I/O); the rest of its connection, to run on a thread of its own
    (``serve_connection``), or None when it is refused (the error reply sent; the caller
    closes it). A HELLO that is neither a client's nor a function's raises ``ProtocolError``."""
    role = hello.meta.get("role")
    if role == "function":
        name = hello.meta.get("name")
        h = host._by_name.get(name) if isinstance(name, str) else None
        if h is None or not h.proves(hello.meta.get("secret")):
            host.count("auth_failures")
            _reply_error(sock, hello.reqid, Status.AUTH, "unknown function or bad invocation secret", timeout=0.0)
            return None
        return lambda: _serve_function(host, h, hello, sock)
    if role != "client":
        raise ProtocolError(f"HELLO role must be 'client' or 'function', got {role!r}")
    scope = token_scope(hello.meta.get("token"), host.config.token)
    if scope is None:
        host.count("auth_failures")
        _reply_error(sock, hello.reqid, Status.AUTH, "client refused: missing or wrong store or run token",
                     timeout=0.0)
        return None
    return lambda: _serve_client(host, sock, scope, hello.reqid)


def serve_connection(host: SessionHost, sock: socket.socket, run: Callable[[], socket.socket | None]) -> None:
    """Run an authenticated connection (``run``, from :func:`admit`) to its end, on its
    own thread; the socket is closed after, unless a function connection took it over."""
    own: socket.socket | None = sock
    try:
        own = run()
    except (OSError, ConnectionError) as exc:
        log.debug("connection ended: %r", exc)
    except Exception:  # noqa: BLE001 - a bug: this connection ends, the daemon serves on
        host.count("conn_errors")
        log.exception("connection failed")
    finally:
        if own is not None:
            own.close()


def _serve_function(host: SessionHost, h: FunctionHandle, hello: Frame, sock: socket.socket) -> socket.socket | None:
    """A storage function's connection, its secret proven: attached to its handle, which
    reads it to its end and closes it (None); refused after all when its invocation is
    not the one that is waited for (the socket, to close)."""
    conn = h.attach(hello, sock)
    if conn is None:
        host.count("auth_failures")
        _reply_error(sock, hello.reqid, Status.AUTH, "unknown function or bad invocation secret")
        return sock
    h.serve(conn)  # closes the socket
    return None


def _serve_client(host: SessionHost, sock: socket.socket, scope: str, reqid: int) -> socket.socket:
    """An SDK client's connection, its token's ``scope`` known: welcomed, then served."""
    send_frame(sock, Op.REPLY, reqid=reqid)
    host._client_opened(sock)
    try:
        ClientSession(host, sock, scope).serve()
    finally:
        host._client_closed(sock)
    return sock


class ClientSession:
    """The requests of one authenticated client; ``scope`` is ``""`` for the
    store token, ``"<run_id>/"`` for a run token."""

    def __init__(self, daemon: SessionHost, sock: socket.socket, scope: str) -> None:
        self.daemon = daemon
        self.sock = sock
        self.scope = scope
        self._puts: deque[tuple[int, PendingPut]] = deque()  # sent, not yet answered (request order)
        self._armed: PendingPut | None = None  # sent, answered by whichever thread completes it

    def serve(self) -> None:
        out = Outbox(self.sock)
        try:
            self._loop(out, Lanes(out, max_bytes=self.daemon.config.get_pipeline_bytes))
        finally:
            self._join()
            self._finish_puts(reply=False)  # the connection is gone: the versions still become readable
            out.close()

    def _loop(self, out: Outbox, lanes: Lanes) -> None:
        sock, d = self.sock, self.daemon
        scratch = bytearray(_SCRATCH)
        head = bytearray(40)
        wait = d.config.get_timeout_s
        while True:
            armed = self._armed
            if armed is not None and not readable([sock], max(0.0, armed.deadline - time.monotonic())):
                self._join()  # its functions did not all answer in time: it is completed here
            try:
                f = recv_frame(sock, head, max_meta=CLIENT_META_LIMITS)
            except ProtocolError as exc:
                d.count("bad_frames")
                self._finish_puts()
                lanes.open(0).send_last([frame_bytes(Op.REPLY, status=Status.PROTOCOL, payload=str(exc).encode())],
                                        copy=False)
                return
            if f is None:
                return
            self._join()  # its version is readable before anything else is served
            if f.op != Op.PUT:  # every PUT before it is answered first
                self._finish_puts()
            if f.op != Op.GET and not self._puts:  # answered on this thread: after every GET before it
                lanes.wait_closed(wait)
                out.wait_idle(wait)
            try:
                if f.paylen and f.op != Op.COS_PUT:
                    raise ProtocolError(f"op {f.op} carries no payload, but the frame declares {f.paylen} bytes")
                self._dispatch(f, out, lanes, scratch)
            except StorageError as exc:
                self._finish_puts()
                lanes.open(0).send_last([frame_bytes(Op.REPLY, reqid=f.reqid, status=status_for(exc),
                                                     payload=str(exc).encode())], copy=False)
                if isinstance(exc, ProtocolError):
                    d.count("bad_frames")
                    return

    def _dispatch(self, f: Frame, out: Outbox, lanes: Lanes, scratch: bytearray) -> None:
        sock, d = self.sock, self.daemon
        if f.op == Op.PUT:
            try:
                p = d._put_send(sock, f, scratch, refuse=self._refusal(f.key, "PUT"))
            except BaseException:
                self._finish_puts()  # their replies go before this one's error
                raise
            idle = not readable([sock], 0)
            if idle and not self._puts and not d.config.durable_puts:  # its last reply answers it
                self._arm(f.reqid, p, lanes)
                return
            self._puts.append((f.reqid, p))
            if idle or len(self._puts) >= PUT_WINDOW:
                self._finish_puts()
        elif f.op == Op.GET:
            self._own(f.key, "GET")
            d._get(sock, lanes, f)
        elif f.op == Op.DEL:
            self._own(f.key, "DEL")
            if d.free([f.key]) == 0:
                raise UnknownKey(f"{f.key!r}: no such object")
            send_frame(sock, Op.REPLY, reqid=f.reqid)
        elif f.op == Op.FREE:
            keys = meta_keys(f.meta, "FREE")
            for k in keys:
                self._own(k, "FREE")
            send_frame(sock, Op.REPLY, reqid=f.reqid, meta={"freed": d.free(keys)})
        elif f.op == Op.EVICT:
            keys = meta_keys(f.meta, "EVICT")
            for k in keys:
                self._own(k, "EVICT")
            send_frame(sock, Op.REPLY, reqid=f.reqid, meta={"evicted": d.evict(keys)})
        elif f.op == Op.STAT:
            if self.scope:
                raise AuthError(f"STAT needs the store token; this client's run token reaches only "
                                f"{self.scope} keys")
            run = f.meta.get("run")
            if run is not None and not isinstance(run, str):
                raise ProtocolError("STAT: meta field 'run' must be a run id")
            send_frame(sock, Op.REPLY, reqid=f.reqid, meta=d.stats() if run is None else d.memory(run))
        elif f.op == Op.PING:
            send_frame(sock, Op.PONG, reqid=f.reqid)
        elif f.op in (Op.COS_PUT, Op.COS_GET, Op.COS_DEL):
            self._cos(f, out, scratch)
        else:
            raise ProtocolError(f"unexpected op {f.op} from a client")

    def _arm(self, reqid: int, p: PendingPut, lanes: Lanes) -> None:
        """Have the thread that receives a PUT's last function reply complete it and hand
        its reply over, rather than wake this one to (one thread hand-off less per PUT);
        its reply takes a lane, so what is answered after it goes after it."""
        lane = lanes.open(0)
        self._armed = p

        def complete(stored: bool) -> None:
            self._complete(reqid, p, lane, stored)

        if not p.waiter.then(complete):  # its replies are all in already
            self._armed = None
            self._complete(reqid, p, lane, False)

    def _complete(self, reqid: int, p: PendingPut, lane: Lane, stored: bool) -> None:
        """Answer an armed PUT: ``stored`` (every chunk is, on the last reply's thread),
        or else through the whole finish, which stores failed chunks again."""
        d = self.daemon
        try:
            meta = d._put_done(p) if stored else d._put_finish(p, max(0.0, p.deadline - time.monotonic()))
            frame = frame_bytes(Op.REPLY, reqid=reqid, meta=meta)
        except StorageError as exc:
            frame = frame_bytes(Op.REPLY, reqid=reqid, status=status_for(exc), payload=str(exc).encode())
        except Exception as exc:  # noqa: BLE001 - a bug; on a reader thread it must not end the thread
            log.exception("PUT %r: completing it failed", p.key)
            frame = frame_bytes(Op.REPLY, reqid=reqid, status=Status.ERROR, payload=f"PUT {p.key!r}: {exc}".encode())
        lane.send_last([frame], copy=False)
        p.waiter.finished()

    def _join(self) -> None:
        """Wait until the armed PUT is answered; past its deadline, answer it here."""
        p, self._armed = self._armed, None
        if p is None or p.waiter.wait_done(max(0.0, p.deadline - time.monotonic())):
            return
        run = p.waiter.take()
        if run is not None:
            run(False)
        else:  # its completion runs on another thread
            p.waiter.wait_done(None)

    def _finish_puts(self, *, reply: bool = True) -> None:
        """Complete the PUTs sent and not yet answered, and answer each in turn
        (``reply=False``, or once the socket fails: complete them only)."""
        d = self.daemon
        done: list[tuple[int, PendingPut, bytes, bool]] = []
        while self._puts:
            reqid, p = self._puts.popleft()
            try:
                meta = d._put_finish(p)
                frame, ok = frame_bytes(Op.REPLY, reqid=reqid, meta=meta), True
            except StorageError as exc:
                frame, ok = frame_bytes(Op.REPLY, reqid=reqid, status=status_for(exc), payload=str(exc).encode()), False
            done.append((reqid, p, frame, ok))
        for reqid, p, frame, ok in done:     # durable PUTs: answered once their copies are in COS (uploads overlap)
            if ok and d.config.durable_puts and not d.wait_durable(p, max(0.0, p.deadline - time.monotonic())):
                d.count("durable_put_timeouts")
                frame = frame_bytes(Op.REPLY, reqid=reqid, status=Status.ERROR, payload=(
                    f"PUT {p.key!r}: its COS copy did not land within put_timeout_s ({d.config.put_timeout_s:g} s; "
                    "durable_puts answers a PUT once it is in COS): is COS reachable?").encode())
            if reply:
                try:
                    self.sock.sendall(frame)
                except OSError:
                    reply = False

    # -- scope --------------------------------------------------------------------
    def _refusal(self, key: str, what: str) -> AuthError | None:
        if in_scope(self.scope, key):
            return None
        self.daemon.count("scope_refusals")
        return AuthError(f"{what} {key!r} refused: this client's run token reaches only {self.scope} keys")

    def _own(self, key: str, what: str) -> None:
        err = self._refusal(key, what)
        if err is not None:
            raise err

    # -- the COS proxy ----------------------------------------------------------------
    def _cos(self, f: Frame, out: Outbox, scratch: bytearray) -> None:
        """COS_PUT/GET/DEL of one of the SDK's COS objects (``tier/``,
        ``persisted/``, ``outputs/`` + ``<run_id>/<name>``). A refused COS_PUT
        still reads its payload, so the connection stays in step."""
        sock, d = self.sock, self.daemon
        what = {Op.COS_PUT: "COS put", Op.COS_GET: "COS get", Op.COS_DEL: "COS delete"}[f.op]
        error: StorageError | None = None
        try:
            validate_key(f.key)
        except StorageError as exc:
            error = exc
        if error is None and not cos_in_scope(self.scope, f.key):
            d.count("scope_refusals")
            error = AuthError(f"{what} of {f.key!r} refused: clients reach only tier/, persisted/ and outputs/ "
                              + (f"objects, and this run token only those of run {self.scope[:-1]}"
                                 if self.scope else "objects"))
        if error is None and f.paylen > d.config.max_object_bytes:
            error = ObjectTooLarge(f"{what} of {f.key!r}: {f.paylen} bytes is over the store's maximum of "
                                   f"{d.config.max_object_bytes} bytes")
        if error is None and d.cos is None:
            error = StoreError(f"{what} of {f.key!r}: this daemon has no object store (start it with a cos_url)")
        if error is not None:
            drain(sock, f.paylen, scratch)
            raise error
        if f.op == Op.COS_PUT:
            d.cos.put(f.key, recv_exact(sock, f.paylen))
            keep = (f.meta or {}).get("keep_s")
            d.persisted.written(f.key, None if keep is None else float(keep))
            send_frame(sock, Op.REPLY, reqid=f.reqid)
        elif f.op == Op.COS_GET and (f.meta or {}).get("lifetime"):  # a persisted copy's lifetime, JSON
            info = json.dumps(d.persisted.lookup(f.key)).encode()
            send_frame(sock, Op.REPLY, reqid=f.reqid, payload=info)
        elif f.op == Op.COS_GET:
            data: Any = d.cos.get(f.key)
            out.send([pack_header(Op.REPLY, reqid=f.reqid, paylen=len(data)), data], copy=False)
        else:
            d.cos.delete(f.key)
            d.persisted.deleted(f.key)
            send_frame(sock, Op.REPLY, reqid=f.reqid)
