"""One workflow run on the local stack, start to report: register the
workflow, start a run, upload its inputs, execute its tasks, copy its
outputs to COS, end the run, and measure what it held.

Every way a run stops ends it. A failed task, an error of the driver's own
calls (an output that cannot be copied, COS or the metadata server failing)
and an interruption (``KeyboardInterrupt``: Ctrl-C, or ``RunInterrupted``
from a signal handler) stop the tasks, end the run (which frees everything
but its outputs and persisted copies) and return the report with status
``failed`` or ``aborted`` and the cause in ``error``. Only bad input raises,
before any run exists (``prepare_run``).

``leaked_bytes`` in the report is what the metadata server or the daemon
still hold for the run after it ended (0 unless something is wrong; None
when the run could not be ended, e.g. the metadata server is gone).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hdag

from .._client import Client, Endpoints, parse_addr
from .._config import Config
from .._store_client import StoreClient
from ..exceptions import FuncsionError, RunEnded
from ._executor import ExecutionResult, ExecutorOptions, LocalExecutor
from ._inputs import InputError, PreparedRun, default_inputs, prepare_run
from ._report import RunReport, memory_figures, object_rows, task_rows
from ._stack import Stack

__all__ = ["RunReport", "RunHints", "RunInterrupted", "run_workflow", "prepare_run", "PreparedRun",
           "default_inputs", "InputError"]


class RunInterrupted(KeyboardInterrupt):
    """Raised by a signal handler to stop a run (``funcsion run`` on SIGINT/SIGTERM);
    ``signal_name`` goes into the report's cause."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass(frozen=True, slots=True)
class RunHints:
    """Pocket's run-start hints (see ``Client.start_run``). ``max_concurrency`` 0 means: take
    the widest stage of the workflow's HDAG (the framework knows its own parallelism)."""

    max_concurrency: int = 0
    capacity_bytes: int = 0
    latency_sensitive: bool = True


def _widest_stage(graph: hdag.HDAG) -> int:
    widths = Counter(f.stage for f in graph.functions.values())
    return max(widths.values(), default=1)


def run_workflow(wds_path: str | Path | PreparedRun, *, config: Config, stack: Stack | None = None,
                 client: Client | None = None, inputs: Mapping[str, str] | None = None,
                 params: Mapping[str, int] | None = None, policy: str | None = None,
                 options: ExecutorOptions | None = None, hints: RunHints | None = None) -> RunReport:
    """Run a workflow once. Give an in-process ``stack`` or a driver ``client`` of a running one.
    ``wds_path`` may be a ``prepare_run`` result (then ``inputs`` and ``params`` are not used)."""
    prep = wds_path if isinstance(wds_path, PreparedRun) else prepare_run(
        wds_path, inputs=inputs, params=params, options=options, limits=config.wds_limits())
    if client is None:
        if stack is None:
            raise ValueError("run_workflow needs a stack or a client")
        client = stack.client()
        own_client = True
    else:
        own_client = False
    hints = hints or RunHints()
    try:
        key = client.register_workflow(prep.text, prep.params, str(prep.path))
        run = client.start_run(key, policy=policy or config.policy, ttl_s=config.run_ttl_s,
                               max_concurrency=hints.max_concurrency or _widest_stage(prep.graph),
                               capacity_bytes=hints.capacity_bytes, latency_sensitive=hints.latency_sensitive)
        try:
            return _Driver(prep, config, run, key, stack, options).execute(policy or config.policy)
        finally:
            run.close()
    finally:
        if own_client:
            client.close()


