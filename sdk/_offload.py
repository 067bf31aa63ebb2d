"""``@sdk.offload``: large results of a plain Lambda handler under any Step Functions state
machine travel as references, freed at their last reader's commit.

The one line a user adds to each Task state's ``Payload`` (or ``Parameters``)::

    "funcsion.$": "$$"

passes the context object: the execution's name (its funcsion run), the state's name (its
function), and the execution input's ``funcsion`` entry (the run's endpoints and tokens,
which ``sdk.offload_start`` / ``funcsion offload run`` put there). Per invocation the
decorator:

1. takes ``funcsion`` out of the event (the handler never sees the tokens);
2. replaces every reference in the event (nested in dicts and lists too) by its value,
   checking its token (``ReferenceRefused`` for a forged one or another execution's);
   each object is read once, recorded for deferred commit; ``stream=True`` gives a
   bytes value as a ``ValueStream`` (one stripe in memory at a time); ``resolve=False``
   leaves references in place (the handler reads what it wants with
   ``sdk.offload_get(ref)``; what it passes on unread it is not a reader of);
3. runs the handler; a handler that raises commits nothing (a retry, or the state a
   ``Catch`` leads to, reads again);
4. cuts every value of the result larger than ``offload_threshold_bytes`` (config; 64 KiB)
   out of it (``_offload_refs.split``), stores them and returns the result with references
   in their place. The write of a state whose readers the run declares commits its reads;
   any other state (see ``sdk._offload_plan``) writes ad-hoc objects and commits
   explicitly. A retried state counts once: its commit is per function.

Inside a ``Map`` iteration (the execution input's ``funcsion.map_states`` names the state:
``$$.Map`` is not visible there) the state runs as the run's client:
its reads count for nothing and its values are kept until the execution ends.

A list for a Map (``sdk.offload_items(items)`` in the result, ``_offload_items``) is stored
as chunks, one ad-hoc object each, and left in the state as a list of chunk references.
An iteration reads its chunk as a list of items; where the plan says the list is read once,
by that Map's iterations (the execution input's ``funcsion.map_items``: writer state ->
the reading state), the iteration frees each chunk it read once its handler has returned.
A state a Map iterates over that offloads a plain list whole says in its log what the Map
will find (a reference, not a list) and to return ``sdk.offload_items`` instead.

Errors leave as ``TaskFailed``/``FatalTaskError`` naming the state and the run, as
``@sdk.task``'s do. Not here: the reference format (``_offload_refs``), the run's
workflow (``_offload_plan``), cleanup (``_offload_cleanup``).
"""

from __future__ import annotations

import contextvars
import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.middleware_factory import lambda_handler_decorator

from funcsion_errors import FuncsionError
from funcsion_rpc.errors import ObjectExpired, RunEnded, UnknownObject, UnknownRun

from ._client import AlreadyCommitted, Client, Endpoints
from ._constants import EVENT_KEY
from ._offload_items import MapItems, chunks
from ._offload_plan import function_name
from ._offload_refs import REF_KEY, Reference, json_size, replace, sign, split
from ._task import RunContext, _client_for, _user_frames
from .exceptions import FatalTaskError, NoRunContext, ReferenceFreed, TaskFailed, is_retryable

__all__ = ["OffloadContext", "offload", "offload_get"]

_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("funcsion_offload", default=None)


@dataclass(frozen=True, slots=True)
class OffloadContext:
    """What one invocation learns from its event's ``funcsion`` entry (the context object)."""

    endpoints: Endpoints
    run_id: str
    token: str
    state: str
    in_map: bool  # the state runs once per item of a Map (the execution input's ``map_states``)
    frees_items: tuple[str, ...] = ()  # writers whose Map chunks this state frees (``map_items``)
    feeds_map: bool = False  # a Map iterates over its result (it is a writer in ``map_items``)

    @classmethod
    def from_event(cls, event: Any) -> OffloadContext:
        cx = event.get(EVENT_KEY) if isinstance(event, Mapping) else None
        fix = ("add \"funcsion.$\": \"$$\" to the Task state's Payload, and start the execution with "
               "sdk.offload_start(...) or `funcsion offload run` (which put the run in its input)")
        if not isinstance(cx, Mapping) or not isinstance(cx.get("Execution"), Mapping):
            raise NoRunContext(f"@sdk.offload: the event has no Step Functions context under {EVENT_KEY!r}; {fix}")
        ex, st = cx["Execution"], cx.get("State") or {}
        inp = ex.get("Input")
        run = inp.get(EVENT_KEY) if isinstance(inp, Mapping) else None
        missing = [k for k in ("metadata", "daemon", "store_token", "token")
                   if not isinstance(run, Mapping) or not run.get(k)]
        if missing or not ex.get("Name") or not isinstance(st, Mapping) or not st.get("Name"):
            what = ", ".join(f"Execution.Input.funcsion.{k}" for k in missing) or "Execution.Name or State.Name"
            raise NoRunContext(f"@sdk.offload: execution {ex.get('Name') or '?'} has no funcsion run (missing {what}); "
                               f"{fix}")
        assert isinstance(run, Mapping)
        rc = RunContext.from_event({EVENT_KEY: run, "run_id": ex["Name"], "function": st["Name"]})
        in_map = str(st["Name"]) in (run.get("map_states") or ())
        items = run.get("map_items")
        frees = tuple(str(w) for w, r in items.items() if r == st["Name"]) if isinstance(items, Mapping) else ()
        feeds = isinstance(items, Mapping) and st["Name"] in items
        return cls(rc.endpoints, rc.run_id, rc.token, str(st["Name"]), in_map, frees, feeds)


