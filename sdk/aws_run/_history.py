"""A Step Functions execution history read as a run: which task each Lambda
invocation was, its attempts (times, outcome, the Lambda error with its
stack trace), the cleanup task's result (the saved outputs and their codecs)
and how the execution ended. Pure: events in (dicts as boto3's
``get_execution_history`` returns them, in any page order), state out; no
boto3, no clock.

``ExecutionView.feed`` takes events incrementally (a poll's new ones) and moves
a ``StageProgress`` as tasks start, succeed and fail, so the bars look like a
local run's. An invocation is tied to its task by the payload the generated
state machine sends (``"function"``; the cleanup task's ``"action"``), and its
events to each other by ``previousEventId`` (Scheduled <- Started <- Succeeded
or Failed), which holds however the Map iterations interleave. Both the
``lambda:invoke`` integration's ``Task*`` events and the older ``LambdaFunction*``
events are read.

Not here: calling AWS (``_driver``), REPORT lines (``_logs``), the report
itself (``sdk.local._report``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..exceptions import retryable_error_name
from ..local._attempts import AttemptLog
from ..local._progress import StageProgress
from ..local._schedule import TaskRecord

__all__ = ["ExecutionView", "Invocation", "ExecutionEnd", "lambda_error", "event_time", "CLEANUP_TASK"]

#: The name the cleanup task's invocations get in the view (never a task of the workflow).
CLEANUP_TASK = "funcsion-cleanup"

EndStatus = Literal["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]

_SCHEDULED = ("TaskScheduled", "LambdaFunctionScheduled")
_STARTED = ("TaskStarted", "LambdaFunctionStarted")
_SUCCEEDED = ("TaskSucceeded", "LambdaFunctionSucceeded")
_FAILED = ("TaskFailed", "TaskTimedOut", "TaskStartFailed", "TaskSubmitFailed", "LambdaFunctionFailed",
           "LambdaFunctionTimedOut", "LambdaFunctionStartFailed", "LambdaFunctionScheduleFailed")
_ENDS: dict[str, EndStatus] = {"ExecutionSucceeded": "SUCCEEDED", "ExecutionFailed": "FAILED",
                               "ExecutionTimedOut": "TIMED_OUT", "ExecutionAborted": "ABORTED"}
#: Error names of ``sdk.exceptions.TaskFailed`` and its subclass: their message says it all
_SDK_WRAPPERS = ("TaskFailed", "FatalTaskError")


def event_time(event: Mapping[str, Any]) -> float:
    """An event's ``timestamp`` (a datetime from boto3, or epoch seconds) as Unix time."""
    ts = event.get("timestamp")
    if isinstance(ts, datetime):
        return ts.timestamp()
    return float(ts or 0.0)


def _details(event: Mapping[str, Any]) -> dict[str, Any]:
    """The ``...EventDetails`` member of an event (each type has its own name)."""
    for k, v in event.items():
        if k.endswith("EventDetails") and isinstance(v, dict):
            return v
    return {}


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def lambda_error(error: str | None, cause: str | None) -> tuple[str, str | None, str | None]:
    """(the error as a report shows it, the handler's traceback, the Lambda request id) from a
    failure event's ``error`` and ``cause``: Lambda's error payload (``errorType``,
    ``errorMessage``, ``stackTrace``: a list of frames, as the Python runtime sends it, or a
    string) when the cause is one, else the two as they are."""
    payload = _json(cause)
    if not isinstance(payload, dict) or "errorMessage" not in payload and "errorType" not in payload:
        text = f"{error}: {cause}" if error and cause else (error or cause or "the task failed (no error recorded)")
        return text, None, None
    etype = str(payload.get("errorType") or error or "Error")
    message = str(payload.get("errorMessage") or "")
    text = message if etype in _SDK_WRAPPERS and message else f"{etype}: {message}"
    stack = payload.get("stackTrace")
    trace: str | None = None
    if isinstance(stack, list) and stack:
        frames = "".join(s if str(s).endswith("\n") else f"{s}\n" for s in map(str, stack))
        trace = f"Traceback (most recent call last):\n{frames}{etype}: {message}\n"
    elif isinstance(stack, str) and stack.strip():
        trace = stack if stack.endswith("\n") else stack + "\n"
    rid = payload.get("requestId")
    return text, trace, str(rid) if rid else None