class _Driver:
    """One started run: execute it, and end it whatever happens."""

    def __init__(self, prep: PreparedRun, config: Config, run: Client, key: str, stack: Stack | None,
                 options: ExecutorOptions | None) -> None:
        self.prep, self.config, self.run, self.key, self.stack, self.options = prep, config, run, key, stack, options
        self.executor: LocalExecutor | None = None
        self.outputs: dict[str, str] = {}

    def execute(self, policy: str) -> RunReport:
        t0 = time.time()
        result: ExecutionResult | None = None
        cause: str | None = None
        try:
            self.run.put_many(self.prep.values)
            self.executor = LocalExecutor(self.prep.graph, self.run.endpoints, code_dir=self.prep.path.parent,
                                          options=self.options,
                                          log_dir=str(Path(self.config.state_dir).resolve() / "logs"))
            try:
                result = self.executor.run(self.run.run_id, self.run.token)
            finally:
                self.executor.close()
            if result.succeeded:
                for name in self.prep.graph.outputs:
                    self.outputs[name] = self.run.save_output(name)
            status = "succeeded" if result.succeeded else "failed"
        except BaseException as exc:  # every way a run stops ends it; see the module docstring
            interrupted = isinstance(exc, KeyboardInterrupt)
            status = "aborted" if interrupted else "failed"
            cause = self._cause(exc)
            if not isinstance(exc, Exception | KeyboardInterrupt):  # SystemExit and the like: end, then go on
                self._end(status)
                raise
        if result is None and self.executor is not None and self.executor.schedule is not None:
            result = self.executor.result()
        return self._report(status, cause, result, t0, policy)

    def _cause(self, exc: BaseException) -> str:
        running = self._running()
        during = f" while {', '.join(running)} ran" if running else ""
        if isinstance(exc, RunInterrupted):
            return f"interrupted by {exc.signal_name}{during}"
        if isinstance(exc, KeyboardInterrupt):
            return f"interrupted (KeyboardInterrupt){during}"
        name, text = type(exc).__name__, str(exc)
        return text if text.startswith(name) else f"{name}: {text}"

    def _running(self) -> list[str]:
        return self.executor.interrupted if self.executor is not None else []

    def _end(self, status: str) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
        """End the run on fresh connections (an interrupted call may have left the run's own
        mid-message): (object statuses before the end, run summary or None, why not ended)."""
        fresh = Client(self.run.endpoints)
        ender = fresh.bind(run_id=self.run.run_id, token=self.run.token)
        try:
            try:
                statuses = {s.object_name: s for s in ender.list()}
            except FuncsionError:
                statuses = {}
            try:
                return statuses, ender.end_run(status), None
            except RunEnded:  # its TTL ended it first: the summary is in the stats
                runs = fresh.metadata.stats().get("runs", [])
                return statuses, next((r for r in runs if r.get("run_id") == self.run.run_id), {}), None
            except FuncsionError as exc:
                return statuses, None, str(exc)
        finally:
            ender.close()
            fresh.close()

    def _report(self, status: str, cause: str | None, result: ExecutionResult | None, t0: float,
                policy: str) -> RunReport:
        statuses, summary, not_ended = self._end(status)
        wall = time.time() - t0
        persisted = {n: self.run.persisted_location(n) for n, s in statuses.items() if s.persist}
        error = cause or (result.error if result else None)
        if not_ended is not None:
            error = (f"{error}; " if error else "") + (f"the run could not be ended ({not_ended}); its TTL of "
                                                       f"{self.config.run_ttl_s:g} s will end it")
            leaked = physical = None
        else:
            leaked = _leaked(self.run.run_id, self.run.endpoints, self.stack, summary or {})
            physical = _physical(self.run.run_id, self.run.endpoints) if leaked is not None else None
        return RunReport(
            status=status, run_id=self.run.run_id, workflow=self.key,
            policy=str((summary or {}).get("policy", policy)), wall_s=wall, outputs=self.outputs,
            tasks=task_rows(self.prep.graph, result.tasks, statuses, t0) if result else {},
            objects=object_rows(statuses, t0), memory=memory_figures(summary, leaked, physical),
            failed_task=result.failed_task if result and not cause else None, error=error,
            billing=result.billing if result else {}, persisted=persisted, plan=self.run.plan)


def _physical(run_id: str, endpoints: Endpoints) -> dict[str, Any] | None:
    """What the storage functions held for the run over its life (the daemon's ledger), asked
    once the daemon dropped everything; None when the daemon cannot be asked."""
    try:
        with StoreClient(parse_addr(endpoints.daemon), endpoints.store_token) as store:
            return store.memory(run_id)
    except Exception:  # noqa: BLE001 - an older daemon or one that is gone: the model stands in
        return None


def _leaked(run_id: str, endpoints: Endpoints, stack: Stack | None, summary: Mapping[str, Any]) -> int | None:
    """Bytes the run still holds after it ended: in the allocator, and in the daemon (once the
    daemon's control loop carried out the drops; the oracle policy's wait a grace period). None: the
    daemon could not be asked."""
    held = int(summary.get("live_bytes", 0)) + int(summary.get("allocated_bytes", 0))
    deadline = time.time() + Stack.ORACLE_GRACE_S + 5
    if stack is not None:
        stack.drain(timeout_s=Stack.ORACLE_GRACE_S + 5)
    try:
        with StoreClient(parse_addr(endpoints.daemon), endpoints.store_token) as store:
            while True:
                if stack is not None:
                    stack.pump_once()
                in_daemon = int(store.stats().get("runs", {}).get(run_id, {}).get("bytes", 0))
                if not in_daemon or time.time() > deadline:
                    return held + in_daemon
                time.sleep(0.02)
    except Exception:  # noqa: BLE001 - the daemon is gone or refuses: say we do not know
        return None
