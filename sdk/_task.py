"""The ``@sdk.task`` handler decorator and the task-scoped ``sdk.get``/``sdk.put``.

Built with aws-lambda-powertools' ``lambda_handler_decorator`` so it stacks
with Logger, Tracer and Metrics. Per invocation it:

1. reads the run context from the event (``{"funcsion": {...endpoints, token},
   "run_id": ..., "function": ...}``, what the local executor and the
   generated Step Functions definition pass);
2. reuses one ``Client`` per container and set of endpoints (warm invocations
   of a run pay no connection setup; the endpoints hold the run's own store
   token, so a few recent runs are kept) and learns the function's declared inputs and
   outputs from the metadata server;
3. adds ``run_id`` and ``function`` to the powertools Logger keys and prints one line
   naming the task, run and attempt (the local platform tags it with the request id);
4. runs the handler with ``sdk.get``/``sdk.put`` bound to this task;
5. afterwards commits explicitly when the function declares no outputs, and
   checks that every declared output was written.

SDK errors leave as ``TaskFailed`` naming the task, the run and the cause;
those no retry can fix (``sdk.exceptions.is_retryable``) as its subclass
``FatalTaskError``, the error name retriers skip. A task that committed
in an earlier attempt (it crashed after its last write) is told so by the
metadata server; the attempt then ends successfully without redoing anything.
"""

from __future__ import annotations

import contextvars
import importlib.util
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.middleware_factory import lambda_handler_decorator

from funcsion_rpc.errors import UnknownObject
from wds import FuncsionError

from ._persist import Persist
from ._client import DEFAULT_FAILOVER_S, AlreadyCommitted, Client, Endpoints
from ._constants import EVENT_KEY
from .exceptions import (FatalTaskError, MissingOutputs, NoRunContext, TaskError, TaskFailed, UndeclaredRead,
                         is_retryable)

__all__ = ["task", "TaskSession", "FAULT_KEY", "CRASH_POINTS", "TaskFailed", "logger", "current", "get", "put", "get_many", "put_many",
           "inputs", "outputs", "RunContext"]

logger = Logger(service="funcsion.task")

_session: contextvars.ContextVar[TaskSession | None] = contextvars.ContextVar("funcsion_task", default=None)
_clients: dict[Endpoints, Client] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class RunContext:
    endpoints: Endpoints
    run_id: str
    token: str
    function: str

    @classmethod
    def from_event(cls, event: Any) -> RunContext:
        ctx = event.get(EVENT_KEY) if isinstance(event, Mapping) else None
        missing = [k for k in ("run_id", "function") if not isinstance(event, Mapping) or not event.get(k)]
        if not isinstance(ctx, Mapping):
            missing.insert(0, EVENT_KEY)
        else:
            missing += [f"{EVENT_KEY}.{k}" for k in ("metadata", "daemon", "store_token", "token") if not ctx.get(k)]
        if missing:
            raise NoRunContext(
                f"the event has no funcsion run context (missing {', '.join(missing)}); invoke this handler "
                "through `funcsion run` or the generated state machine, or use sdk.Client(...) in scripts")
        assert isinstance(ctx, Mapping) and isinstance(event, Mapping)
        ep = Endpoints(str(ctx["metadata"]), str(ctx["daemon"]), str(ctx["store_token"]),
                       cos_url=str(ctx.get("cos_url") or ""), block_size=int(ctx.get("block_size") or 0),
                       ec_data=int(ctx.get("ec_data") or 0), ec_parity=int(ctx.get("ec_parity") or 0),
                       tls_ca=str(ctx.get("tls_ca") or ""),
                       metadata_failover_s=float(ctx.get("metadata_failover_s") or DEFAULT_FAILOVER_S),
                       daemon_failover_s=float(ctx.get("daemon_failover_s") or DEFAULT_FAILOVER_S))
        return cls(ep, str(event["run_id"]), str(ctx["token"]), str(event["function"]))


#: Event key of the executor's fault injection: ``{"crash": POINT}`` ends the task's
#: process abruptly (as a reclaimed container would) at ``start``, ``after_read`` (right
#: after its first read returned the bytes: the read is recorded, nothing committed),
#: ``after_commit`` (right after the write that committed its reads) or ``end`` (after the
#: handler returned).
FAULT_KEY = "funcsion_fault"
CRASH_POINTS = ("start", "after_read", "after_commit", "end")


def _maybe_crash(fault: Mapping[str, Any] | None, point: str) -> None:
    if fault and fault.get("crash") == point:
        os._exit(137)


