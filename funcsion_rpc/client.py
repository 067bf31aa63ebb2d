"""``MetadataClient``: the thread-safe client of the metadata service.

Each thread gets its own connection (framed transport, accelerated binary
protocol), opened on first use; ``close()`` closes them all. A
``MetadataFault`` from the server becomes the matching class of
``funcsion_rpc.errors``; a connection failure becomes ``ServiceUnavailable``
after one reconnect-and-retry of a connection that went stale (safe: gets are recorded once per function,
puts of the same size and checksum are the same write, commits are
idempotent).

Failover (``failover_s`` > 0, what ``sdk.Client`` gives every task and driver:
config ``metadata_failover_s``): a server that cannot be reached, or that broke
a connection before its reply, is tried again with bounded backoff (50 ms
doubling to 1 s) for up to ``failover_s`` seconds, so a metadata shard lost
mid-run and replaced (restored from COS, ``metadata_server._ship``) only
pauses its runs' calls. A request never sent (the connection was refused) is
always safe to send again; one that may have reached the dead server is sent
again only when the server's rules make a second arrival harmless (a get is
recorded once per function, a put of the same size and checksum is the same
write, a finish and a commit are idempotent, control calls are idempotent):
``start_run`` and ``end_run`` are not (a second run would start; the run
would be found ended), so they raise ``ServiceUnavailable`` then. ``alive``
(optional) ends the wait at once when it says the deployment is gone. When the
window runs out the error names it and the setting.

``token`` is a run token (from ``start_run``) for run calls; ``admin_token``
is for control calls. ``tls_ca`` (the deployment CA's PEM text) makes every
connection TLS 1.2+ with the server's certificate verified for the host dialled;
Thrift reads and writes the ``ssl.SSLSocket`` directly (blocking ``recv``/``send``,
which it supports; the data path's relay, ``storage_functions.tls``, is not needed
here). A server that fails verification raises ``ServiceUnavailable`` at once,
naming the fix. Imports only thrift, funcsion_errors and the standard library.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.Thrift import TApplicationException
from thrift.transport import TSocket, TTransport

from . import reads
from .errors import InvalidRequest, ServiceUnavailable, error_class
from .gen.metadata import Metadata
from .gen.metadata import ttypes as T

__all__ = ["MetadataClient", "PutRequest", "DEFAULT_METADATA_PORT", "FAILOVER_SETTING"]

#: The metadata server's TCP port unless configured otherwise (sdk.Config.metadata_port).
DEFAULT_METADATA_PORT = 7917
#: What an exhausted failover wait names as the setting to change.
FAILOVER_SETTING = "metadata_failover_s (FUNCSION_METADATA_FAILOVER_S)"

R = TypeVar("R")
PutRequest = T.PutRequest


def tls_context(ca_pem: str) -> ssl.SSLContext:
    """A client context trusting ``ca_pem`` (PEM text), hostname checked, TLS 1.2 or later."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise InvalidRequest(f"the TLS CA is not a PEM certificate ({exc})") from None
    return ctx


class _Unreachable(ServiceUnavailable):
    """No connection could be opened (nothing was sent): a call may be tried again."""


class _Conn:
    def __init__(self, host: str, port: int, timeout_s: float, ctx: ssl.SSLContext | None = None) -> None:
        # connect here rather than in TSocket.open, which logs every failed attempt (a client that
        # retries an unreachable server would fill the log); the failure is ours to report
        raw = socket.create_connection((host, port), timeout=timeout_s)
        if ctx is not None:
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                raw = ctx.wrap_socket(raw, server_hostname=host.strip("[]"))
            except BaseException:
                raw.close()
                raise
        sock = TSocket.TSocket(host, port)
        sock.setHandle(raw)
        sock.setTimeout(int(timeout_s * 1000))
        self.transport = TTransport.TFramedTransport(sock)
        self.client = Metadata.Client(TBinaryProtocolAccelerated(self.transport))

    def close(self) -> None:
        self.transport.close()


