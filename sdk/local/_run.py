"""One workflow run on the local stack, start to report: load the handlers
(one warm worker per entry; a handler that cannot be imported is refused
before the run starts), register the workflow, start a run, upload its
inputs, execute its tasks, copy its outputs to COS, end the run, measure what
it held, and save the report (``<state_dir>/runs/<run_id>.json``).

Every way a run stops ends it. A failed task, an error of the driver's own
calls (an output that cannot be copied, COS or the metadata server failing)
and an interruption (``KeyboardInterrupt``: Ctrl-C, or ``RunInterrupted``
from a signal handler) stop the tasks, end the run (which frees everything
but its outputs and persisted copies) and return the report with status
``failed`` or ``aborted`` and the cause in ``error``. While it drives a run, the driver holds
the run's lock file (``_drivers``): should it die, the next stack or driver on the state
directory ends the run at once instead of at its TTL. Only bad input raises,
before any run exists (``prepare_run``).

``leaked_bytes`` in the report is what the metadata server or the daemon
still hold for the run after it ended (0 unless something is wrong; None
when the run could not be ended, e.g. the metadata server is gone).

The end and the report are ``_RunEnd``'s, whoever ran the tasks: ``_Driver``
here, and ``sdk.aws_run`` for a run under a deployment's state machine.
"""

from __future__ import annotations

import copy
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
from ._chaos import DaemonRestart, StorageChaos
from ._cost import StoreSnapshot, run_cost
from ._daemon_stats import merge_physical, merge_stats
from ._drivers import DriverLock
from ._report import RunReport, memory_figures, memory_series, object_rows, recovery_figures, task_rows
from ._report_store import save_report
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
    """Pocket's run-start hints (see ``Client.start_run``). ``max_concurrency`` 0 means: the
    widest stage of the workflow's HDAG or the executor's workers, whichever is fewer (the
    framework knows its own parallelism; the lifetime model's wave features use it)."""

    max_concurrency: int = 0
    capacity_bytes: int = 0
    latency_sensitive: bool = True


def _widest_stage(graph: hdag.HDAG) -> int:
    widths = Counter(f.stage for f in graph.functions.values())
    return max(widths.values(), default=1)