@dataclass
class TaskSession:
    """What one task attempt may read and must write, and what it did."""

    client: Client
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    written: set[str] = field(default_factory=set)
    fault: Mapping[str, Any] | None = None
    committed: bool = False  # this attempt's last output committed its reads

    def _read(self, names: list[str], fn: Callable[[], Any]) -> Any:
        self._check_reads(names)
        try:
            return fn()
        except AlreadyCommitted:
            if not self.committed:
                raise  # an earlier attempt committed: the decorator ends this one
            raise TaskError(
                f"task {self.client.function} of run {self.client.run_id} read {', '.join(map(repr, names))} after "
                f"writing its last output {self.outputs[-1]!r}, which committed its reads (and may have freed "
                "them); read every input before writing the last output") from None

    def _check_reads(self, names: Iterable[str]) -> None:
        bad = [n for n in names if n not in self.inputs and not self._is_adhoc(n)]
        if bad:
            raise UndeclaredRead(
                f"task {self.client.function} of run {self.client.run_id} read {', '.join(map(repr, bad))}, "
                f"which its WDS entry does not list as input (inputs: {', '.join(self.inputs) or 'none'}); "
                "add it to the function's \"input\" list (or, for a key the WDS cannot name, write it with "
                "sdk.put(..., adhoc=True) first)")

    def _is_adhoc(self, name: str) -> bool:
        """A name the task does not declare may still be an ad-hoc object of the run."""
        try:
            return bool(self.client.lookup(name).adhoc)
        except UnknownObject:
            return False

    def get(self, name: str, **kw: Any) -> Any:
        got = self._read([name], lambda: self.client.get(name, **kw))
        _maybe_crash(self.fault, "after_read")
        return got

    def get_many(self, names: Iterable[str]) -> dict[str, Any]:
        names = list(names)
        got: dict[str, Any] = self._read(names, lambda: self.client.get_many(names))
        _maybe_crash(self.fault, "after_read")
        return got

    def put_many(self, values: Mapping[str, Any], **kw: Any) -> bool:
        if kw.get("adhoc"):
            self.client.put_many(values, **kw)
            return False
        # The last declared output commits: write it last, whatever order the caller used.
        last = self.outputs[-1] if self.outputs else None
        ordered = dict(sorted(values.items(), key=lambda kv: kv[0] == last))
        committed = self.client.put_many(ordered, **kw)
        self.written.update(values)
        if committed:
            self.committed = True
            _maybe_crash(self.fault, "after_commit")
        return committed


def current() -> TaskSession:
    s = _session.get()
    if s is None:
        raise NoRunContext("sdk.get/sdk.put were called outside a @sdk.task handler; decorate the handler "
                           "with @sdk.task, or use sdk.Client(...) in scripts and drivers")
    return s


def get(name: str, *, delete: bool = False, stream: bool = False) -> Any:
    """Read an object this task declares as input, or an ad-hoc object; ``delete=True`` frees
    an ad-hoc object when this task commits (Pocket's DELETE flag); ``stream=True`` returns a
    readable stream of its bytes (for large objects: one stripe in memory at a time)."""
    return current().get(name, delete=delete, stream=stream)


def get_many(names: Iterable[str]) -> dict[str, Any]:
    return current().get_many(names)


def put(name: str, value: Any, *, codec: str | None = None, persist: Persist = False, adhoc: bool = False) -> bool:
    """Write an object this task declares as output (``codec``: json, msgpack, pickle, bytes, str).
    ``persist=True`` keeps a copy after the run (``Client.fetch``; a ``timedelta`` or seconds:
    for that long after the run ends); ``adhoc=True`` writes a key the
    WDS does not declare (freed by a reader's ``get(delete=True)``, ``Client.delete`` or run end)."""
    return current().put_many({name: value}, codec=codec, persist=persist, adhoc=adhoc)


def put_many(values: Mapping[str, Any], *, codec: str | None = None, persist: Persist = False,
             adhoc: bool = False) -> bool:
    return current().put_many(values, codec=codec, persist=persist, adhoc=adhoc)


def inputs() -> list[str]:
    """The objects this task's WDS entry declares as input, in order."""
    return list(current().inputs)


def outputs() -> list[str]:
    """The objects this task's WDS entry declares as output, in order (the last one commits)."""
    return list(current().outputs)


#: Base clients a warm container keeps: endpoints carry a run-scoped store token, so each
#: run has its own; the least recently used beyond this many are closed.
MAX_CACHED_CLIENTS = 4


