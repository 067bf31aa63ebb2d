"""The local workflow executor: runs a workflow's task handlers as processes
on the local Lambda platform, parallel where the graph allows, in dependency
order, with Step Functions-like retries (``RunSchedule``), fault injection and
a progress bar per stage.

Each WDS entry becomes one platform function (``<app>-<entry>``, the same
name the Step Functions bridge gives its Lambda), so the replicas of a
templated entry share warm worker processes. Workers are forked from a fork
server that imported ``sdk`` once (``TASK_PRELOAD``; a warm container's
start, see ``storage_functions.local``), and each stage's workers are started
while the stage before it runs (as many as the stage can use at once), so its
first tasks find them warm. Fault injection: ``crash_rate``
makes an attempt exit abruptly at a random crash point (``sdk._task``);
``crash`` names tasks (``mapper_01`` or ``mapper_01:after_commit``) whose
first attempt crashes; ``kill_rate`` lets the platform SIGKILL task workers at
random. ``load_handlers`` starts one worker per entry before the run and
raises ``HandlerImportError`` naming the entry and its tasks when a handler
cannot be imported; an error no retry can fix
(``sdk.exceptions.NON_RETRYABLE_ERRORS``) fails its task on the first attempt.

Every attempt gets its own Lambda request id (``AttemptLog``): the task's log
file (``<log_dir>/<app>-<entry>.log``) tags its lines with it, and the report
lists each attempt with it, and each failure with the handler's traceback.
"""

from __future__ import annotations

import concurrent.futures as cf
import difflib
import logging
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdag import HDAG
from storage_functions.exceptions import InvocationFailed
from wds import lambda_name, lambda_prefix

from .._client import Endpoints
from .._task import CRASH_POINTS, FAULT_KEY
from ..exceptions import FuncsionError, TaskError, is_retryable, retryable_error_name
from ._attempts import AttemptLog
from ._progress import StageProgress, TqdmSink
from ._schedule import RetryPolicy, RunSchedule, TaskRecord

__all__ = ["LocalExecutor", "ExecutorOptions", "ExecutionResult", "HandlerImportError", "FaultSpecError",
           "parse_crash_specs", "check_crash_targets", "TASK_PRELOAD"]

log = logging.getLogger("funcsion.executor")

#: What a task worker's fork server imports once: the SDK (thrift, pyeclib, powertools), the
#: bulk of a task's cold start. Handlers' own modules are imported by each worker.
TASK_PRELOAD = ("sdk",)


class HandlerImportError(TaskError):
    """A task's handler module or function could not be loaded."""


class FaultSpecError(FuncsionError, ValueError):
    """A fault-injection option names a task the workflow does not have."""


@dataclass(frozen=True)
class ExecutorOptions:
    concurrency: int = 0  # 0: the number of cores, at least 2
    max_attempts: int = 3  # tries per task, the first included
    retry_interval_s: float = 0.2
    backoff_rate: float = 2.0
    task_memory_mb: int = 512
    task_timeout_s: float = 300.0
    crash_rate: float = 0.0
    crash: Mapping[str, str] = field(default_factory=dict)  # function -> crash point, first attempt only
    kill_rate: float = 0.0
    seed: int | None = None
    progress: bool | None = None  # None: when stderr is a terminal


@dataclass
class ExecutionResult:
    tasks: dict[str, TaskRecord]
    succeeded: bool
    failed_task: str | None
    error: str | None
    started: float
    finished: float
    billing: dict[str, Any]
    attempts: AttemptLog = field(default_factory=AttemptLog)
    logs: dict[str, str] = field(default_factory=dict)  # task -> its log file (when the platform keeps logs)


def parse_crash_specs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        fn, _, point = item.partition(":")
        point = point or "after_commit"
        if not fn or point not in CRASH_POINTS:
            raise ValueError(f"--crash {item!r}: write FUNCTION or FUNCTION:POINT with POINT one of "
                             f"{', '.join(CRASH_POINTS)}")
        out[fn] = point
    return out


