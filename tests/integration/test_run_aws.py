"""``funcsion run WDS --target aws`` end to end against moto: a real embedded
stack (metadata server, daemon, storage functions) whose COS is moto's S3
server over HTTP, the generated state machine in moto's Step Functions
interpreter, the real handlers carried out on the local Lambda platform
through ``LambdaBridge``, the Lambdas in moto's Lambda, and the deployment
found from a CloudFormation stack's Outputs with its tokens in Secrets
Manager. The CLI is driven in-process (``sdk.cli.main``), as a user runs it.

Covered: a successful word count (outputs through ``funcsion get``, the
report through ``funcsion report`` and ``funcsion runs``, nothing leaked,
each task's attempts), a handler that raises (the report names the task, the
error and the handler's traceback; the run ended, nothing leaked), SIGINT to
the driver (execution stopped, report ``aborted``, run ended) and
``--timeout``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import hdag
import wds
from sdk._config import Config
from sdk.aws_run import default_stack_name
from sdk.aws_run._billing import HISTORY_SOURCE
from sdk.cli import main
from sdk.cli._moto import MotoS3
from sdk.deploy import AslOptions, build_asl, lambda_name
from sdk.deploy.sfn_local import HandlerError, LambdaBridge
from sdk.local._executor import ExecutorOptions, LocalExecutor
from sdk.local._stack import Stack
from storage_functions.exceptions import InvocationFailed

from .test_wordcount_sfn import create_lambdas

HERE = Path(__file__).resolve().parent
WC = HERE.parents[1] / "examples" / "wordcount" / "wordcount.wds.json"
MOTO: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
REGION = "us-east-1"
#: one retry, a second apart: a failing task costs two attempts and a second of back-off
ASL = AslOptions(task_retry_attempts=1, task_retry_interval_s=1)


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    with MotoS3(prefix="cos") as m:
        yield m


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, s3: MotoS3) -> Iterator[Stack]:
    """The deployment's servers: an embedded stack whose COS is S3 (moto's server)."""
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("servers")), env={}, cos_url=s3.url())
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        yield st


@dataclass
class Deployment:
    stack_name: str
    graph: hdag.HDAG
    bridge: LambdaBridge
    executor: LocalExecutor
    sfn: Any


@contextmanager
def deployed(stack: Stack, wds_path: Path, params: dict[str, int], *, stack_name: str | None = None,
             gate: Callable[[str, dict[str, Any]], Any] | None = None,
             outputs: dict[str, str] | None = None) -> Iterator[Deployment]:
    """Inside ``mock_aws``: the workflow's Lambdas and state machine, the tokens' secret and a
    CloudFormation stack whose Outputs name them and the servers; handlers carried out on the
    local platform (``gate(function, payload)`` runs first, on moto's thread: a result other than
    None is the invocation's, and the handler does not run)."""
    h = hdag.build(wds.load(wds_path, params=params))
    app = h.workflow.app
    cleanup = lambda_name(app, "funcsion-cleanup")
    entries = sorted({f.template or f.name for f in h.functions.values()})
    role, arns = create_lambdas(h, [lambda_name(app, e) for e in entries] + [cleanup])
    asl = build_asl(h, lambda e: arns[lambda_name(app, e)], arns[cleanup], ASL)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    sm = sfn.create_state_machine(name=f"funcsion-{app}", definition=json.dumps(asl), roleArn=role)["stateMachineArn"]
    tokens = json.dumps({"admin_token": stack.admin_token, "store_token": stack.store.token})
    secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name=f"funcsion-{app}-tokens", SecretString=tokens)["ARN"]
    ep = stack.endpoints
    values = {"StateMachineArn": sm, "MetadataAddress": ep.metadata, "DaemonAddress": ep.daemon,
              "ServerName": "localhost", "CosUrl": stack.config.resolved_cos_url, "TokensSecretArn": secret,
              "StorageFunctionPrefix": "funcsion-storage", **(outputs or {})}
    template = {"Resources": {f"Logs{i}": {"Type": "AWS::Logs::LogGroup",
                                           "Properties": {"LogGroupName": f"/aws/lambda/{lambda_name(app, e)}",
                                                          "RetentionInDays": 7}}
                              for i, e in enumerate(entries)},
                "Outputs": {k: {"Value": v} for k, v in values.items() if v}}
    name = stack_name or default_stack_name(app)
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=name, TemplateBody=json.dumps(template))
    ex = LocalExecutor(h, ep, code_dir=wds_path.parent, options=ExecutorOptions(progress=False))
    ex.platform.deploy(cleanup, "sdk._cleanup:handler", memory_mb=256, timeout_s=60)

    def invoke(name: str, payload: dict[str, Any]) -> Any:
        if gate is not None and (held := gate(str(payload.get("function", "")), payload)) is not None:
            return held
        try:
            return ex.platform.invoke(name, payload)
        except InvocationFailed as exc:
            raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc), exc.stack_trace) from None

    try:
        with LambdaBridge(invoke) as bridge:
            yield Deployment(name, h, bridge, ex, sfn)
    finally:
        ex.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _last_json(out: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return doc


def _run_args(wds_path: Path, state_dir: Path, *extra: str) -> list[str]:
    return ["run", str(wds_path), "--target", "aws", "--region", REGION, "--state-dir", str(state_dir),
            "--poll", "0.1", "--json", *extra]


def _summary(stack: Stack, run_id: str) -> dict[str, Any]:
    with stack.client() as c:
        return next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run_id)


