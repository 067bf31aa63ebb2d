"""The local workflow executor: runs a workflow's task handlers as processes
on the local Lambda platform, parallel where the graph allows, in dependency
order, with Step Functions-like retries (``RunSchedule``), fault injection and
a progress bar per stage.

Each WDS entry becomes one platform function (``<app>-<entry>``, the same
name the Step Functions bridge gives its Lambda), so the replicas of a
templated entry share warm worker processes. Fault injection: ``crash_rate``
makes an attempt exit abruptly at a random crash point (``sdk._task``);
``crash`` names tasks (``mapper_01`` or ``mapper_01:after_commit``) whose
first attempt crashes; ``kill_rate`` lets the platform SIGKILL task workers at
random. A handler whose module cannot be imported fails the run at once; an
error no retry can fix (``sdk.exceptions.NON_RETRYABLE_ERRORS``) fails its task
on the first attempt.
"""

from __future__ import annotations

import concurrent.futures as cf
import difflib
import os
import random
import sys
import time
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
from ._schedule import RetryPolicy, RunSchedule, TaskRecord

__all__ = ["LocalExecutor", "ExecutorOptions", "ExecutionResult", "HandlerImportError", "FaultSpecError",
           "parse_crash_specs", "check_crash_targets"]


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


class _Progress:
    """One tqdm bar per stage (why tqdm: per-bar positions and rates for free)."""

    def __init__(self, h: HDAG, enabled: bool) -> None:
        self.bars: dict[int, Any] = {}
        self.stage_of = {f.name: f.stage for f in h.functions.values()}
        if not enabled:
            return
        from tqdm import tqdm

        for pos, (sid, name, fns) in enumerate(h.stages()):
            self.bars[sid] = tqdm(total=len(fns), desc=f"{name:<16}", position=pos, leave=True, file=sys.stderr,
                                  unit="task", dynamic_ncols=True)

    def done(self, fn: str) -> None:
        bar = self.bars.get(self.stage_of[fn])
        if bar is not None:
            bar.update(1)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


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
                                 timeout_s=self.opts.task_timeout_s, code_paths=[self.code_dir])

    def close(self) -> None:
        if self._own_platform:
            self.platform.shutdown()

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
                            rng=self.rng)
        workers = self.opts.concurrency or max(2, os.cpu_count() or 2)
        progress = _Progress(self.h, sys.stderr.isatty() if self.opts.progress is None else self.opts.progress)
        started = time.time()
        self.schedule, self._started = sched, started
        fatal: str | None = None
        futures: dict[cf.Future[Any], str] = {}
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="funcsion-task") as pool:
            try:
                while not sched.finished:
                    now = time.time()
                    for fn in sched.ready(now):
                        if len(futures) >= workers:
                            break
                        attempt = sched.started(fn, now)
                        ev = self._event(run_id, token, fn, attempt)
                        futures[pool.submit(self.platform.invoke, self.names[fn], ev)] = fn
                    if not futures:
                        wake = sched.next_wakeup()
                        time.sleep(max(0.0, min(0.5, (wake or now) - time.time())))
                        continue
                    wake = sched.next_wakeup()
                    timeout = None if wake is None else max(0.0, wake - time.time())
                    done, _ = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        fn = futures.pop(fut)
                        exc = fut.exception()
                        t = time.time()
                        if exc is None:
                            sched.succeeded_task(fn, t, fut.result())
                            progress.done(fn)
                            continue
                        msg = self._describe(fn, exc)
                        if isinstance(exc, InvocationFailed) and exc.reason == "init":
                            fatal = msg  # the code itself cannot load: nothing else will run either
                        sched.failed_task(fn, t, msg, retryable=_retryable(exc))
            except BaseException as exc:  # Ctrl-C, or a bug: stop the tasks so the pool's threads return
                self._stop_tasks(set(futures.values()))
                self.interrupted = sched.abort(time.time(), f"aborted: the run stopped ({type(exc).__name__})")
                raise
            finally:
                progress.close()
        return self.result(fatal)

    def result(self, error: str | None = None) -> ExecutionResult:
        """What the last ``run`` did so far (also after it was interrupted)."""
        sched = self.schedule
        assert sched is not None, "result() before run()"
        failed = sched.first_failure
        return ExecutionResult(
            tasks=sched.tasks, succeeded=sched.succeeded, failed_task=failed.name if failed else None,
            error=error or (failed.errors[-1] if failed else None), started=self._started, finished=time.time(),
            billing=self.platform.billing().to_dict())

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
                return (f"handler {self.h.functions[fn].handler!r} of task {fn} cannot be loaded from "
                        f"{self.code_dir}: {exc.error_type}: {exc.error_message}")
            if exc.reason in ("error", "marshal"):
                return f"{exc.error_type}: {exc.error_message}"
            return f"the task's process ended ({exc.reason}): {exc}"
        return f"{type(exc).__name__}: {exc}"