class MetadataClient:
    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_METADATA_PORT, *, token: str = "", admin_token: str = "",
                 timeout_s: float = 30.0, tls_ca: str = "", failover_s: float = 0.0,
                 alive: Callable[[], bool] | None = None, retry_stale: bool = True) -> None:
        """``failover_s``: how long a call waits for an unreachable server to come back (0: it
        fails at once, after the one retry of a stale connection); ``alive``: asked while it
        waits, False ends the wait (the whole deployment is gone). ``retry_stale=False``: a
        connection that broke is not silently replaced by a new one, the call raises (the
        daemon's control loop: it must say hello, and see whether the server is another
        process, before it acknowledges anything to it)."""
        if not failover_s >= 0:
            raise InvalidRequest(f"metadata failover window must be >= 0 seconds, got {failover_s!r}")
        self.host, self.port = host, port
        self.failover_s = failover_s
        self.alive = alive
        self.retry_stale = retry_stale
        self.failovers = 0                # calls that waited for the server to come back
        self.tls_ca = tls_ca
        self._tls = tls_context(tls_ca) if tls_ca else None
        self.token = token
        self.admin_token = admin_token
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._view = False
        self._all: list[_Conn] = []
        self._lock = threading.Lock()
        self._no_read_batch = False       # the server predates read_batch: use get_batch
        self._no_read_done = False        # the server predates read_done: memory goes at the last commit

    # -- connections ----------------------------------------------------------------
    def _conn(self) -> _Conn:
        conn: _Conn | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = _Conn(self.host, self.port, self.timeout_s, self._tls)
            except ssl.SSLCertVerificationError as exc:
                raise ServiceUnavailable(
                    f"the metadata server at {self.host}:{self.port} failed TLS verification "
                    f"({(exc.verify_message or str(exc)).rstrip('.')}): give the CA that signed its certificate "
                    "(ca.pem of `funcsion certs`) and dial a name the certificate holds") from None
            except ssl.SSLError as exc:
                raise ServiceUnavailable(f"TLS with the metadata server at {self.host}:{self.port} failed "
                                         f"({exc.reason or exc}): is it serving TLS (--tls-cert)?") from None
            except OSError as exc:
                raise _Unreachable(f"cannot reach the metadata server at {self.host}:{self.port}: "
                                   f"{exc.strerror or exc}") from None
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _forget(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            conn.close()
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)

    def _call(self, fn: Callable[[Any], R], *, resend: bool = True, failover: bool = True) -> R:
        """``fn`` on this thread's connection. ``resend``: whether a request that may have
        reached a server that then died may be sent again (see the module docstring)."""
        stale_retry = self.retry_stale
        deadline: float | None = None
        delay = 0.05
        while True:
            fresh = getattr(self._local, "conn", None) is None
            try:
                conn = self._conn()
            except _Unreachable as exc:       # nothing was sent: any call may be tried again
                deadline, delay = self._wait(str(exc), deadline, delay, failover)
                continue
            try:
                return fn(conn.client)
            except T.MetadataFault as fault:
                raise error_class(fault.code)(fault.message or "", run_id=fault.run_id or "",
                                              function=fault.function_name or "",
                                              object=fault.object_name or "") from None
            except (TTransport.TTransportException, OSError, EOFError) as exc:
                self._forget()
                if stale_retry and not fresh:     # a connection that went stale (server restarted)
                    stale_retry = False
                    continue
                what = f"metadata server at {self.host}:{self.port} failed: {exc}"
                if not resend:
                    raise ServiceUnavailable(what + " (this call is not sent twice: it may have taken effect; "
                                             "check the run's state)") from None
                deadline, delay = self._wait(what, deadline, delay, failover)

    def _wait(self, what: str, deadline: float | None, delay: float, failover: bool) -> tuple[float, float]:
        """Sleep before the next try, or raise ``ServiceUnavailable`` when the failover window
        (``failover_s``) is over or ``alive`` says the deployment is gone."""
        now = time.monotonic()
        if deadline is None:
            if self.failover_s <= 0 or not failover:
                raise ServiceUnavailable(what)
            deadline = now + self.failover_s
            self.failovers += 1
        if now + delay > deadline:
            raise ServiceUnavailable(f"{what}; it did not come back within {self.failover_s:g} s "
                                     f"({FAILOVER_SETTING}): is its replacement starting?")
        if self.alive is not None and not _probe(self.alive):
            raise ServiceUnavailable(f"{what}; the deployment's other servers are gone too, so no "
                                     "replacement is coming")
        time.sleep(delay)
        return deadline, min(delay * 2, 1.0)

    def close(self) -> None:
        if self._view:
            return                        # the connections belong to the client this view came from
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
        self._local = threading.local()

    def __enter__(self) -> MetadataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def for_run(self, token: str) -> MetadataClient:
        """A view of this client carrying a run's token and no admin token (what a task gets).
        It shares this client's connections, so a warm Lambda container keeps one connection
        per thread across invocations and runs; closing the view leaves them open."""
        view = copy.copy(self)
        view.token, view.admin_token, view._view = token, "", True
        return view

    # -- control --------------------------------------------------------------------
    def health(self, *, failover: bool = True) -> T.Health:
        """``failover=False``: an unreachable server fails at once (a probe), whatever ``failover_s``."""
        return self._call(lambda c: c.health(), failover=failover)

    def register_workflow(self, wds_json: str, params: dict[str, int] | None = None, source: str = ""
                          ) -> T.WorkflowInfo:
        return self._call(lambda c: c.register_workflow(self.admin_token, wds_json, dict(params or {}), source))

    def deregister_workflow(self, key: str) -> None:
        self._call(lambda c: c.deregister_workflow(self.admin_token, key))

    def start_run(self, workflow_key: str, policy: str = "funcstore", ttl_ms: int = 0, *,
                  max_concurrency: int = 0, capacity_bytes: int = 0, latency_sensitive: bool = True,
                  input_bytes: int = 0) -> T.RunInfo:
        """Start a run; the keyword hints are Pocket's ``register_job`` hints (see ``RunHints``) and
        ``input_bytes``, the bytes of the run's inputs (0: unknown, the field is not sent)."""
        hints = T.RunHints(max_concurrency, capacity_bytes, latency_sensitive, input_bytes or None)
        return self._call(lambda c: c.start_run(self.admin_token, workflow_key, policy, ttl_ms, hints), resend=False)

    def register_capacity(self, function: str, blocks: int, daemon: str = "") -> int:
        """Offer ``function``'s ``blocks`` to the allocator; ``daemon``: the id of the daemon that
        owns it (several daemons; "" sends none, as one daemon always did)."""
        return int(self._call(lambda c: c.register_capacity(self.admin_token, function, blocks, daemon or None)))

    def unregister_capacity(self, function: str) -> int:
        return int(self._call(lambda c: c.unregister_capacity(self.admin_token, function)))

    def stats(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self._call(lambda c: c.stats(self.admin_token)))
        return doc

    def fetch_instructions(self, after_seq: int = 0, max_items: int = 1000,
                           loads: dict[str, tuple[int, int]] | None = None,
                           buckets: dict[str, str] | None = None, daemon: str = "") -> list[T.Instruction]:
        """Pending storage instructions with seq > after_seq; passing the last seq you
        carried out acknowledges it and everything before. ``loads``: the daemon's storage
        functions with requests queued or in flight, name -> (queued, in-flight PUT bytes)
        (None: no report; {}: every function is idle). ``buckets``: the GC window's functions
        that must not take new data, name -> active | degraded | released (None: no report;
        {}: every function is in the newest bucket). ``daemon``: for that one of several daemons
        only; the server keeps an instruction until each has carried it out."""
        sent = None if loads is None else {fn: T.FunctionLoad(int(q), int(b)) for fn, (q, b) in loads.items()}
        return self._call(lambda c: c.fetch_instructions(self.admin_token, after_seq, max_items, sent, buckets,
                                                           daemon or None))

    # -- one run --------------------------------------------------------------------
    @property
    def _run_token(self) -> str:
        """Run calls carry the run's token; a driver holding only the admin token may act on any run."""
        return self.token or self.admin_token

    def end_run(self, run_id: str, outcome: str = "succeeded") -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self._call(lambda c: c.end_run(self._run_token, run_id, outcome),
                                                    resend=False))
        return doc

    def begin_put(self, run_id: str, function: str, obj: str, size: int, checksum: str = "",
                  persist: bool = False, adhoc: bool = False) -> T.PutGrant:
        req = T.PutRequest(obj, size, checksum, persist, adhoc)
        return self._call(lambda c: c.begin_put(self._run_token, run_id, function, req))

    def fallback_to_cos(self, run_id: str, function: str, obj: str, reason: str = "") -> T.PutGrant:
        """The store refused ``obj`` where it was placed, for lack of room: its placement
        becomes the COS tier (the writer then stores it there)."""
        return self._call(lambda c: c.fallback_to_cos(self._run_token, run_id, function, obj, reason))

    def finish_put(self, run_id: str, function: str, obj: str) -> T.PutResult:
        return self._call(lambda c: c.finish_put(self._run_token, run_id, function, obj))

    def get(self, run_id: str, function: str, obj: str, delete_after: bool = False) -> T.GetResult:
        """Record a read; ``delete_after`` frees an ad-hoc object when ``function`` commits."""
        return self._call(lambda c: c.get(self._run_token, run_id, function, obj, delete_after))

    def commit(self, run_id: str, function: str) -> T.CommitResult:
        return self._call(lambda c: c.commit(self._run_token, run_id, function))

    def delete(self, run_id: str, obj: str) -> None:
        self._call(lambda c: c.delete_object(self._run_token, run_id, obj))

    def lookup(self, run_id: str, obj: str) -> T.ObjectStatus:
        return self._call(lambda c: c.lookup(self._run_token, run_id, obj))

    def describe_function(self, run_id: str, function: str) -> T.FunctionStatus:
        """A task's declared inputs and outputs, and whether it has committed."""
        return self._call(lambda c: c.describe_function(self._run_token, run_id, function))

    def list_objects(self, run_id: str, prefix: str = "") -> list[T.ObjectStatus]:
        return self._call(lambda c: c.list_objects(self._run_token, run_id, prefix))

    def get_batch(self, run_id: str, function: str, objects: Sequence[str]) -> list[T.GetResult]:
        return self._call(lambda c: c.get_batch(self._run_token, run_id, function, list(objects)))

    def read_batch(self, run_id: str, function: str, objects: Sequence[str]) -> T.ReadBatch:
        """``get_batch`` without the placements: per object, in order, one byte of tier and
        one of flags (``funcsion_rpc.reads``); what a task's ``get_many`` needs, without a
        struct per object. From a server that predates it, the same bytes from ``get_batch``."""
        if not self._no_read_batch:
            try:
                return self._call(lambda c: c.read_batch(self._run_token, run_id, function, list(objects)))
            except TApplicationException as exc:
                if exc.type != TApplicationException.UNKNOWN_METHOD:
                    raise
                self._no_read_batch = True
        results = self.get_batch(run_id, function, objects)
        daemons = [(r.placement.daemon if r.placement else None) or "" for r in results]
        return T.ReadBatch(
            bytes(reads.TIER_CODES.get(r.placement.tier if r.placement else "memory", reads.TIER_MEMORY)
                  for r in results),
            bytes((reads.RECORDED if r.recorded else 0) | (reads.ALREADY_COMMITTED if r.already_committed else 0)
                  | (reads.FREED_BY_READ if r.freed_by_read else 0)
                  | (reads.LAST_READ if r.last_read else 0) for r in results),
            daemons if any(daemons) else None)

    def read_done(self, run_id: str, function: str, objects: Sequence[str]) -> list[str]:
        """The reader has the bytes of reads answered as last ones (``last_read``): the server
        releases their function memory; returns the objects released. A server that predates
        the call releases nothing (the memory then goes at the last commit): []."""
        if self._no_read_done:
            return []
        try:
            return list(self._call(lambda c: c.read_done(self._run_token, run_id, function, list(objects))))
        except TApplicationException as exc:
            if exc.type != TApplicationException.UNKNOWN_METHOD:
                raise
            self._no_read_done = True
            return []

    def begin_put_batch(self, run_id: str, function: str, requests: Sequence[T.PutRequest]) -> list[T.PutGrant]:
        return self._call(lambda c: c.begin_put_batch(self._run_token, run_id, function, list(requests)))

    def finish_put_batch(self, run_id: str, function: str, objects: Sequence[str]) -> list[T.PutResult]:
        return self._call(lambda c: c.finish_put_batch(self._run_token, run_id, function, list(objects)))


def _probe(alive: Callable[[], bool]) -> bool:
    try:
        return bool(alive())
    except Exception:  # noqa: BLE001 - a probe that fails says: gone
        return False