def _execution(sfn: Any, arn: str) -> dict[str, Any]:
    return dict(sfn.describe_execution(executionArn=arn))


def test_wordcount_on_aws_reports_like_a_local_run(stack: Stack, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = "to be or not to be\nthat is the question\n" * 50
    book = tmp_path / "book.txt"
    book.write_text(text)
    state = tmp_path / "driver"
    with mock_aws(config=MOTO), deployed(stack, WC, {"mappers": 2}) as d:
        code, out, err = _cli(capsys, *_run_args(WC, state, "-p", "mappers=2", "--input", f"raw_text={book}"))
        doc = _last_json(out)
        assert code == 0, err
        assert _execution(d.sfn, doc["target"]["execution_arn"])["status"] == "SUCCEEDED"
    assert doc["status"] == "succeeded" and doc["error"] is None
    assert doc["target"]["stack_name"] == "funcsion-word-count" and doc["target"]["execution_arn"].endswith(
        f":{doc['run_id']}")
    # each task: one attempt that succeeded, with its times from the history
    assert set(doc["tasks"]) == set(d.graph.functions)
    for name, t in doc["tasks"].items():
        assert t["state"] == "succeeded" and t["attempts"] == 1, (name, t)
        assert [a["outcome"] for a in t["tries"]] == ["ok"] and t["errors"] == []
        assert 0 <= t["started_at"] <= t["finished_at"] <= doc["wall_s"]
        assert t["log"].startswith("CloudWatch Logs /aws/lambda/word-count-")
    # nothing leaked; the intermediates were freed by commits while the run went on
    assert doc["memory"]["leaked_bytes"] == 0
    assert doc["memory"]["source"] == "storage functions" and doc["memory"]["peak_bytes"] > 0  # the daemon's ledger
    freed = {n for n, o in doc["objects"].items() if o["state"] == "freed"}
    assert set(d.graph.intermediates) <= freed
    summary = _summary(stack, doc["run_id"])
    assert summary["state"] == "ended" and summary["outcome"] == "succeeded"
    assert summary["input_bytes"] == len(text.encode())        # start_run carried the input's size (lifetime model)
    # the cost: task bills from the history's timings (moto keeps no REPORT lines), storage from the daemon
    assert doc["billing"]["source"] == HISTORY_SOURCE == doc["cost"]["sources"]["tasks"]
    assert doc["billing"]["invocations"] == len(d.graph.functions) + 1  # and the cleanup task
    assert "daemon" in doc["cost"]["sources"]["storage_functions"]
    # the saved report, `funcsion report`, `runs` and `get` (through the stack's S3 COS)
    saved = json.loads((state / "runs" / f"{doc['run_id']}.json").read_text())
    assert saved["run_id"] == doc["run_id"] and saved["target"] == doc["target"]
    code, out, _ = _cli(capsys, "report", doc["run_id"], "--state-dir", str(state))
    assert code == 0 and f"run {doc['run_id']} of" in out and "succeeded" in out and "leaked 0 bytes" in out
    code, out, _ = _cli(capsys, "runs", "--state-dir", str(state))
    assert code == 0 and doc["run_id"] in out
    assert doc["outputs"]["word_counts"].startswith("s3://")
    code, out, err = _cli(capsys, "get", doc["run_id"], "word_counts", "--state-dir", str(state))
    assert code == 0, err
    assert json.loads(out) == dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))


