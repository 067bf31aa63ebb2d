"""``@sdk.task`` stacks with powertools' Logger, Tracer and Metrics.

The real decorator runs in this process against a real embedded stack (one per
module): each test starts a run of a one-function workflow (``work`` reads the
workflow input ``seed`` and writes ``result``) and calls the decorated handler
with the event the local executor builds. Tracing is disabled (no X-Ray daemon
here); every test makes a fresh Logger service so powertools' per-name logger
state does not leak between tests.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

import sdk
from sdk import _task
from sdk._client import Client
from sdk._config import Config
from sdk.local._stack import Stack

WDS = {
    "app": "pt-stacking",
    "workflow_id": 1,
    "category": "test",
    "description": "one task that doubles its input",
    "spec": {
        "only_stage": {
            "stage_id": 0,
            "functions": [
                {"start": True, "name": "work", "input": ["seed"], "output": ["result"], "next": []},
            ],
        },
    },
}


@dataclass(frozen=True)
class LambdaContext:
    """The attributes powertools reads from a Lambda context."""

    function_name: str = "pt-stacking-work"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:pt-stacking-work"
    aws_request_id: str = "req-0001"


CTX = LambdaContext()


@dataclass
class Run:
    """One run of the workflow: the driver's client and the event task ``work`` receives."""

    client: Client
    event: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.client.run_id


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        try:
            yield st
        finally:
            # the decorator caches one client per container and endpoints (as the event names them,
            # without the admin token); close the ones for this stack, which is going away
            for ep in [e for e in _task._clients if e.metadata == st.endpoints.metadata]:
                _task._clients.pop(ep).close()