def _retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: not when the error is one no retry can fix
    (``sdk.exceptions.NON_RETRYABLE_ERRORS``: a rule the task broke, a result that is not
    JSON, a handler that cannot load); a crash, timeout or transient error may pass."""
    if isinstance(exc, InvocationFailed):
        return exc.reason not in ("init", "marshal") and retryable_error_name(exc.error_type)
    return is_retryable(exc)


def check_crash_targets(h: HDAG, crash: Mapping[str, str]) -> None:
    """Refuse ``--crash`` names that are not tasks of the workflow (naming close matches)."""
    for fn in crash:
        if fn in h.functions:
            continue
        close = difflib.get_close_matches(fn, list(h.functions), n=3)
        hint = (f"did you mean {' or '.join(map(repr, close))}?" if close else
                f"its tasks are {', '.join(list(h.functions)[:8])}{', ...' if len(h.functions) > 8 else ''}")
        raise FaultSpecError(f"--crash {fn}: workflow {h.key} has no task {fn!r}; {hint}")


class LocalExecutor:
    def __init__(self, h: HDAG, endpoints: Endpoints, *, code_dir: str | Path,
                 options: ExecutorOptions | None = None, platform: Any = None, log_dir: str | None = None) -> None:
        from storage_functions.local import LocalPlatform, PlatformConfig

        self.h = h
        self.endpoints = endpoints
        self.code_dir = str(Path(code_dir).resolve())
        self.opts = options or ExecutorOptions()
        check_crash_targets(h, self.opts.crash)
        self.schedule: RunSchedule | None = None  # of the last run, also while it runs
        self.attempts = AttemptLog()  # of the last run
        self.interrupted: list[str] = []  # tasks that were running when the last run was stopped
        self._started = 0.0
        self.rng = random.Random(self.opts.seed)
        self._own_platform = platform is None
        self.platform = platform or LocalPlatform(PlatformConfig(
            kill_rate=self.opts.kill_rate, kill_functions=lambda_prefix(h.workflow.app) + "*",
            seed=self.opts.seed, log_dir=log_dir, idle_reclaim_s=(600.0, 1200.0)))
        self.names = {f: lambda_name(h.workflow.app, info.template or f) for f, info in h.functions.items()}
        for f, info in h.functions.items():
            self.platform.deploy(self.names[f], info.handler, memory_mb=self.opts.task_memory_mb,
                                 timeout_s=self.opts.task_timeout_s, code_paths=[self.code_dir],
                                 preload=TASK_PRELOAD)
        self.workers = self.opts.concurrency or max(2, os.cpu_count() or 2)
        self.stage_of: dict[str, int] = {}  # task -> index of its stage in stage order
        self.stage_needs: list[dict[str, int]] = []  # per stage: platform function -> workers it can use at once
        for k, (_, _, fns) in enumerate(h.stages()):
            needs: dict[str, int] = {}
            for f in fns:
                self.stage_of[f] = k
                needs[self.names[f]] = needs.get(self.names[f], 0) + 1
            self.stage_needs.append({n: min(c, self.workers) for n, c in needs.items()})

    def close(self) -> None:
        if self._own_platform:
            self.platform.shutdown()

    def load_handlers(self) -> None:
        """Start one worker per entry now, each importing its handler, and as many as the first
        stage can use at once for its entries (provisioned concurrency: the first tasks find them
        warm). Raises ``HandlerImportError`` naming the entry, its tasks and where the import
        failed, before any task runs."""
        names = list(dict.fromkeys(self.names.values()))  # the workflow's order: the first broken one is named
        first = self.stage_needs[0] if self.stage_needs else {}
        with cf.ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 2)),
                                   thread_name_prefix="funcsion-load") as pool:
            futures = [(n, pool.submit(self._load, n, first.get(n, 1))) for n in names]
            failures = [(n, exc) for n, f in futures if (exc := f.exception()) is not None]
        for name, exc in failures:
            if isinstance(exc, InvocationFailed) and exc.reason == "init":
                others = len(failures) - 1
                more = f" (and {others} other entr{'y' if others == 1 else 'ies'})" if others else ""
                raise HandlerImportError(self._cannot_load(name, exc) + more) from None
            raise exc

    def _load(self, name: str, count: int) -> None:
        self.platform.prewarm(name)  # one worker of every entry: a handler that cannot be imported fails here
        if count > 1:
            self._provision({name: count})  # best effort: a worker that fails to start is its task's error

    def _cannot_load(self, platform_name: str, exc: InvocationFailed) -> str:
        tasks = [f for f, n in self.names.items() if n == platform_name]
        info = self.h.functions[tasks[0]]
        entry = info.template or tasks[0]
        shown = ", ".join(tasks[:3]) + (f", ... ({len(tasks)} tasks)" if len(tasks) > 3 else "")
        who = f"{entry} (task{'s' if len(tasks) > 1 else ''} {shown})" if entry != tasks[0] else f"task {entry}"
        where = _last_frame(exc.stack_trace, self.code_dir)
        text = _import_error_text(exc)
        if where and f"({where})" not in text:  # a SyntaxError's message names the place already
            text += f" ({where})"
        return f"handler {info.handler!r} of {who} cannot be loaded from {self.code_dir}: {text}"

    def log_path(self, fn: str) -> str | None:
        """The log file of task ``fn``'s worker processes (None: the platform keeps no logs)."""
        log_dir = getattr(getattr(self.platform, "config", None), "log_dir", None)
        return str(Path(log_dir) / f"{self.names[fn]}.log") if log_dir else None

    def _event(self, run_id: str, token: str, fn: str, attempt: int) -> dict[str, Any]:
        # a task holds its run's tokens only: a run-scoped store token, never the store-wide one
        event: dict[str, Any] = {"funcsion": {**self.endpoints.for_run(run_id).to_dict(), "token": token},
                                 "run_id": run_id, "function": fn, "attempt": attempt}
        point = self.opts.crash.get(fn) if attempt == 1 else None
        if point is None and self.opts.crash_rate and self.rng.random() < self.opts.crash_rate:
            point = self.rng.choice(CRASH_POINTS)
        if point:
            event[FAULT_KEY] = {"crash": point}
        return event

    def run(self, run_id: str, token: str) -> ExecutionResult:
        fg = self.h.function_graph()
        sched = RunSchedule({f: list(fg.predecessors(f)) for f in fg},
                            RetryPolicy(max_attempts=self.opts.max_attempts - 1,
                                        interval_s=self.opts.retry_interval_s, backoff_rate=self.opts.backoff_rate),
                            rng=self.rng, max_retries={
                                f.name: f.lambda_settings.max_attempts - 1 for f in self.h.workflow.functions.values()
                                if f.lambda_settings.max_attempts is not None})
        workers = self.workers
        show = sys.stderr.isatty() if self.opts.progress is None else self.opts.progress
        progress = StageProgress(self.h.stages(), TqdmSink() if show else None)
        attempts = self.attempts = AttemptLog()
        started = time.time()
        self.schedule, self._started = sched, started
        futures: dict[cf.Future[Any], tuple[str, str]] = {}
        ahead = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="funcsion-provision")
        provisioned = {0}  # stages whose workers were started (the first: by load_handlers)
        with ahead, cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="funcsion-task") as pool:
            try:
                while not sched.finished:
                    now = time.time()
                    for fn in sched.ready(now):
                        if len(futures) >= workers:
                            break
                        attempt = sched.started(fn, now)
                        ev = self._event(run_id, token, fn, attempt)
                        rid = str(uuid.uuid4())
                        attempts.begin(fn, attempt, rid, now)
                        progress.started(fn, attempt, now)
                        futures[pool.submit(self.platform.invoke, self.names[fn], ev, request_id=rid)] = (fn, rid)
                        nxt = self.stage_of.get(fn, 0) + 1
                        if nxt < len(self.stage_needs) and nxt not in provisioned:
                            provisioned.add(nxt)  # the next stage's workers start while this one runs
                            ahead.submit(self._provision, self.stage_needs[nxt])
                    if not futures:
                        wake = sched.next_wakeup()
                        time.sleep(max(0.0, min(0.5, (wake or now) - time.time())))
                        continue
                    wake = sched.next_wakeup()
                    timeout = None if wake is None else max(0.0, wake - time.time())
                    done, _ = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        fn, rid = futures.pop(fut)
                        exc = fut.exception()
                        t = time.time()
                        if exc is None:
                            sched.succeeded_task(fn, t, fut.result())
                            attempts.end(rid, t, "ok")
                            progress.succeeded(fn, t)
                            continue
                        msg = self._describe(fn, exc)
                        retry_at = sched.failed_task(fn, t, msg, retryable=_retryable(exc))
                        attempts.end(rid, t, "error", msg, getattr(exc, "stack_trace", None))
                        progress.failed(fn, t, retrying=retry_at is not None)
            except BaseException as exc:  # Ctrl-C, or a bug: stop the tasks so the pool's threads return
                progress.finish(time.time())  # the bars go first: what is printed next lands below them
                ahead.shutdown(wait=False, cancel_futures=True)
                self._stop_tasks({fn for fn, _ in futures.values()})
                reason = f"aborted: the run stopped ({type(exc).__name__})"
                self.interrupted = sched.abort(time.time(), reason)
                attempts.abort(time.time(), reason)
                raise
            finally:
                progress.finish(time.time())
        return self.result()

    def _provision(self, needs: dict[str, int]) -> None:
        """Start the workers a stage can use at once (best effort: a task that finds none starts one)."""
        for name, count in needs.items():
            try:
                self.platform.provision(name, count)
            except Exception as exc:  # noqa: BLE001 - its tasks will report what is wrong
                log.debug("starting workers of %s ahead: %r", name, exc)

    def result(self) -> ExecutionResult:
        """What the last ``run`` did so far (also after it was interrupted)."""
        sched = self.schedule
        assert sched is not None, "result() before run()"
        failed = sched.first_failure
        self.attempts.add_platform_records(self.platform.records())
        logs = {fn: path for fn in sched.tasks if (path := self.log_path(fn)) is not None}
        return ExecutionResult(
            tasks=sched.tasks, succeeded=sched.succeeded, failed_task=failed.name if failed else None,
            error=failed.errors[-1] if failed else None, started=self._started, finished=time.time(),
            billing=self.platform.billing().to_dict(), attempts=self.attempts, logs=logs)

    def _stop_tasks(self, running: set[str]) -> None:
        """End the running attempts now: their callers see ``InvocationFailed``."""
        if self._own_platform:
            self.platform.shutdown()
            return
        for name in {self.names[fn] for fn in running}:
            self.platform.kill(name)

    def _describe(self, fn: str, exc: BaseException) -> str:
        if isinstance(exc, InvocationFailed):
            if exc.reason == "init":
                return self._cannot_load(self.names[fn], exc)
            if exc.error_type in _SDK_WRAPPERS:  # "task F of run R failed: <Error>: ..." says it all
                return exc.error_message or str(exc)
            if exc.reason in ("error", "marshal"):
                return f"{exc.error_type}: {exc.error_message}"
            return f"the task's process ended ({exc.reason}): {exc}"
        return f"{type(exc).__name__}: {exc}"


#: Error names of ``sdk.exceptions.TaskFailed`` and its subclass: transport for the retry
#: decision; their message names the task, the run and the error that caused them.
_SDK_WRAPPERS = ("TaskFailed", "FatalTaskError")


def _import_error_text(exc: InvocationFailed) -> str:
    """``ModuleNotFoundError: No module named 'x'`` from the traceback's last line when it has
    one (Lambda's error names, ``Runtime.ImportModuleError``, hide the Python error)."""
    lines = [ln for ln in (exc.stack_trace or "").strip().splitlines() if ln and not ln.startswith(" ")]
    last = lines[-1] if lines else ""
    if last.endswith(exc.error_message or "") and ":" in last:
        return last
    name, _, said = last.partition(": ")
    if said and (exc.error_message or "").startswith(said):  # a SyntaxError's line leaves out the place
        return f"{name}: {exc.error_message}"
    return f"{exc.error_type}: {exc.error_message}"


def _last_frame(trace: str, code_dir: str) -> str | None:
    """``handlers.py, line 3`` of the last frame of ``trace`` in the workflow's own code."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace or "")
    for path, line in reversed(frames):
        if path.startswith(code_dir + os.sep):
            return f"{os.path.relpath(path, code_dir)}, line {line}"
    return None
