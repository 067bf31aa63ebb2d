"""The generated ASL runs under moto's interpreter (an ASL engine this project
did not write) with tasks answered through ``LambdaBridge``."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import hdag
import wds
from sdk.deploy import build_asl, lambda_name
from sdk.deploy.sfn_local import HandlerError, LambdaBridge
from storage_functions.auth import mint_run_token

MOTO = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
REGION = "us-east-1"


def deploy(h: hdag.HDAG) -> tuple[str, dict[str, str]]:
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="funcsion-sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = boto3.client("lambda", region_name=REGION)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("h.py", "def handler(e, c):\n    return e\n")
    arns = {}
    for entry in {f.template or f.name for f in h.functions.values()} | {"cleanup"}:
        arns[entry] = lam.create_function(FunctionName=lambda_name(h.workflow.app, entry), Runtime="python3.11",
                                          Role=role, Handler="h.handler",
                                          Code={"ZipFile": buf.getvalue()})["FunctionArn"]
    return role, arns


def context(run_id: str) -> dict[str, str]:
    return {"token": "t", "store_token": mint_run_token("store-secret", run_id)}


def run(h: hdag.HDAG, role: str, arns: dict[str, str], name: str,
        ctx: dict[str, str] | None = None) -> tuple[str, list[dict[str, Any]]]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    asl = build_asl(h, arns.__getitem__, arns["cleanup"])
    sm = sfn.create_state_machine(name=f"sm-{name}", definition=json.dumps(asl), roleArn=role)["stateMachineArn"]
    ex = sfn.start_execution(stateMachineArn=sm, name=name,
                             input=json.dumps({"funcsion": context(name) if ctx is None else ctx}))["executionArn"]
    deadline = time.time() + 60
    while (status := sfn.describe_execution(executionArn=ex)["status"]) == "RUNNING" and time.time() < deadline:
        time.sleep(0.05)
    return status, sfn.get_execution_history(executionArn=ex, maxResults=1000)["events"]


@mock_aws(config=MOTO)
def test_wordcount_asl_runs_tasks_in_order_through_the_bridge(example_paths: dict[str, Path]) -> None:
    h = hdag.build(wds.load(example_paths["wordcount"], params={"mappers": 3}))
    role, arns = deploy(h)
    done: list[str] = []
    lock = threading.Lock()

    def invoke(fn_name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("action") == "end_run":
            return {"ended": payload["run_id"], "status": payload["status"]}
        f = payload["function"]
        with lock:
            missing = [p for p in h.function_graph().predecessors(f) if p not in done]
            assert not missing, f"{f} ran before {missing}"
            done.append(f)
        assert fn_name == lambda_name("word-count", h.functions[f].template or f)
        return {"ok": f}

    with LambdaBridge(invoke) as bridge:
        status, events = run(h, role, arns, "r-wc")
    assert status == "SUCCEEDED"
    assert sorted(done) == sorted(h.functions)
    assert all(p["run_id"] == "r-wc" and p["funcsion"] == context("r-wc") for _, p in bridge.calls)
    assert bridge.calls[-1][1]["status"] == "succeeded"
    kinds = {e["type"] for e in events}
    assert {"MapStateStarted", "MapStateSucceeded", "TaskSucceeded"} <= kinds


@mock_aws(config=MOTO)
def test_failed_task_is_retried_then_cleanup_runs(fig9_path: Path) -> None:
    h = hdag.build(wds.load(fig9_path))
    role, arns = deploy(h)
    attempts: dict[str, int] = {}

    def invoke(fn_name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("action") == "end_run":
            return {"status": payload["status"]}
        f = payload["function"]
        attempts[f] = attempts.get(f, 0) + 1
        if f == "F3" and attempts[f] == 1:
            raise HandlerError("TaskError", "transient")  # retried, then succeeds
        if f == "F5":
            raise HandlerError("TaskError", "always broken")
        return {"ok": f}

    with LambdaBridge(invoke) as bridge:
        status, events = run(h, role, arns, "r-fail")
    assert status == "FAILED"
    assert attempts["F3"] == 2 and attempts["F5"] == 3  # 1 try + 2 retries on States.TaskFailed
    assert "F6" not in attempts
    assert bridge.calls[-1][1]["action"] == "end_run" and bridge.calls[-1][1]["status"] == "failed"
    assert any(e["type"] == "ExecutionFailed" for e in events)


@mock_aws(config=MOTO)
def test_an_error_no_retry_can_fix_is_not_retried(fig9_path: Path) -> None:
    h = hdag.build(wds.load(fig9_path))
    role, arns = deploy(h)
    attempts: dict[str, int] = {}

    def invoke(fn_name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("action") == "end_run":
            return {"status": payload["status"]}
        f = payload["function"]
        attempts[f] = attempts.get(f, 0) + 1
        if f == "F3":
            raise HandlerError("FatalTaskError", "task F3 of run r-fatal failed: MissingOutputs: ...")
        return {"ok": f}

    with LambdaBridge(invoke) as bridge:
        status, _ = run(h, role, arns, "r-fatal")
    assert status == "FAILED"
    assert attempts["F3"] == 1
    assert bridge.calls[-1][1]["status"] == "failed"


@pytest.mark.parametrize("ctx", [
    {"token": "t", "store_token": "store-secret"},                                  # the store-wide token
    {"token": "t", "store_token": mint_run_token("store-secret", "r-tok"), "admin_token": "admin"},
    {"token": "t"},                                                                   # no store token at all
], ids=["store-wide", "admin", "missing"])
@mock_aws(config=MOTO)
def test_an_execution_without_run_scoped_tokens_runs_no_task(fig9_path: Path, ctx: dict[str, str]) -> None:
    h = hdag.build(wds.load(fig9_path))
    role, arns = deploy(h)
    with LambdaBridge(lambda n, p: {"ok": True}) as bridge:
        status, events = run(h, role, arns, "r-tok", ctx)
    assert status == "FAILED" and bridge.calls == []
    failed = next(e for e in events if e["type"] == "ExecutionFailed")
    assert failed["executionFailedEventDetails"]["error"] == "funcsion.TokensRefused"


def test_bridge_unregisters_its_hook() -> None:
    with LambdaBridge(lambda n, p: {}) as bridge:
        pass
    assert bridge.calls == []
    with pytest.raises(Exception):  # noqa: B017 - outside the bridge the call goes to (absent) AWS
        boto3.client("lambda", region_name=REGION, endpoint_url="http://127.0.0.1:9",
                     config=__import__("botocore.config").config.Config(
                         retries={"max_attempts": 0}, connect_timeout=0.5)).invoke(FunctionName="x")