@pytest.fixture(scope="module")
def workflow(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("wds") / "pt.wds.json"
    path.write_text(json.dumps(WDS), encoding="utf-8")
    with stack.client() as admin:
        return admin.register_workflow(path.read_text(encoding="utf-8"), source=str(path))


@pytest.fixture
def new_run(stack: Stack, workflow: str) -> Iterator[Callable[[int], Run]]:
    """Start runs whose ``seed`` is ``{"n": n}``; they end after the test."""
    admin = stack.client()
    runs: list[Client] = []

    def start(n: int = 21) -> Run:
        c = admin.start_run(workflow)
        runs.append(c)
        c.put("seed", {"n": n})
        event = {"funcsion": {**stack.endpoints.for_run(c.run_id).to_dict(), "token": c.token}, "run_id": c.run_id,
                 "function": "work", "attempt": 1}
        return Run(c, event)

    yield start
    for c in runs:
        c.end_run()
        c.close()
    admin.close()


@pytest.fixture
def run(new_run: Callable[[int], Run]) -> Run:
    return new_run(21)


@pytest.fixture
def tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")


@pytest.fixture
def log() -> tuple[Logger, io.StringIO]:
    buf = io.StringIO()
    return Logger(service=f"pt-{uuid.uuid4().hex[:8]}", stream=buf), buf


def log_lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def emf_lines(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in docs if "_aws" in d]


def work(metrics: Metrics | None = None, logger: Logger | None = None) -> Callable[[Any, Any], Any]:
    """The task body: doubles ``seed`` into ``result`` and returns what it did."""

    def body(event: Any, context: Any) -> dict[str, Any]:
        n = sdk.get("seed")["n"]
        if logger is not None:
            logger.info("doubling", extra={"n": n})
        if metrics is not None:
            metrics.add_metric(name="Doubled", unit=MetricUnit.Count, value=1)
        sdk.put("result", {"n": 2 * n})
        return {"doubled": 2 * n, "request": context.aws_request_id}

    return body


def stacked(order: str, body: Callable[[Any, Any], Any], logger: Logger, tracer: Tracer,
            metrics: Metrics, *, pass_logger: bool = True) -> Callable[[Any, Any], Any]:
    """``body`` under the three powertools decorators, with ``@sdk.task`` innermost
    (``outside``: powertools wraps the task) or outermost (``inside``)."""
    task = sdk.task(logger=logger) if pass_logger else sdk.task
    if order == "outside":
        @logger.inject_lambda_context
        @tracer.capture_lambda_handler
        @metrics.log_metrics
        @task
        def handler(event: Any, context: Any) -> Any:
            return body(event, context)
    else:
        @task
        @logger.inject_lambda_context
        @tracer.capture_lambda_handler
        @metrics.log_metrics
        def handler(event: Any, context: Any) -> Any:
            return body(event, context)
    return handler


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_stacked_handler_runs_and_returns(order: str, run: Run, log: tuple[Logger, io.StringIO],
                                          tracing_off: None, capsys: pytest.CaptureFixture[str]) -> None:
    logger, buf = log
    metrics = Metrics(namespace="FuncsionTest", service="pt")
    tracer = Tracer(service="pt", auto_patch=False)
    handler = stacked(order, work(metrics, logger), logger, tracer, metrics)
    assert handler(run.event, CTX) == {"doubled": 42, "request": CTX.aws_request_id}
    assert run.client.lookup("result").state == "readable"
    line = next(r for r in log_lines(buf) if r["message"] == "doubling")
    assert line["run_id"] == run.run_id and line["function"] == "work" and line["n"] == 21
    assert line["function_request_id"] == CTX.aws_request_id and line["function_name"] == CTX.function_name
    emf = emf_lines(capsys.readouterr().out)
    assert [d["Doubled"] for d in emf] == [[1.0]]


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_logger_keys_follow_each_run_on_a_warm_handler(order: str, new_run: Callable[[int], Run],
                                                       log: tuple[Logger, io.StringIO], tracing_off: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    logger, buf = log
    metrics = Metrics(namespace="FuncsionTest", service="pt")
    tracer = Tracer(service="pt", auto_patch=False)
    handler = stacked(order, work(metrics, logger), logger, tracer, metrics)
    runs = [new_run(1), new_run(2)]
    for r in runs:
        handler(r.event, CTX)
    lines = [r for r in log_lines(buf) if r["message"] == "doubling"]
    assert [(r["run_id"], r["function"], r["n"]) for r in lines] == [(r.run_id, "work", n)
                                                                      for n, r in enumerate(runs, 1)]
    assert len(emf_lines(capsys.readouterr().out)) == 2
    # the SDK's own logger carries the keys too
    assert sdk.logger.get_current_keys()["run_id"] == runs[-1].run_id


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_metrics_flush_as_emf_with_namespace_and_service(order: str, run: Run, log: tuple[Logger, io.StringIO],
                                                         tracing_off: None, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "FuncsionEnvNS")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "pt-metrics")
    logger, _ = log
    metrics = Metrics()
    tracer = Tracer(auto_patch=False)
    handler = stacked(order, work(metrics), logger, tracer, metrics)
    handler(run.event, CTX)
    (doc,) = emf_lines(capsys.readouterr().out)
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "FuncsionEnvNS"
    assert directive["Metrics"] == [{"Name": "Doubled", "Unit": "Count"}]
    assert ["service"] in directive["Dimensions"]
    assert doc["service"] == "pt-metrics" and doc["Doubled"] == [1.0]


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_metrics_flush_even_when_the_task_fails(order: str, run: Run, log: tuple[Logger, io.StringIO],
                                                tracing_off: None, capsys: pytest.CaptureFixture[str]) -> None:
    logger, _ = log
    metrics = Metrics(namespace="FuncsionTest", service="pt")
    tracer = Tracer(service="pt", auto_patch=False)

    def body(event: Any, context: Any) -> Any:
        metrics.add_metric(name="Attempts", unit=MetricUnit.Count, value=1)
        return sdk.get("result")  # its own output: not a declared input

    handler = stacked(order, body, logger, tracer, metrics)
    with pytest.raises(sdk.TaskFailed, match="UndeclaredRead"):
        handler(run.event, CTX)
    (doc,) = emf_lines(capsys.readouterr().out)
    assert doc["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "Attempts", "Unit": "Count"}]


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_disabled_tracer_passes_results_and_task_failures(order: str, new_run: Callable[[int], Run],
                                                          tracing_off: None) -> None:
    tracer = Tracer(service="pt", auto_patch=False)
    assert tracer.disabled

    def body(event: Any, context: Any) -> Any:
        if event.get("bad"):
            return sdk.get("result")  # its own output: not a declared input
        return work()(event, context)

    if order == "outside":
        @tracer.capture_lambda_handler
        @sdk.task
        def handler(event: Any, context: Any) -> Any:
            return body(event, context)
    else:
        @sdk.task
        @tracer.capture_lambda_handler
        def handler(event: Any, context: Any) -> Any:
            return body(event, context)

    good = new_run(5)
    assert handler(good.event, CTX) == {"doubled": 10, "request": CTX.aws_request_id}
    bad = new_run(5)
    with pytest.raises(sdk.TaskFailed) as info:
        handler({**bad.event, "bad": True}, CTX)
    err = info.value
    assert err.cause == "UndeclaredRead" and err.retryable is False
    assert f"task work of run {bad.run_id} failed" in str(err) and "'result'" in str(err)
    assert isinstance(err.__cause__, sdk.UndeclaredRead)


def test_task_logger_kwarg_adds_run_keys(run: Run, log: tuple[Logger, io.StringIO]) -> None:
    logger, buf = log

    @sdk.task(logger=logger)
    def handler(event: Any, context: Any) -> Any:
        return work(logger=logger)(event, context)

    assert handler(run.event, CTX)["doubled"] == 42
    keys = logger.get_current_keys()
    assert keys["run_id"] == run.run_id and keys["function"] == "work"
    (line,) = [r for r in log_lines(buf) if r["message"] == "doubling"]
    assert line["run_id"] == run.run_id and line["function"] == "work"
    assert sdk.logger.get_current_keys()["run_id"] == run.run_id


def test_without_the_kwarg_only_the_sdk_logger_gets_run_keys(run: Run, log: tuple[Logger, io.StringIO]) -> None:
    logger, buf = log

    @sdk.task
    def handler(event: Any, context: Any) -> Any:
        return work(logger=logger)(event, context)

    handler(run.event, CTX)
    (line,) = [r for r in log_lines(buf) if r["message"] == "doubling"]
    assert "run_id" not in line
    assert sdk.logger.get_current_keys()["function"] == "work"