def _bad_workflow(tmp_path: Path, mode: str) -> Path:
    wf = tmp_path / "badwf"
    shutil.copytree(HERE / "badwf", wf)
    (wf / "BAD_MODE").write_text(mode)
    return wf / "bad.wds.json"


def test_a_failing_handler_is_reported_with_its_traceback(stack: Stack, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_workflow(tmp_path, "raises")
    src = tmp_path / "src.txt"
    src.write_text("hello")
    with mock_aws(config=MOTO), deployed(stack, bad, {}) as d:
        code, out, err = _cli(capsys, *_run_args(bad, tmp_path / "driver", "--input", f"src={src}"))
        doc = _last_json(out)
        assert _execution(d.sfn, doc["target"]["execution_arn"])["status"] == "FAILED"
    assert code == 1
    assert doc["status"] == "failed" and doc["failed_task"] == "producer"
    assert doc["error"].startswith("ZeroDivisionError: division by zero"), doc["error"]
    producer = doc["tasks"]["producer"]
    assert producer["state"] == "failed" and producer["attempts"] == ASL.task_retry_attempts + 1
    last = producer["errors"][-1]
    assert last["error"].startswith("ZeroDivisionError") and "handlers.py" in last["traceback"]
    assert "_divide" in last["traceback"] and last["traceback"].rstrip().endswith("division by zero")
    assert doc["tasks"]["consumer"]["state"] == "skipped" and doc["tasks"]["consumer"]["attempts"] == 0
    assert doc["memory"]["leaked_bytes"] == 0 and doc["outputs"] == {}
    assert _summary(stack, doc["run_id"])["state"] == "ended"
    # stderr: the failure line and the handler's traceback, no traceback of the driver's own
    assert "task producer of run" in err and "ZeroDivisionError" in err and "botocore" not in err
    code, out, _ = _cli(capsys, "report", doc["run_id"], "--state-dir", str(tmp_path / "driver"))
    assert code == 0 and "_divide" in out


@dataclass
class Gate:
    """Holds the producer's invocation (on moto's thread) until released, then lets it return
    without running the handler: a Lambda still busy when its execution was stopped, whose end
    AWS no longer waits for (moto's interpreter does: it shows the stop once the call is back,
    and would record a failure of the call as the execution's)."""

    entered: threading.Event
    release: threading.Event
    left: threading.Event

    def __call__(self, function: str, _payload: dict[str, Any]) -> Any:
        if function != "producer":
            return None
        self.entered.set()
        try:
            self.release.wait(60)
        finally:
            self.left.set()
        return {}


def _gate() -> Gate:
    return Gate(threading.Event(), threading.Event(), threading.Event())


def _assert_stopped(stack: Stack, d: Deployment, doc: dict[str, Any], gate: Gate) -> None:
    """The run ended and reported; the execution was stopped (``Gate``) while the producer ran."""
    assert gate.entered.is_set(), "the run stopped before its producer ran"
    gate.release.set()
    assert gate.left.wait(30)
    arn = doc["target"]["execution_arn"]
    deadline = time.monotonic() + 30
    while (status := _execution(d.sfn, arn)["status"]) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)  # moto's interpreter thread notices the stop on its own
    assert status == "ABORTED"
    types = [e["type"] for e in d.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]]
    assert "ExecutionAborted" in types and "ExecutionSucceeded" not in types
    summary = _summary(stack, doc["run_id"])
    assert summary["state"] == "ended" and summary["outcome"] == doc["status"]
    assert doc["memory"]["leaked_bytes"] == 0
    producer = doc["tasks"]["producer"]
    assert producer["state"] == "failed" and [a["outcome"] for a in producer["tries"]] == ["aborted"]
    assert doc["tasks"]["consumer"]["state"] == "skipped"