def _request_id(output: Any) -> str | None:
    """The Lambda request id in a ``lambda:invoke`` result (AWS adds its response metadata)."""
    if not isinstance(output, dict):
        return None
    meta = output.get("SdkResponseMetadata")
    if isinstance(meta, dict) and meta.get("RequestId"):
        return str(meta["RequestId"])
    headers = (output.get("SdkHttpMetadata") or {}).get("HttpHeaders") if isinstance(output.get("SdkHttpMetadata"),
                                                                                     dict) else None
    if isinstance(headers, dict):
        rid = headers.get("x-amzn-RequestId") or headers.get("X-Amzn-Requestid")
        return str(rid) if rid else None
    return None


@dataclass(slots=True)
class Invocation:
    """One Lambda invocation the state machine made: a task's attempt, or the cleanup task."""

    event_id: int  # of its Scheduled event
    task: str
    attempt: int
    lambda_name: str
    scheduled_at: float
    started_at: float | None = None
    finished_at: float | None = None
    outcome: Literal["running", "ok", "error"] = "running"
    error: str | None = None
    traceback: str | None = None
    request_id: str | None = None
    result: Any = None  # the handler's return value (the Payload of a lambda:invoke result)

    @property
    def duration_s(self) -> float | None:
        """From Started to its end (the time the Lambda ran, as the history tells it)."""
        if self.finished_at is None:
            return None
        return max(0.0, self.finished_at - (self.started_at if self.started_at is not None else self.scheduled_at))


@dataclass(frozen=True, slots=True)
class ExecutionEnd:
    status: EndStatus
    at: float
    error: str | None = None
    cause: str | None = None