@dataclass
class _Session:
    client: Client
    ctx: OffloadContext
    stream: bool
    values: dict[str, Any] = field(default_factory=dict)  # key -> the object's value, read once
    chunks_read: list[str] = field(default_factory=list)  # Map chunks this state frees once it returns

    def read(self, ref: Mapping[str, Any], where: str) -> Any:
        r = Reference.from_json(ref, where)
        r.check(self.ctx.run_id, self.ctx.token, where)
        if r.key not in self.values:
            stream = self.stream and r.part is None and r.codec == "bytes"
            try:
                self.values[r.key] = self.client.get(r.key, stream=stream)
            except (ObjectExpired, UnknownObject, RunEnded, UnknownRun) as exc:
                raise ReferenceFreed(self._freed(r, where, exc)) from None
            if r.items is not None and r.state in self.ctx.frees_items:
                self.chunks_read.append(r.key)
        value = self.values[r.key]
        return value if r.part is None else value[r.part]

    def _freed(self, r: Reference, where: str, exc: Exception) -> str:
        last = ""
        try:
            st = self.client.lookup(r.key)
            if st.committed_by:
                last = f"; its last reader was state {st.committed_by[-1]}"
        except FuncsionError:
            pass
        return (f"the value at {where} ({r.state}'s result, {r.key!r} of run {r.run}) is no longer stored{last}: "
                f"{exc}; a state that reads it must be a reader the plan counts (funcsion offload plan ASL.json), "
                "and the execution must still be running")

    def free_chunks(self) -> None:
        """Free the Map chunks this iteration read (its handler returned: the plan says it was
        their one reader)."""
        for key in self.chunks_read:
            self.client.delete(key)
        self.chunks_read.clear()

    def store_items(self, result: Any, threshold: int) -> Any:
        """``result`` with each ``sdk.offload_items`` list stored as chunks and replaced by the
        list of their references (``_offload_items``)."""
        found: list[MapItems] = []

        def mark(v: Any) -> Any:
            if isinstance(v, MapItems):
                found.append(v)
                return {REF_KEY: len(found) - 1}
            if isinstance(v, Mapping) and REF_KEY not in v:
                return {k: mark(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [mark(x) for x in v]
            return v

        shell = mark(result)
        if not found:
            return result
        ctx, fn = self.ctx, function_name(self.ctx.state)
        prefix = f"{fn}.{uuid.uuid4().hex[:12]}" if ctx.in_map else fn
        lists: list[list[dict[str, Any]]] = []
        for m, found_items in enumerate(found):
            items = found_items.items
            keys = [f"{prefix}.items{m}.{k:06d}" for k in range(len(items))]  # the longest a key can be
            total = json_size(items)
            sample = Reference(ctx.run_id, keys[-1] if keys else prefix, None, total, "msgpack",
                               ctx.state, "0" * 32, (len(items), len(items))).to_json()   # the largest one
            ranges = chunks(len(items), total, json_size(sample), threshold,
                            chunk_items=found_items.chunk_items, state=ctx.state)
            values = {keys[k]: items[a:b] for k, (a, b) in enumerate(ranges)}
            by_codec: dict[str, dict[str, Any]] = {}
            for key, v in values.items():
                by_codec.setdefault(_codec_of(v), {})[key] = v
            for codec, group in by_codec.items():
                self.client.put_many(group, adhoc=True, codec=codec)
            lists.append([Reference(ctx.run_id, keys[k], None, json_size(values[keys[k]]),
                                    _codec_of(values[keys[k]]), ctx.state, sign(ctx.token, ctx.run_id, keys[k], None),
                                    (a, b - a)).to_json()
                          for k, (a, b) in enumerate(ranges)])
        # a reference the handler passes on stays as it is
        return replace(shell, lambda m, _p: lists[m[REF_KEY]] if isinstance(m[REF_KEY], int) else m)

    def offload(self, result: Any, threshold: int) -> Any:
        result = self.store_items(result, threshold)
        shell, cut = split(result, threshold)
        ctx, fn = self.ctx, function_name(self.ctx.state)
        for path, v in cut:
            if ctx.feeds_map and isinstance(v, list):
                print(f"[funcsion] state {ctx.state} offloads the list at {path} ({len(v):,} items) whole: a Map that "
                      "iterates over it finds a reference, not a list (\"Map state input must be an array\"); "
                      "return sdk.offload_items(items) there to hand the Map chunk references", flush=True)
        outputs: list[str] = []
        if not ctx.in_map:
            outputs = list(self.client.metadata.describe_function(ctx.run_id, fn).outputs)
        if outputs:
            key, adhoc = outputs[-1], False
        else:
            key, adhoc = (f"{fn}.{uuid.uuid4().hex[:12]}" if ctx.in_map else fn), True
        stored: Any = b""  # nothing offloaded: the commit marker (a value never is this small)
        if cut:
            stored = cut[0][1] if len(cut) == 1 else [v for _, v in cut]
            if isinstance(stored, bytearray | memoryview):
                stored = bytes(stored)
        codec = _codec_of(stored)
        if cut or outputs:
            # a declared output is written even when nothing was cut (an empty marker): its write
            # commits the state's reads
            self.client.put(key, stored, adhoc=adhoc, codec=codec)
        elif not ctx.in_map:
            self.client.commit()
        if not cut:
            return shell
        one = len(cut) == 1
        refs = [Reference(ctx.run_id, key, None if one else i, json_size(v), codec, ctx.state,
                          sign(ctx.token, ctx.run_id, key, None if one else i)).to_json()
                for i, (_, v) in enumerate(cut)]
        # a reference the handler passes on unread stays as it is
        return replace(shell, lambda m, _p: refs[m[REF_KEY]] if isinstance(m[REF_KEY], int) else m)


def _codec_of(v: Any) -> str:
    """What stores ``v``: bytes and str as they are, JSON where it can, msgpack (which also
    holds bytes inside dicts and lists) otherwise."""
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, str):
        return "str"
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return "msgpack"
    return "json"


def offload_get(ref: Mapping[str, Any]) -> Any:
    """Read the value of reference ``ref`` in an ``@sdk.offload(resolve=False)`` handler
    (recorded for this state's commit, as an automatic read is)."""
    s = _session.get()
    if s is None:
        raise NoRunContext("sdk.offload_get was called outside an @sdk.offload handler; decorate the handler")
    return s.read(ref, "the reference passed to sdk.offload_get")


def _threshold(explicit: int | None) -> int:
    if explicit is not None:
        return explicit
    from ._config import Config

    return Config.load(env=os.environ).offload_threshold_bytes


def _fail(ctx: OffloadContext, exc: BaseException) -> TaskFailed:
    """``state S of run R failed: <Error>: <what>`` (``FatalTaskError`` when no retry can fix it)."""
    message = f"state {ctx.state} of run {ctx.run_id} failed: {type(exc).__name__}: {exc}"
    if is_retryable(exc):
        return TaskFailed(message, retryable=True, cause=type(exc).__name__)
    return FatalTaskError(message, cause=type(exc).__name__)


@lambda_handler_decorator
def offload(handler: Callable[..., Any], event: Any, context: Any, threshold_bytes: int | None = None,
            resolve: bool = True, stream: bool = False) -> Any:
    """Offload the handler's large results and read the references in its input (see the
    module docstring); ``threshold_bytes`` overrides the config's ``offload_threshold_bytes``."""
    ctx = OffloadContext.from_event(event)
    in_map = ctx.in_map
    rc = RunContext(ctx.endpoints, ctx.run_id, ctx.token, ctx.state)
    print(f"[funcsion] state {ctx.state} of run {ctx.run_id}{' (a Map iteration)' if in_map else ''}", flush=True)
    client = _client_for(rc).bind(run_id=ctx.run_id, token=ctx.token, function="" if in_map else function_name(ctx.state))
    session = _Session(client, ctx, stream)
    token = _session.set(session)
    try:
        payload = {k: v for k, v in event.items() if k != EVENT_KEY}
        if resolve:
            payload = replace(payload, session.read)
        result = handler(payload, context)
        out = session.offload(result, _threshold(threshold_bytes))
        session.free_chunks()
        return out
    except AlreadyCommitted:
        raise FatalTaskError(f"state {ctx.state} of run {ctx.run_id} committed in an earlier attempt (its reads may be "
                             "freed); a state that returned must not run again: retry only errors raised before "
                             "it returns", cause="AlreadyCommitted") from None
    except TaskFailed:
        raise
    except FuncsionError as exc:   # an SDK error: name the state, and say whether a retry may help
        failed = _fail(ctx, exc)
        frames = _user_frames(exc.__traceback__)
        raise failed.with_traceback(frames) from exc.with_traceback(frames)
    finally:
        _session.reset(token)
        client.close()
