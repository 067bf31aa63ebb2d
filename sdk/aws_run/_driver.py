"""One workflow run on an AWS deployment, start to report: find the deployment
from its CloudFormation stack (``_deployment``), register the workflow, start
a run, put its inputs, start the state machine's execution named by the run
id, show progress per stage from the execution history (``_history``), and
when the execution ends save the same report as a local run
(``<state_dir>/runs/<run_id>.json``), with the run's ``target`` saying where
it ran.

Every way it stops ends the run, as a local run (``sdk.local._run``, whose
end and report this reuses: ``_RunEnd``): the execution succeeds or fails (its
cleanup task ended the run already), ``timeout_s`` passes, the driver is
interrupted (Ctrl-C/SIGTERM raise ``KeyboardInterrupt``; ``AwsRun.abort`` from
another thread) or one of its own calls fails: the execution is stopped, the
run ended, and the report says ``failed`` or ``aborted`` with the cause. A
task still running on Lambda when its execution is stopped finds its run
ended (its calls are refused) and nothing of it is kept.

Faults before a run exists (no stack, an output missing, no credentials, the
servers out of reach) raise ``DeploymentError`` of one line.

Cost: the task bills (``_billing``), the storage functions' invocations and the
COS requests from the daemon's counters, as a local run against a remote
stack counts them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_functions.tls import is_loopback

from .._client import Client, Endpoints
from .._config import Config
from .._cos_io import cos_location, output_key
from ..deploy._aws_errors import describe_aws_error, is_aws_error
from ..deploy.aws import start_execution
from ..exceptions import FuncsionError
from ..local._cost import StoreSnapshot
from ..local._executor import ExecutionResult
from ..local._inputs import PreparedRun
from ..local._progress import StageProgress, TqdmSink
from ..local._report import RunReport
from ..local._report_store import save_report
from ..local._run import RunHints, RunInterrupted, _RunEnd, _store_stats, _widest_stage
from ._billing import LambdaReport, parse_report_line, task_billing
from ._deployment import (AwsDeployment, DeploymentError, check_address, default_stack_name, describe_deployment,
                          driver_endpoints, read_tokens)
from ._history import ExecutionView

__all__ = ["AwsRun", "AwsRunOptions", "AwsClients", "RunTimedOut", "connect"]


#: Reads of the history in a row that may fail (throttling, a network blip) before the driver gives up.
MAX_POLL_FAILURES = 10


class RunTimedOut(FuncsionError):
    """The execution did not end within the driver's ``timeout_s``."""

    retryable = False


@dataclass(frozen=True, slots=True)
class AwsRunOptions:
    """Where the deployment is and how to watch it. ``stack_name`` None: ``funcsion-<app>``;
    ``metadata``/``daemon``: addresses that stand in for the stack's (a port forward);
    ``timeout_s`` 0: none; ``poll_s``: between two reads of the history; ``progress`` None:
    bars when stderr is a terminal; ``max_attempts``: a task's tries under the state machine
    (for the bars only; the history says what happened); ``tls_ca``: the CA the servers'
    certificate is checked against (``funcsion certs``' ca.pem)."""

    stack_name: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    metadata: str | None = None
    daemon: str | None = None
    timeout_s: float = 0.0
    poll_s: float = 1.0
    progress: bool | None = None
    max_attempts: int = 3
    tls_ca: str = ""  # the deployment CA's PEM text: required off loopback (its servers speak TLS)


class AwsClients:
    """The boto3 clients a run uses, made when first asked (or given, for tests)."""

    def __init__(self, region: str | None = None, endpoint_url: str | None = None, **given: Any) -> None:
        self.region, self.endpoint_url = region, endpoint_url
        self._made: dict[str, Any] = dict(given)

    def __call__(self, service: str) -> Any:
        if service not in self._made:
            import boto3

            try:
                self._made[service] = boto3.client(service, region_name=self.region, endpoint_url=self.endpoint_url)
            except Exception as exc:
                if is_aws_error(exc):
                    raise DeploymentError(f"creating the AWS {service} client: {self.describe(exc)}") from None
                raise
        return self._made[service]

    def describe(self, exc: BaseException) -> str:
        return describe_aws_error(exc, region=self.region, endpoint_url=self.endpoint_url)