def test_sigint_stops_the_execution_and_ends_the_run(stack: Stack, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_workflow(tmp_path, "none")
    src = tmp_path / "src.txt"
    src.write_text("hello")
    gate = _gate()

    def interrupt() -> None:
        if gate.entered.wait(30):  # the producer runs: Ctrl-C the driver
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt, daemon=True)
    with mock_aws(config=MOTO), deployed(stack, bad, {}, gate=gate) as d:
        sender.start()
        try:
            code, out, err = _cli(capsys, *_run_args(bad, tmp_path / "driver", "--input", f"src={src}"))
        finally:
            gate.release.set()
            sender.join(30)
        doc = _last_json(out)
        _assert_stopped(stack, d, doc, gate)
    assert code == 1 and doc["status"] == "aborted"
    assert doc["error"] == "interrupted by SIGINT while producer ran", doc["error"]
    assert "SIGINT: stopping the run" in err


def test_timeout_stops_the_execution_and_ends_the_run(stack: Stack, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_workflow(tmp_path, "none")
    src = tmp_path / "src.txt"
    src.write_text("hello")
    gate = _gate()
    with mock_aws(config=MOTO), deployed(stack, bad, {}, gate=gate) as d:
        try:  # long enough for the producer to start on a loaded machine; it is held until released
            code, out, err = _cli(capsys, *_run_args(bad, tmp_path / "driver", "--input", f"src={src}",
                                                     "--timeout", "3"))
        finally:
            gate.release.set()
        doc = _last_json(out)
        _assert_stopped(stack, d, doc, gate)
    assert code == 1 and doc["status"] == "failed"
    assert "did not end within --timeout 3 s" in doc["error"]


def test_a_failure_of_the_drivers_own_call_ends_the_run(stack: Stack, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The stack names a state machine that is gone: the run started and its input was put, so
    it is ended (nothing leaked) and reported ``failed`` with the AWS error in one line."""
    bad = _bad_workflow(tmp_path, "none")
    src = tmp_path / "src.txt"
    src.write_text("hello")
    gone = "arn:aws:states:us-east-1:123456789012:stateMachine:gone"
    with mock_aws(config=MOTO), deployed(stack, bad, {}, outputs={"StateMachineArn": gone}):
        code, out, err = _cli(capsys, *_run_args(bad, tmp_path / "driver", "--input", f"src={src}"))
    doc = _last_json(out)
    assert code == 1 and doc["status"] == "failed" and doc["failed_task"] is None
    assert doc["error"].startswith(f"WorkflowDeployError: starting an execution of {gone} for run {doc['run_id']}: "
                                   "AWS refused StartExecution: StateMachineDoesNotExist"), doc["error"]
    assert doc["target"]["execution_arn"] is None and doc["memory"]["leaked_bytes"] == 0
    assert doc["tasks"] == {}  # none ran (as a local run whose tasks never started)
    summary = _summary(stack, doc["run_id"])
    assert summary["state"] == "ended" and summary["outcome"] == "failed"
    assert "Traceback" not in err


def test_abort_from_another_thread_stops_it_as_ctrl_c_does(stack: Stack, tmp_path: Path) -> None:
    """``AwsRun.abort``: the hook a program driving runs uses (the CLI's signals do the same)."""
    from sdk.aws_run import AwsRun, AwsRunOptions
    from sdk.local._run import prepare_run

    bad = _bad_workflow(tmp_path, "none")
    src = tmp_path / "src.txt"
    src.write_text("hello")
    gate = _gate()
    cfg = Config.load(state_dir=str(tmp_path / "driver"), env={})
    with mock_aws(config=MOTO), deployed(stack, bad, {}, gate=gate) as d:
        run = AwsRun(prepare_run(bad, inputs={"src": str(src)}), config=cfg,
                     options=AwsRunOptions(region=REGION, poll_s=0.1, progress=False))

        def abort() -> None:
            if gate.entered.wait(30):  # the producer runs
                run.abort("the test's abort()")

        aborter = threading.Thread(target=abort)
        aborter.start()
        try:
            report = run.run()
        finally:
            gate.release.set()
            aborter.join(30)
        doc = report.to_dict()
        _assert_stopped(stack, d, doc, gate)
    assert doc["status"] == "aborted" and doc["error"] == "interrupted by the test's abort() while producer ran"
    assert report.saved_to is not None and Path(report.saved_to).is_file()


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory, s3: MotoS3) -> Iterator[tuple[Stack, Path]]:
    """The deployment's servers speaking TLS, with a certificate from ``funcsion certs``' code."""
    from sdk.cli.certs_cmd import make_certs

    certs = make_certs(tmp_path_factory.mktemp("certs"), ["127.0.0.1", "localhost"])
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("tls-servers")), env={}, cos_url=s3.url(),
                      tls_cert=str(certs["server.pem"]), tls_key=str(certs["server.key"]),
                      tls_ca=str(certs["ca.pem"]))
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        yield st, certs["ca.pem"]