def _client_for(rc: RunContext) -> Client:
    with _clients_lock:
        c = _clients.pop(rc.endpoints, None)
        if c is None:
            c = Client(rc.endpoints)
        _clients[rc.endpoints] = c  # most recent last
        stale = [_clients.pop(k) for k in list(_clients)[:-MAX_CACHED_CLIENTS]]
    for old in stale:
        old.close()
    return c


def _fail(rc: RunContext, exc: BaseException) -> TaskFailed:
    """``task F of run R failed: <Error>: <what>``, naming the task once (an error that names
    it already has that part cut from its text)."""
    text = str(exc)
    name = type(exc).__name__
    who = f"task {rc.function} of run {rc.run_id}"
    text = text.removeprefix(name + ": ").removeprefix(who + " ")
    message = f"{who} failed: {name}: {text}"
    if is_retryable(exc):
        return TaskFailed(message, retryable=True, cause=name)
    return FatalTaskError(message, cause=name)


#: Where the SDK and the libraries under it live: their frames are cut from a task's traceback.
_INTERNAL_DIRS = tuple(os.path.abspath(d) + os.sep for name in (
    "sdk", "funcsion_rpc", "funcsion_errors", "wds", "storage_functions", "aws_lambda_powertools")
    if (spec := importlib.util.find_spec(name)) is not None for d in spec.submodule_search_locations or ())


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of the SDK and the libraries under it (the handler's own
    frames, and any library they called that is not the SDK's, stay in order)."""
    kept: list[TracebackType] = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_INTERNAL_DIRS):
            kept.append(tb)
        tb = tb.tb_next
    out: TracebackType | None = None
    for t in reversed(kept):
        out = TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _where(handler: Callable[..., Any]) -> str:
    """``handler producer (handlers.py, line 17)``: the frame a traceback cannot show when the
    handler has returned."""
    code = getattr(handler, "__code__", None)
    name = getattr(handler, "__name__", "the handler")
    if code is None:
        return f"handler {name}"
    return f"handler {name} ({os.path.basename(code.co_filename)}, line {code.co_firstlineno})"


@lambda_handler_decorator
def task(handler: Callable[..., Any], event: Any, context: Any, logger: Logger | None = None) -> Any:
    """Make a Lambda handler a funcsion task (see the module docstring)."""
    rc = RunContext.from_event(event)
    attempt = event.get("attempt") if isinstance(event, Mapping) else None
    print(f"[funcsion] task {rc.function} of run {rc.run_id}{f', attempt {attempt}' if attempt else ''}", flush=True)
    base = _client_for(rc)
    client = base.bind(run_id=rc.run_id, token=rc.token, function=rc.function)
    for lg in {id(x): x for x in (globals()["logger"], logger) if x is not None}.values():
        lg.append_keys(run_id=rc.run_id, function=rc.function)
    try:
        desc = client.metadata.describe_function(rc.run_id, rc.function)
        fault = event.get(FAULT_KEY) if isinstance(event.get(FAULT_KEY), Mapping) else None
        session = TaskSession(client, tuple(desc.inputs), tuple(desc.outputs), fault=fault)
        _maybe_crash(fault, "start")
        token = _session.set(session)
        try:
            result = handler(event, context)
        finally:
            _session.reset(token)
        if not session.outputs:
            client.commit()
            _maybe_crash(fault, "after_commit")
        else:
            missing = [o for o in session.outputs if o not in session.written
                       and client.lookup(o).state in ("pending", "allocated", "missing")]
            if missing:
                raise MissingOutputs(
                    f"task {rc.function} of run {rc.run_id} returned without writing its declared output(s) "
                    f"{', '.join(map(repr, missing))}; call sdk.put for each before {_where(handler)} returns")
        _maybe_crash(fault, "end")
        return result
    except AlreadyCommitted:
        return {"funcsion": "committed in an earlier attempt", "function": rc.function}
    except TaskFailed:
        raise
    except FuncsionError as exc:  # an SDK error: name the task, and say whether a retry may help
        # one traceback, of the handler's own frames: the SDK's frames (the wire client, the
        # decorator) say nothing a user can act on; the cause keeps the same frames, so a
        # traceback printer that hides a cause its wrapper carries (the local platform's) shows
        # them once, and the cause's message is in the wrapper's
        failed = _fail(rc, exc)
        failed.after_return = isinstance(exc, MissingOutputs)  # no handler frame to show (see _worker)
        frames = _user_frames(exc.__traceback__)
        exc.with_traceback(frames)
        raise failed.with_traceback(frames) from exc
    finally:
        client.close()  # this invocation's run-scoped metadata connection; the cached base client stays