def connect(prep: PreparedRun, options: AwsRunOptions, clients: AwsClients) -> tuple[AwsDeployment, Endpoints]:
    """The deployment and the driver's endpoints, checked: the stack and its outputs, the tokens,
    and both servers answering a TCP connect. Raises ``DeploymentError``."""
    name = options.stack_name or default_stack_name(prep.graph.workflow.app)
    dep = describe_deployment(clients("cloudformation"), name, region=clients.region,
                              endpoint_url=clients.endpoint_url, metadata=options.metadata, daemon=options.daemon)
    admin, store = read_tokens(clients("secretsmanager"), dep.tokens_secret_arn, region=clients.region,
                               endpoint_url=clients.endpoint_url)
    for addr, what, flag, key in ((dep.metadata, "metadata server", "--metadata", "MetadataAddress"),
                                  (dep.daemon, "SION daemon", "--daemon", "DaemonAddress")):
        given = options.metadata if key == "MetadataAddress" else options.daemon
        host = addr.rpartition(":")[0].strip("[]")
        if not options.tls_ca and not is_loopback(host):  # said before any connection is tried
            raise DeploymentError(f"the {what} at {addr} speaks TLS (every server off loopback does): give the "
                                  "deployment's CA, --tls-ca DIR/ca.pem (the file `funcsion certs DIR` made and "
                                  "`funcsion deploy --tls-dir DIR` took) or FUNCSION_TLS_CA")
        check_address(addr, what, flag if given else f"stack {dep.stack_name} output {key}")
    return dep, driver_endpoints(dep, admin, store, tls_ca=options.tls_ca)