def test_wordcount_on_aws_over_tls(tls_stack: tuple[Stack, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The driver checks the servers against the deployment's CA (``--tls-ca``) and hands it to
    every task in the execution input, so the tasks' metadata and data calls are TLS too."""
    stack, ca = tls_stack
    text = "a rose is a rose is a rose\n" * 40
    book = tmp_path / "book.txt"
    book.write_text(text)
    with mock_aws(config=MOTO), deployed(stack, WC, {"mappers": 2}) as d:
        code, out, err = _cli(capsys, *_run_args(WC, tmp_path / "driver", "-p", "mappers=2", "--input",
                                                 f"raw_text={book}", "--tls-ca", str(ca)))
        assert code == 0, err
        doc = _last_json(out)
    assert doc["status"] == "succeeded" and doc["memory"]["leaked_bytes"] == 0
    pem = ca.read_text()
    tasks = [p for _, p in d.bridge.calls if "function" in p]
    assert tasks and all(p["funcsion"]["tls_ca"] == pem for _, p in d.bridge.calls)
    assert _summary(stack, doc["run_id"])["state"] == "ended"
    code, out, err = _cli(capsys, "get", doc["run_id"], "word_counts", "--state-dir", str(tmp_path / "driver"))
    assert code == 0, err
    assert json.loads(out) == dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))


def test_an_aws_run_off_loopback_without_the_ca_is_refused(stack: Stack, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Servers off loopback speak TLS: a driver given no CA is told which file to give before it
    connects anywhere (the address below is never dialled), and no run starts."""
    with mock_aws(config=MOTO), deployed(stack, WC, {"mappers": 2}):
        code, _, err = _cli(capsys, *_run_args(WC, tmp_path / "driver", "-p", "mappers=2",
                                               "--metadata", "10.0.3.7:7917", "--daemon", "10.0.3.7:7918"))
    assert code == 1
    [line] = err.strip().splitlines()
    assert line.startswith("funcsion run: the metadata server at 10.0.3.7:7917 speaks TLS") and "--tls-ca" in line
    assert not (tmp_path / "driver" / "runs").exists() or not list((tmp_path / "driver" / "runs").iterdir())