def _after_end(before: Mapping[str, Any], kept: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The object statuses once the run ended: the end frees, in one step at the summary's
    ``ended``, every object still held (all of them under ``pocket``, those whose lease had not
    expired under ``jiffy``) and keeps the outputs and persisted copies, the only records the
    metadata server still lists after it (``kept``). An object a lease freed between the two
    reads would show the end's time; they are milliseconds apart."""
    ended = summary.get("ended")
    out = dict(before)
    for name, s in before.items():
        if name in kept:
            out[name] = kept[name]
        elif s.state in ("allocated", "readable") and ended:
            s = copy.copy(s)
            s.state, s.freed_at, s.freed_reason = "freed", float(ended), f"run {summary.get('state', 'ended')}"
            out[name] = s
    return out


def run_workflow(wds_path: str | Path | PreparedRun, *, config: Config, stack: Stack | None = None,
                 client: Client | None = None, inputs: Mapping[str, str] | None = None,
                 params: Mapping[str, int] | None = None, policy: str | None = None,
                 options: ExecutorOptions | None = None, hints: RunHints | None = None,
                 where: Mapping[str, Any] | None = None) -> RunReport:
    """Run a workflow once. Give an in-process ``stack`` or a driver ``client`` of a running one.
    ``wds_path`` may be a ``prepare_run`` result (then ``inputs`` and ``params`` are not used).
    ``where``: which stack this is, for the report's ``stack`` (``sdk.run`` says)."""
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
    executor: LocalExecutor | None = None
    try:
        executor = LocalExecutor(prep.graph, client.endpoints, code_dir=prep.path.parent, options=options,
                                 log_dir=str(Path(config.state_dir).resolve() / "logs"))
        executor.load_handlers()  # a handler that cannot be imported: refused before the run starts
        key = client.register_workflow(prep.text, prep.params, str(prep.path))
        t0 = time.time()  # the report's times count from here: the run starts next
        run = client.start_run(key, policy=policy or config.policy, ttl_s=config.run_ttl_s,
                               max_concurrency=hints.max_concurrency or min(_widest_stage(prep.graph),
                                                                            executor.workers),
                               capacity_bytes=hints.capacity_bytes, latency_sensitive=hints.latency_sensitive,
                               input_bytes=prep.input_bytes)
        try:
            with DriverLock(config.state_dir, run.run_id):  # a stack that finds it free ends the run
                report = _Driver(prep, config, run, key, stack, executor).execute(policy or config.policy, t0)
            report.stack = dict(where or {})
        finally:
            run.close()
    finally:
        if executor is not None:
            executor.close()
        if own_client:
            client.close()
    report.saved_to = str(save_report(config.state_dir, report.to_dict()))
    return report


class _RunEnd:
    """A started run's end and report, however its tasks ran (here: ``_Driver``; on AWS:
    ``sdk.aws_run``): ``_end`` ends it on fresh connections, ``_report`` measures and reports."""

    def __init__(self, prep: PreparedRun, config: Config, run: Client, key: str, stack: Stack | None) -> None:
        self.prep, self.config, self.run, self.key, self.stack = prep, config, run, key, stack
        self.outputs: dict[str, str] = {}
        self.output_codecs: dict[str, str] = {}
        self.ran = False  # the run's tasks were started
        self.store_before: dict[str, Any] | None = None
        self.snapshot_before: StoreSnapshot | None = None
        self.target: dict[str, Any] = {}  # where the run ran, when not on this stack (the report's ``target``)

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
        """The tasks that were running when the run was interrupted."""
        return []

    def _statuses(self, ender: Client) -> dict[str, Any]:
        """The run's object statuses as the metadata server lists them before the end."""
        try:
            return {s.object_name: s for s in ender.list()}
        except FuncsionError:
            return {}

    def _memory_mb(self) -> int:
        """The storage functions' memory (MB), for the cost account."""
        return _function_memory_mb(self.stack, self.config)

    def _end(self, status: str) -> tuple[dict[str, Any], dict[str, Any] | None, str | None, list[Any]]:
        """End the run on fresh connections (an interrupted call may have left the run's own
        mid-message): (object statuses, run summary or None, why not ended, the metadata server's
        memory samples). The statuses are read before the end (the metadata server forgets freed
        objects when a run ends) and completed with what the end did (``_after_end``)."""
        fresh = Client(self.run.endpoints)
        ender = fresh.bind(run_id=self.run.run_id, token=self.run.token)
        try:
            statuses = self._statuses(ender)
            try:
                summary = ender.end_run(status)
            except RunEnded:  # its TTL ended it first: the summary is in the stats
                summary = None
            except FuncsionError as exc:
                return statuses, None, str(exc), []
            try:
                stats = fresh.bind(run_id=self.run.run_id).metadata.stats()   # its shard's (admin)
            except FuncsionError:
                stats = {}
            if summary is None:
                summary = next((r for r in stats.get("runs", []) if r.get("run_id") == self.run.run_id), {})
            try:
                kept = {s.object_name: s for s in ender.list() if s.state == "kept"}
            except FuncsionError:
                kept = {}
            return _after_end(statuses, kept, summary), summary, None, list(stats.get("samples", []))
        finally:
            ender.close()
            fresh.close()

    def _report(self, status: str, cause: str | None, result: ExecutionResult | None, t0: float,
                policy: str) -> RunReport:
        statuses, summary, not_ended, samples = self._end(status)
        wall = time.time() - t0
        persisted = {n: self.run.persisted_location(n) for n, s in statuses.items() if s.persist}
        expiry = _persisted_expiry(self.run, persisted)
        error = cause or (result.error if result else None)
        if not_ended is not None:
            error = (f"{error}; " if error else "") + (f"the run could not be ended ({not_ended}); its TTL of "
                                                       f"{self.config.run_ttl_s:g} s will end it")
            leaked = physical = None
        else:
            leaked = _leaked(self.run.run_id, self.run.endpoints, self.stack, summary or {})
            physical = _physical(self.run.run_id, self.run.endpoints) if leaked is not None else None
        series: list[list[float]] = []
        if physical is None and summary and summary.get("started") is not None and summary.get("ended"):
            series = memory_series(samples, float(summary["started"]), float(summary["ended"]), t0,
                                   end=(int(summary.get("allocated_bytes", 0)), int(summary.get("live_bytes", 0))))
        objects = object_rows(statuses, t0)
        memory = memory_figures(summary, leaked, physical, first_write=_first_write(objects),
                                series=series, series_source=SERIES_SOURCE if series else None)
        store_after = _store_stats(self.run.endpoints)
        billing = result.billing if result else {}
        cost = run_cost(t0=t0, t1=t0 + wall, billing=billing, before=self.snapshot_before,
                        after=StoreSnapshot(self.stack, store_after), platform=_platform(self.stack),
                        objects=objects, peak_live_bytes=int(memory.get("peak_live_bytes") or 0),
                        function_memory_mb=self._memory_mb())
        return RunReport(
            status=status, run_id=self.run.run_id, workflow=self.key,
            policy=str((summary or {}).get("policy", policy)), wall_s=wall, outputs=self.outputs,
            tasks=task_rows(self.prep.graph, result.tasks, statuses, t0, result.attempts, result.logs)
            if result else {},
            objects=objects,
            memory=memory, failed_task=result.failed_task if result and not cause else None, error=error,
            billing=billing, persisted=persisted, persisted_expiry=expiry, plan=self.run.plan, started=t0,
            output_codecs=self.output_codecs, recovery=recovery_figures(self.store_before, store_after), cost=cost,
            target=self.target)


def _persisted_expiry(run: Client, persisted: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The lifetimes of the run's persisted copies that have one (the daemon's record; a copy
    whose run's end the daemon has not carried out yet expires ``keep_s`` from now)."""
    out: dict[str, dict[str, Any]] = {}
    for name, location in persisted.items():
        try:
            life = run.persisted_lifetime(name)
        except FuncsionError:
            continue
        if life is None:
            continue
        expires = life.get("expires_at")
        out[name] = {"location": location, "keep_s": life["keep_s"],
                     "expires_at": round(float(expires) if expires is not None else time.time() + life["keep_s"], 3)}
    return out


class _Driver(_RunEnd):
    """One started run on the local executor: execute it, and end it whatever happens."""

    def __init__(self, prep: PreparedRun, config: Config, run: Client, key: str, stack: Stack | None,
                 executor: LocalExecutor) -> None:
        super().__init__(prep, config, run, key, stack)
        self.executor = executor

    def execute(self, policy: str, t0: float) -> RunReport:
        self.store_before = _store_stats(self.run.endpoints)
        self.snapshot_before = StoreSnapshot(self.stack, self.store_before)
        result: ExecutionResult | None = None
        cause: str | None = None
        try:
            self.run.put_many(self.prep.values)
            self.ran = True
            chaos = StorageChaos(self.stack, self.config.kill_storage_rate if self.stack is not None else 0.0,
                                 seed=self.executor.opts.seed)
            restart = DaemonRestart(self.stack, self.config.restart_daemon_after_s if self.stack is not None else 0.0)
            with chaos, restart:
                result = self.executor.run(self.run.run_id, self.run.token)
            if result.succeeded:
                for name in self.prep.graph.outputs:
                    self.outputs[name], self.output_codecs[name] = self.run.copy_output(name)
            status = "succeeded" if result.succeeded else "failed"
        except BaseException as exc:  # every way a run stops ends it; see the module docstring
            interrupted = isinstance(exc, KeyboardInterrupt)
            status = "aborted" if interrupted else "failed"
            cause = self._cause(exc)
            if not isinstance(exc, Exception | KeyboardInterrupt):  # SystemExit and the like: end, then go on
                self._end(status)
                raise
        if result is None and self.ran and self.executor.schedule is not None:
            result = self.executor.result()
        return self._report(status, cause, result, t0, policy)

    def _running(self) -> list[str]:
        return self.executor.interrupted if self.ran else []


#: Where ``memory.series`` comes from when the daemon cannot be asked (the report says so).
SERIES_SOURCE = ("metadata server samples: allocated and live bytes of the whole server after an event, "
                 "at most one per 0.1 s")


def _first_write(objects: Mapping[str, Any]) -> float:
    """When the run's first object was written (seconds from its start): where the physical
    series, which counts from the first stored byte, begins."""
    times = [o["written_at"] for o in objects.values() if o.get("written_at") is not None]
    return min(times) if times else 0.0


def _platform(stack: Stack | None) -> Any:
    """The stack's local platform when it runs in this process (its invocation records), else None."""
    return getattr(stack, "platform", None) if stack is not None else None


def _function_memory_mb(stack: Stack | None, config: Config) -> int:
    dcfg = getattr(stack, "daemon_config", None) if stack is not None else None
    return int(getattr(dcfg, "function_memory_mb", 0) or config.function_memory_mb)


def _store_stats(endpoints: Endpoints) -> dict[str, Any] | None:
    """The daemons' counters (store token; several daemons: summed, each one's under
    ``daemons``), or None when one cannot be asked."""
    try:
        per = {}
        for ident, addr in endpoints.daemons:
            with StoreClient(parse_addr(addr), endpoints.store_token, alive=endpoints.stack_alive,
                             tls_ca=endpoints.tls_ca) as store:
                per[ident] = store.stats()
        return merge_stats(per)
    except Exception:  # noqa: BLE001 - no daemon to ask: the report says nothing about recovery
        return None


def _physical(run_id: str, endpoints: Endpoints) -> dict[str, Any] | None:
    """What the storage functions held for the run over its life (each daemon's ledger, merged:
    ``_daemon_stats``), asked once the daemons dropped everything; None when a daemon cannot be
    asked."""
    try:
        per = {}
        for ident, addr in endpoints.daemons:
            with StoreClient(parse_addr(addr), endpoints.store_token, alive=endpoints.stack_alive,
                             tls_ca=endpoints.tls_ca) as store:
                per[ident] = store.memory(run_id)
        return merge_physical(per)
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
    stores = [StoreClient(parse_addr(addr), endpoints.store_token, alive=endpoints.stack_alive,
                          tls_ca=endpoints.tls_ca) for _, addr in endpoints.daemons]     # each daemon's share
    try:
        while True:
            if stack is not None:
                stack.pump_once()
            in_daemon = sum(int(store.stats().get("runs", {}).get(run_id, {}).get("bytes", 0)) for store in stores)
            if not in_daemon or time.time() > deadline:
                return held + in_daemon
            time.sleep(0.02)
    except Exception:  # noqa: BLE001 - the daemon is gone or refuses: say we do not know
        return None
    finally:
        for store in stores:
            store.close()