class AwsRun:
    """``AwsRun(prep, config=..., options=...).run()`` -> the saved ``RunReport``;
    ``abort(reason)`` from another thread stops it as Ctrl-C does."""

    def __init__(self, prep: PreparedRun, *, config: Config, options: AwsRunOptions | None = None,
                 hints: RunHints | None = None, policy: str | None = None, clients: AwsClients | None = None) -> None:
        self.prep, self.config = prep, config
        self.options = options or AwsRunOptions()
        self.hints = hints or RunHints()
        self.policy = policy or config.policy
        self.clients = clients or AwsClients(self.options.region or config.region or None, self.options.endpoint_url)
        self._abort = threading.Event()
        self._abort_reason = "abort()"
        self.started = threading.Event()  # set once the execution started (its ARN in ``execution_arn``)
        self.execution_arn: str | None = None

    def abort(self, reason: str = "abort()") -> None:
        self._abort_reason = reason
        self._abort.set()

    def run(self) -> RunReport:
        dep, endpoints = connect(self.prep, self.options, self.clients)
        prep = self.prep
        with Client(endpoints) as client:
            key = client.register_workflow(prep.text, prep.params, str(prep.path))
            t0 = time.time()  # the report's times count from here: the run starts next
            run = client.start_run(key, policy=self.policy, ttl_s=self.config.run_ttl_s,
                                   max_concurrency=self.hints.max_concurrency or _widest_stage(prep.graph),
                                   capacity_bytes=self.hints.capacity_bytes,
                                   latency_sensitive=self.hints.latency_sensitive,
                                   input_bytes=prep.input_bytes)
            try:
                report = _AwsDriver(self, run, key, dep).execute(self.policy, t0)
            finally:
                run.close()
        report.saved_to = str(save_report(self.config.state_dir, report.to_dict()))
        return report


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of the execution ``name`` of a state machine (Step Functions derives it so)."""
    head, sep, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{head}:execution:{machine}:{name}" if sep else f"{state_machine_arn}:{name}"


class _AwsDriver(_RunEnd):
    """One started run whose tasks run under the deployment's state machine."""

    def __init__(self, owner: AwsRun, run: Client, key: str, dep: AwsDeployment) -> None:
        super().__init__(owner.prep, owner.config, run, key, None)
        self.owner, self.dep, self.opts, self.clients = owner, dep, owner.options, owner.clients
        g = owner.prep.graph
        show = sys.stderr.isatty() if self.opts.progress is None else self.opts.progress
        self.progress = StageProgress(g.stages(), TqdmSink() if show else None)
        self.view = ExecutionView(list(g.functions), self.opts.max_attempts, self.progress)
        self.seen: dict[str, Any] = {}  # object statuses as last listed while the run was alive
        self.stopped_at: float | None = None
        self.stop_reason: str | None = None
        self.starting = False  # StartExecution was called: an execution named by the run may exist
        self.target = {"kind": "aws", "region": self.clients.region, "stack_name": dep.stack_name,
                       "state_machine_arn": dep.state_machine_arn, "execution_arn": None, "cos_url": dep.cos_url}

    # -- the execution ------------------------------------------------------------
    def execute(self, policy: str, t0: float) -> RunReport:
        self.store_before = _store_stats(self.run.endpoints)
        self.snapshot_before = StoreSnapshot(None, self.store_before)
        cause: str | None = None
        try:
            try:
                self.run.put_many(self.prep.values)
                self.starting = True
                arn = start_execution(self.dep.state_machine_arn, self.run, sfn_client=self.clients("stepfunctions"),
                                      region_name=self.clients.region)
                self.ran = True
                self.owner.execution_arn = self.target["execution_arn"] = arn
                self.owner.started.set()
                self._watch(t0)
                status, cause = self._outcome()
            except BaseException as exc:  # every way a run stops ends it (see the module docstring)
                status = "aborted" if isinstance(exc, KeyboardInterrupt) else "failed"
                self._refresh()  # what ran when it stopped
                cause = self._cause(exc)
                self._stop(cause)
                if not isinstance(exc, Exception | KeyboardInterrupt):
                    self._end(status)
                    raise
        finally:
            self.progress.finish(time.time())
        return self._report(status, cause, self._result(t0), t0, policy)

    def _watch(self, t0: float) -> None:
        deadline = t0 + self.opts.timeout_s if self.opts.timeout_s else None
        failures = 0
        while True:
            try:
                self._poll()
                failures = 0
            except DeploymentError:  # AWS throttled or failed a read: the execution goes on; try again
                failures += 1
                if failures >= MAX_POLL_FAILURES:
                    raise
            if self.view.end is not None:
                return
            if self.owner._abort.is_set():
                raise RunInterrupted(self.owner._abort_reason)
            now = time.time()
            if deadline is not None and now >= deadline:
                raise RunTimedOut(f"the execution did not end within --timeout {self.opts.timeout_s:g} s")
            self.owner._abort.wait(min(self.opts.poll_s, deadline - now) if deadline is not None else self.opts.poll_s)

    def _poll(self) -> None:
        """Read the history's new events (progress moves) and the run's object statuses."""
        self.view.feed(self._history())
        try:
            self.seen = _merge(self.seen, self.run.list())
        except FuncsionError:  # the cleanup task ended the run: what was listed last stands
            pass

    def _history(self) -> list[dict[str, Any]]:
        """The events the view has not seen: newest first, paging back until a seen one (a long
        history is not read again at each poll; GetExecutionHistory is rate-limited)."""
        sfn = self.clients("stepfunctions")
        events: list[dict[str, Any]] = []
        kw: dict[str, Any] = {"executionArn": self.owner.execution_arn, "maxResults": 1000, "reverseOrder": True}
        try:
            while True:
                page = sfn.get_execution_history(**kw)
                got = page.get("events", [])
                events += [e for e in got if int(e.get("id", 0)) > self.view.last_id]
                if not page.get("nextToken") or any(int(e.get("id", 0)) <= self.view.last_id for e in got):
                    return events
                kw["nextToken"] = page["nextToken"]
        except Exception as exc:
            if is_aws_error(exc):
                raise DeploymentError(f"reading the history of execution {self.owner.execution_arn}: "
                                      f"{self.clients.describe(exc)}") from None
            raise

    def _outcome(self) -> tuple[str, str | None]:
        """(status, cause) from how the execution ended; a failed task is the result's to name."""
        end = self.view.end
        assert end is not None
        if end.status == "SUCCEEDED":
            done = self.view.cleanup_result()
            saved = done.get("outputs")
            if not isinstance(saved, dict):  # its result was not in the history: where it saves them
                saved = {n: cos_location(self.run.endpoints.cos_url, output_key(self.run.run_id, n))
                         for n in self.prep.graph.outputs} if self.run.endpoints.cos_url else {}
            self.outputs = {str(k): str(v) for k, v in saved.items()}
            codecs = done.get("output_codecs") or {}  # a cleanup Lambda deployed before it said them: bytes
            self.output_codecs = {n: str(codecs.get(n, "bytes")) for n in self.outputs}
            return "succeeded", None
        what = f"{end.error}: {end.cause}" if end.error and end.cause else (end.error or end.cause or "")
        if end.status == "FAILED":
            return "failed", None if self.view.failed_task() else f"the execution failed: {what or 'no cause given'}"
        if end.status == "TIMED_OUT":
            return "failed", "the execution timed out (the state machine's TimeoutSeconds)"
        return "aborted", f"the execution was stopped outside this driver{f': {what}' if what else ''}"

    def _stop(self, cause: str) -> None:
        """Stop the execution (when it started and has not ended), then read what it did."""
        self.stopped_at, self.stop_reason = time.time(), f"aborted: {cause}"
        arn = self.owner.execution_arn or (execution_arn(self.dep.state_machine_arn, self.run.run_id)
                                           if self.starting else None)  # stopped while StartExecution ran
        if arn is None or self.view.end is not None:
            return
        try:
            self.clients("stepfunctions").stop_execution(executionArn=arn, error="funcsion.Aborted",
                                                         cause=cause[:32000])
        except Exception as exc:  # noqa: BLE001 - the report says so; the run is ended all the same
            if self.owner.execution_arn is None:
                return  # it never started
            self.stop_reason += (f"; the execution could not be stopped ({self._say(exc)}): stop {arn} in the "
                                 "Step Functions console")
        self._refresh()

    def _refresh(self) -> None:
        """Read the history's new events, if it can be read (else what was read stands)."""
        if self.owner.execution_arn is None:
            return
        try:
            self.view.feed(self._history())
        except Exception:  # noqa: BLE001 - the history read so far stands
            pass

    @staticmethod
    def _say(exc: BaseException) -> str:
        return describe_aws_error(exc) if is_aws_error(exc) else f"{type(exc).__name__}: {exc}"

    # -- hooks of the run's end -----------------------------------------------------
    def _running(self) -> list[str]:
        return self.view.running()

    def _statuses(self, ender: Client) -> dict[str, Any]:
        """What the run listed while alive and what it lists now (after its cleanup task ended
        it, only its kept outputs): the end forgets the objects it freed."""
        return _merge(self.seen, super()._statuses(ender).values())

    def _memory_mb(self) -> int:
        """The storage Lambdas' configured memory (``StorageFunctionPrefix``), else the config's."""
        try:
            lam = self.clients("lambda")
            for page in lam.get_paginator("list_functions").paginate():
                for f in page.get("Functions", []):
                    if str(f.get("FunctionName", "")).startswith(self.dep.storage_function_prefix):
                        return int(f.get("MemorySize") or 0) or super()._memory_mb()
        except Exception:  # noqa: BLE001 - the config's size stands in
            pass
        return super()._memory_mb()

    # -- what the history says ------------------------------------------------------
    def _result(self, t0: float) -> ExecutionResult | None:
        if not self.ran:
            return None
        v = self.view
        ended = v.end is not None
        tasks = v.task_records(ended=ended, aborted_at=None if ended else self.stopped_at, reason=self.stop_reason)
        failed = v.failed_task() if ended and v.end is not None and v.end.status == "FAILED" else None
        error = tasks[failed].errors[-1] if failed and tasks[failed].errors else None
        if self.stop_reason and "could not be stopped" in self.stop_reason:
            error = self.stop_reason
        lambdas = {i.task: i.lambda_name for i in v.invocations.values()}
        logs = {fn: f"CloudWatch Logs /aws/lambda/{lambdas[fn]}" for fn in tasks if fn in lambdas}
        return ExecutionResult(tasks=tasks, succeeded=bool(ended and v.end and v.end.status == "SUCCEEDED"),
                               failed_task=failed, error=error, started=v.started_at or t0, finished=time.time(),
                               billing=self._billing(t0),
                               attempts=v.attempt_log(aborted_at=None if ended else self.stopped_at,
                                                      reason=self.stop_reason), logs=logs)

    def _billing(self, t0: float) -> dict[str, Any]:
        invs = list(self.view.invocations.values())
        names = sorted({i.lambda_name for i in invs})
        return task_billing(invs, self._lambda_memory(names), self._report_lines(names, invs, t0))

    def _lambda_memory(self, names: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in names:
            try:
                out[name] = int(self.clients("lambda").get_function_configuration(FunctionName=name)["MemorySize"])
            except Exception:  # noqa: BLE001 - billed at 0 MB, and the bill's source says so
                pass
        return out

    def _report_lines(self, names: list[str], invs: list[Any], t0: float) -> Mapping[str, LambdaReport]:
        wanted = {i.request_id for i in invs if i.request_id}
        if not wanted:  # the history gave no request ids: nothing to match a line to
            return {}
        try:
            logs = self.clients("logs")
        except DeploymentError:
            return {}
        return read_report_lines(logs, names, wanted, since=t0 - 60)

def read_report_lines(logs: Any, names: Iterable[str], wanted: set[str], *, since: float) -> dict[str, LambdaReport]:
    """The REPORT lines of the invocations ``wanted`` (request ids) in the log groups of the
    Lambdas ``names`` (``/aws/lambda/<name>``) since ``since`` (Unix time); a group that cannot
    be read (none yet, no permission) gives none: the history's timings stand in."""
    out: dict[str, LambdaReport] = {}
    for name in names:
        kw: dict[str, Any] = {"logGroupName": f"/aws/lambda/{name}", "startTime": int(since * 1000),
                              "filterPattern": '"REPORT RequestId"'}
        try:
            while True:
                page = logs.filter_log_events(**kw)
                for e in page.get("events", []):
                    rep = parse_report_line(str(e.get("message", "")))
                    if rep is not None and rep.request_id in wanted:
                        out[rep.request_id] = rep
                if not page.get("nextToken"):
                    break
                kw["nextToken"] = page["nextToken"]
        except Exception as exc:
            if not is_aws_error(exc):
                raise
    return out


def _merge(seen: Mapping[str, Any], listed: Iterable[Any]) -> dict[str, Any]:
    """Object statuses as last listed, over those seen before; except that once a run has ended
    the metadata server lists what it forgot as ``pending`` again: an object seen further along
    keeps what was seen."""
    out = dict(seen)
    for s in listed:
        old = out.get(s.object_name)
        if s.state != "pending" or old is None or old.state == "pending":
            out[s.object_name] = s
    return out
