"""The pure parts of ``funcsion run --target aws``: an execution history read
as a run (``ExecutionView``), the task bill from REPORT lines or the
history's timings, and the stack Outputs contract. The events have the shape
boto3's ``get_execution_history`` returns (as moto's interpreter and AWS
write them: Map iterations interleaved, retries chained by
``previousEventId``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from sdk.aws_run import (OUTPUT_KEYS, DeploymentError, ExecutionView, default_stack_name, deployment_from_outputs,
                         lambda_error, parse_report_line, parse_tokens, task_billing)
from sdk.aws_run._billing import HISTORY_SOURCE, REPORT_SOURCE
from sdk.local._progress import StageProgress

T0 = 1_800_000_000.0
ARN = "arn:aws:lambda:us-east-1:123456789012:function:"


class Events:
    """A history being written: ``add`` returns the new event's id."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, kind: str, at: float, prev: int = 0, **details: Any) -> int:
        eid = len(self.events) + 1
        ev: dict[str, Any] = {"id": eid, "previousEventId": prev, "type": kind,
                              "timestamp": datetime.fromtimestamp(T0 + at, tz=timezone.utc)}
        if details:
            ev[_details_key(kind)] = details
        self.events.append(ev)
        return eid

    def task(self, fn: str, lam: str, at: float, prev: int = 0, **payload: Any) -> int:
        params = {"FunctionName": ARN + lam, "Payload": {"funcsion": {}, "run_id": "r-1", **payload,
                                                         **({"function": fn} if fn else {})}}
        return self.add("TaskScheduled", at, prev, resourceType="lambda", resource="invoke",
                        parameters=json.dumps(params))


def _details_key(kind: str) -> str:
    return {"TaskScheduled": "taskScheduledEventDetails", "TaskStarted": "taskStartedEventDetails",
            "TaskSucceeded": "taskSucceededEventDetails", "TaskFailed": "taskFailedEventDetails",
            "ExecutionFailed": "executionFailedEventDetails",
            "ExecutionSucceeded": "executionSucceededEventDetails"}.get(kind, "details")


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, Any]] = []

    def open(self, stage: int, name: str, total: int, position: int) -> None:
        self.calls.append(("open", stage, total))

    def advance(self, stage: int, n: int) -> None:
        self.calls.append(("advance", stage, n))

    def note(self, stage: int, text: str) -> None:
        self.calls.append(("note", stage, text))

    def close(self, stage: int) -> None:
        self.calls.append(("close", stage, None))


TRACE = ['  File "/var/task/handlers.py", line 9, in reduce\n    return 1 / 0\n']


def _history() -> Events:
    """split (ok), two mappers interleaved (map_01 fails once, then succeeds), reduce fails twice."""
    h = Events()
    h.add("ExecutionStarted", 0.0)
    s = h.task("split", "wc-split", 0.1)
    st = h.add("TaskStarted", 0.1, s)
    h.add("TaskSucceeded", 0.5, st, output=json.dumps({"StatusCode": 200, "Payload": {"n": 2},
                                                        "SdkResponseMetadata": {"RequestId": "rid-split"}}))
    m0 = h.task("map_00", "wc-map", 0.6)
    m1 = h.task("map_01", "wc-map", 0.6)
    s0 = h.add("TaskStarted", 0.6, m0)
    s1 = h.add("TaskStarted", 0.6, m1)
    f1 = h.add("TaskFailed", 0.9, s1, error="ValueError",
               cause=json.dumps({"errorType": "ValueError", "errorMessage": "bad line", "requestId": "rid-m1a"}))
    h.add("TaskSucceeded", 1.0, s0, output=json.dumps({"StatusCode": 200, "Payload": {}}))
    m1b = h.task("map_01", "wc-map", 1.9, f1)
    s1b = h.add("TaskStarted", 1.9, m1b)
    h.add("TaskSucceeded", 2.2, s1b, output=json.dumps({"StatusCode": 200, "Payload": {}}))
    prev = 0
    for k in range(2):
        r = h.task("reduce", "wc-reduce", 2.3 + k, prev)
        rs = h.add("TaskStarted", 2.3 + k, r)
        prev = h.add("TaskFailed", 2.8 + k, rs, error="ZeroDivisionError",
                     cause=json.dumps({"errorType": "ZeroDivisionError", "errorMessage": "division by zero",
                                       "stackTrace": TRACE}))
    c = h.task("", "wc-funcsion-cleanup", 4.0, prev, action="end_run", status="failed")
    cs = h.add("TaskStarted", 4.0, c)
    h.add("TaskSucceeded", 4.2, cs, output=json.dumps({"StatusCode": 200, "Payload": {"run_id": "r-1"}}))
    h.add("ExecutionFailed", 4.3, 0, error="funcsion.RunFailed", cause="a task failed after its retries")
    return h