@dataclass
class ExecutionView:
    """What an execution's history says of a run (see the module docstring). ``tasks``: the
    workflow's task names; ``max_attempts``: the tries a task gets (the state machine's retry,
    ``AslOptions.task_retry_attempts`` + 1): a failure before that counts as retrying in the
    progress bars until the history says otherwise."""

    tasks: Iterable[str]
    max_attempts: int = 3
    progress: StageProgress | None = None
    invocations: dict[int, Invocation] = field(default_factory=dict)
    end: ExecutionEnd | None = None
    last_id: int = 0
    started_at: float | None = None

    def __post_init__(self) -> None:
        self.tasks = list(self.tasks)
        self._names = set(self.tasks)
        self._of_event: dict[int, int] = {}  # Started event id -> Scheduled event id
        self._tries: dict[str, int] = {}

    # -- events in --------------------------------------------------------------------
    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Take events (already seen ones are skipped), oldest first."""
        for ev in sorted((e for e in events if int(e.get("id", 0)) > self.last_id), key=lambda e: int(e["id"])):
            self._one(ev)
            self.last_id = int(ev["id"])

    def _one(self, ev: Mapping[str, Any]) -> None:
        kind, eid, now = str(ev.get("type")), int(ev["id"]), event_time(ev)
        d = _details(ev)
        if kind == "ExecutionStarted":
            self.started_at = now
        elif kind in _SCHEDULED:
            self._scheduled(eid, d, now)
        elif kind in _STARTED:
            sid = int(ev.get("previousEventId", 0))
            inv = self.invocations.get(sid)
            if inv is not None:
                inv.started_at = now
                self._of_event[eid] = sid
        elif kind in _SUCCEEDED or kind in _FAILED:
            inv = self._invocation_of(int(ev.get("previousEventId", 0)))
            if inv is not None and inv.outcome == "running":
                self._finished(inv, kind in _SUCCEEDED, d, now)
        elif kind in _ENDS:
            self.end = ExecutionEnd(_ENDS[kind], now, d.get("error"), d.get("cause"))

    def _invocation_of(self, prev: int) -> Invocation | None:
        sid = self._of_event.get(prev, prev)  # a start failure follows the Scheduled event itself
        return self.invocations.get(sid)

    def _scheduled(self, eid: int, d: Mapping[str, Any], now: float) -> None:
        params = _json(d.get("parameters") if "parameters" in d else d.get("input"))
        if not isinstance(params, dict):
            return
        payload = params.get("Payload", params) if "FunctionName" in params else params
        if isinstance(payload, str):
            payload = _json(payload)
        if not isinstance(payload, dict):
            return
        fn = str(params.get("FunctionName") or d.get("resource") or "")
        lam = fn.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in fn else fn
        if payload.get("action") == "end_run":
            task = CLEANUP_TASK
        elif payload.get("function") in self._names:
            task = str(payload["function"])
        else:
            return
        attempt = self._tries[task] = self._tries.get(task, 0) + 1
        self.invocations[eid] = Invocation(eid, task, attempt, lam, now)
        if self.progress is not None and task != CLEANUP_TASK:
            self.progress.started(task, attempt, now)

    def _finished(self, inv: Invocation, ok: bool, d: Mapping[str, Any], now: float) -> None:
        inv.finished_at = now
        if ok:
            out = _json(d.get("output"))
            inv.outcome, inv.request_id = "ok", _request_id(out)
            inv.result = out.get("Payload", out) if isinstance(out, dict) and "StatusCode" in out else out
            if self.progress is not None and inv.task != CLEANUP_TASK:
                self.progress.succeeded(inv.task, now)
            return
        inv.outcome = "error"
        inv.error, inv.traceback, inv.request_id = lambda_error(d.get("error"), d.get("cause"))
        if self.progress is not None and inv.task != CLEANUP_TASK:
            name = _json(d.get("cause"))
            etype = name.get("errorType") if isinstance(name, dict) else d.get("error")
            retrying = inv.attempt < self.max_attempts and retryable_error_name(etype)
            self.progress.failed(inv.task, now, retrying=retrying)

    # -- state out --------------------------------------------------------------------
    def of(self, task: str) -> list[Invocation]:
        return sorted((i for i in self.invocations.values() if i.task == task), key=lambda i: i.event_id)

    def running(self) -> list[str]:
        """Tasks with an invocation the history has not seen end."""
        return sorted({i.task for i in self.invocations.values() if i.outcome == "running" and i.task != CLEANUP_TASK})

    def cleanup_result(self) -> dict[str, Any]:
        """What the cleanup task that ended the run returned (``sdk._cleanup``: ``outputs``,
        ``output_codecs``), or {}."""
        for inv in sorted(self.of(CLEANUP_TASK), key=lambda i: -i.event_id):
            if inv.outcome == "ok" and isinstance(inv.result, dict):
                return inv.result
        return {}

    def task_records(self, *, ended: bool, aborted_at: float | None = None,
                     reason: str | None = None) -> dict[str, TaskRecord]:
        """One ``TaskRecord`` per task, as the local scheduler keeps them. ``ended``: the
        execution is over (a task whose last try failed failed; one never tried was skipped);
        ``aborted_at``/``reason``: the driver stopped it then (what still ran failed with
        ``reason``)."""
        out: dict[str, TaskRecord] = {}
        for name in self.tasks:
            invs = self.of(name)
            rec = TaskRecord(name, attempts=len(invs))
            if invs:
                rec.started_at = invs[0].started_at or invs[0].scheduled_at
                rec.errors = [i.error for i in invs if i.outcome == "error" and i.error]
            last = invs[-1] if invs else None
            if last is None:
                rec.state = "skipped" if ended or aborted_at is not None else "waiting"
            elif last.outcome == "ok":
                rec.state, rec.finished_at = "succeeded", last.finished_at
            elif last.outcome == "error":
                rec.state = "failed" if ended or aborted_at is not None else "backoff"
                rec.finished_at = last.finished_at
            elif aborted_at is not None:
                rec.state, rec.finished_at = "failed", aborted_at
                rec.errors.append(reason or "aborted: the run stopped")
            else:
                rec.state = "running"
            out[name] = rec
        return out

    def failed_task(self) -> str | None:
        """The first task whose last try failed (by the time its last failure came)."""
        failed = [(inv.finished_at or 0.0, name) for name in self.tasks
                  if (invs := self.of(name)) and (inv := invs[-1]).outcome == "error"]
        return min(failed)[1] if failed else None

    def attempt_log(self, *, aborted_at: float | None = None, reason: str | None = None) -> AttemptLog:
        """Every task invocation as the local executor logs attempts (the cleanup task left out);
        one still running ends ``aborted`` at ``aborted_at`` when given."""
        log = AttemptLog()
        for inv in sorted(self.invocations.values(), key=lambda i: i.event_id):
            if inv.task == CLEANUP_TASK:
                continue
            rid = inv.request_id or f"event-{inv.event_id}"
            log.begin(inv.task, inv.attempt, rid, inv.started_at or inv.scheduled_at)
            if inv.outcome != "running":
                log.end(rid, inv.finished_at or inv.scheduled_at, inv.outcome, inv.error, inv.traceback)
            elif aborted_at is not None:
                log.end(rid, aborted_at, "aborted", reason or "aborted: the run stopped")
            a = log.attempts[-1]
            a.request_id = inv.request_id or ""
        return log