STAGES = [(0, "split", ["split"]), (1, "map", ["map_00", "map_01"]), (2, "reduce", ["reduce"])]
TASKS = ["split", "map_00", "map_01", "reduce"]


def test_a_history_reads_as_the_runs_attempts_errors_and_end() -> None:
    events = _history().events
    view = ExecutionView(TASKS, max_attempts=2)
    view.feed(events[:9])  # a poll half-way: map_01 failed once, map_00 still running
    assert view.running() == ["map_00"] and view.end is None
    rec = view.task_records(ended=False)
    assert rec["map_01"].state == "backoff" and rec["reduce"].state == "waiting"
    view.feed(list(reversed(events)))  # the rest, in any order; the ones seen already are skipped
    assert view.end is not None and view.end.status == "FAILED" and view.end.error == "funcsion.RunFailed"
    rec = view.task_records(ended=True)
    assert {n: (r.state, r.attempts) for n, r in rec.items()} == {
        "split": ("succeeded", 1), "map_00": ("succeeded", 1), "map_01": ("succeeded", 2), "reduce": ("failed", 2)}
    assert rec["map_01"].errors == ["ValueError: bad line"]
    assert view.failed_task() == "reduce"
    log = view.attempt_log().rows(T0)
    assert [t["outcome"] for t in log["map_01"]["tries"]] == ["error", "ok"]
    assert log["map_01"]["errors"][0]["request_id"] == "rid-m1a"
    assert log["split"]["tries"][0]["request_id"] == "rid-split"
    assert log["split"]["tries"][0]["started_at"] == pytest.approx(0.1) and "funcsion-cleanup" not in log
    err = log["reduce"]["errors"][-1]
    assert err["error"] == "ZeroDivisionError: division by zero"
    assert err["traceback"] == ("Traceback (most recent call last):\n" + TRACE[0] + "ZeroDivisionError: division by zero\n")


def test_the_bars_move_as_a_local_runs() -> None:
    sink = Sink()
    view = ExecutionView(TASKS, max_attempts=2, progress=StageProgress(STAGES, sink))
    view.feed(_history().events)
    bars = view.progress.bars if view.progress else {}
    assert [(b.done, b.retries, b.failed) for b in bars.values()] == [(1, 0, 0), (2, 1, 0), (0, 1, 1)]
    assert [c for c in sink.calls if c[0] == "close"] == [("close", 0, None), ("close", 1, None), ("close", 2, None)]


def test_an_abort_fails_what_ran_and_skips_the_rest() -> None:
    view = ExecutionView(TASKS)
    view.feed(_history().events[:8])  # map_00 and map_01 running
    rec = view.task_records(ended=False, aborted_at=T0 + 1.5, reason="aborted: interrupted by SIGINT")
    assert rec["map_00"].state == "failed" and rec["map_00"].errors == ["aborted: interrupted by SIGINT"]
    assert rec["reduce"].state == "skipped"
    tries = view.attempt_log(aborted_at=T0 + 1.5, reason="x").rows(T0)["map_00"]["tries"]
    assert tries[0]["outcome"] == "aborted" and tries[0]["finished_at"] == pytest.approx(1.5)


def test_the_cleanup_result_carries_the_outputs_and_codecs() -> None:
    h = Events()
    c = h.task("", "wc-funcsion-cleanup", 0.1, action="end_run", status="succeeded")
    cs = h.add("TaskStarted", 0.1, c)
    done = {"outputs": {"counts": "s3://b/p/outputs/r-1/counts"}, "output_codecs": {"counts": "json"}}
    h.add("TaskSucceeded", 0.2, cs, output=json.dumps({"StatusCode": 200, "Payload": done}))
    view = ExecutionView(["a"])
    view.feed(h.events)
    assert view.cleanup_result() == done and view.running() == []


def test_lambda_errors_read_as_the_local_executor_words_them() -> None:
    wrapped = json.dumps({"errorType": "TaskFailed", "errorMessage": "task a of run r-1 failed: KeyError: 'x'"})
    assert lambda_error("TaskFailed", wrapped)[0] == "task a of run r-1 failed: KeyError: 'x'"
    assert lambda_error("States.Timeout", None) == ("States.Timeout", None, None)
    assert lambda_error("States.TaskFailed", "not json") == ("States.TaskFailed: not json", None, None)


def test_report_lines_bill_before_the_history() -> None:
    line = ("REPORT RequestId: rid-split\tDuration: 402.25 ms\tBilled Duration: 403 ms\tMemory Size: 1024 MB\t"
            "Max Memory Used: 88 MB\tInit Duration: 180.50 ms\t")
    rep = parse_report_line(line)
    assert rep is not None and (rep.request_id, rep.billed_ms, rep.memory_mb, rep.init_ms) == (
        "rid-split", 403, 1024, 180.5)
    assert parse_report_line("START RequestId: x Version: $LATEST") is None
    view = ExecutionView(TASKS)
    view.feed(_history().events)
    invs = list(view.invocations.values())
    memory = {"wc-split": 512, "wc-map": 512, "wc-reduce": 256, "wc-funcsion-cleanup": 128}
    both = task_billing(invs, memory, {"rid-split": rep})
    assert both["invocations"] == 7 and REPORT_SOURCE in str(both["source"]) and HISTORY_SOURCE in str(both["source"])
    split = both["functions"]["wc-split"]  # type: ignore[index]
    assert split["billed_ms"] == 403 and split["mb_ms"] == 403 * 1024 and split["cold_starts"] == 1
    reduce = both["functions"]["wc-reduce"]  # type: ignore[index]
    assert reduce["billed_ms"] == 1000 and reduce["errors"] == 2 and reduce["mb_ms"] == 256 * 1000
    only = task_billing(invs, memory, {})
    assert only["source"] == HISTORY_SOURCE


def test_the_stack_outputs_contract() -> None:
    outputs = {"StateMachineArn": "arn:aws:states:us-east-1:1:stateMachine:s", "MetadataAddress": "10.0.0.5:7700",
               "DaemonAddress": "10.0.0.5:7800", "ServerName": "funcsion.internal", "CosUrl": "s3://b/p",
               "TokensSecretArn": "arn:aws:secretsmanager:us-east-1:1:secret:t", "StorageFunctionPrefix": "f-sion"}
    dep = deployment_from_outputs("funcsion-wc", outputs, daemon="127.0.0.1:17800")
    assert (dep.metadata, dep.daemon, dep.cos_url) == ("10.0.0.5:7700", "127.0.0.1:17800", "s3://b/p")
    with pytest.raises(DeploymentError, match=r"stack funcsion-wc has no output TokensSecretArn \(the Secrets"):
        deployment_from_outputs("funcsion-wc", {k: v for k, v in outputs.items() if k != "TokensSecretArn"})
    missing_md = {k: v for k, v in outputs.items() if k != "MetadataAddress"}
    assert deployment_from_outputs("s", missing_md, metadata="127.0.0.1:1").metadata == "127.0.0.1:1"
    with pytest.raises(DeploymentError, match="output DaemonAddress"):
        deployment_from_outputs("s", {**outputs, "DaemonAddress": "no-port"})
    with pytest.raises(DeploymentError, match="COS is S3"):
        deployment_from_outputs("s", {**outputs, "CosUrl": "file:///tmp/cos"})
    assert set(OUTPUT_KEYS) == set(outputs)
    assert default_stack_name("word count_v2.1") == "funcsion-word-count-v2-1"
    assert len(default_stack_name("x" * 300)) == 128
    assert parse_tokens('{"admin_token": "a", "store_token": "s"}', "arn") == ("a", "s")
    with pytest.raises(DeploymentError, match="has no store_token"):
        parse_tokens('{"admin_token": "a"}', "arn")
    with pytest.raises(DeploymentError, match="not a JSON object"):
        parse_tokens("a,b", "arn")


def test_an_execution_is_named_by_its_run() -> None:
    from sdk.aws_run._driver import execution_arn

    assert execution_arn("arn:aws:states:eu-west-1:123456789012:stateMachine:funcsion-wc", "r-7") == (
        "arn:aws:states:eu-west-1:123456789012:execution:funcsion-wc:r-7")


def test_the_exported_names() -> None:
    import sdk.aws_run as pkg

    assert sorted(pkg.__all__) == sorted([
        "AwsClients", "AwsDeployment", "AwsRun", "AwsRunOptions", "CLEANUP_TASK", "DeploymentError", "ExecutionEnd",
        "ExecutionView", "Invocation", "LambdaReport", "OUTPUT_KEYS", "REACH_HINT", "RunTimedOut", "connect",
        "default_stack_name", "deployment_from_outputs", "driver_endpoints", "lambda_error", "parse_report_line",
        "parse_tokens", "task_billing"])
    assert all(hasattr(pkg, n) for n in pkg.__all__)
