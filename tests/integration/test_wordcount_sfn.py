"""The word-count workflow through moto's ASL interpreter (a Step Functions
engine this project did not write): the generated state machine calls the
real handlers on the local Lambda platform through ``LambdaBridge``."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

import hdag
import wds
from sdk.deploy import build_asl, lambda_name, start_execution
from sdk.deploy.sfn_local import HandlerError, LambdaBridge
from sdk.local._executor import ExecutorOptions, LocalExecutor
from sdk.local._stack import Stack
from storage_functions.auth import token_scope
from storage_functions.cos import open_cos
from storage_functions.exceptions import InvocationFailed

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"
MOTO = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
REGION = "us-east-1"


def create_lambdas(h: hdag.HDAG, names: list[str]) -> tuple[str, dict[str, str]]:
    import io
    import zipfile

    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="funcsion-wc", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = boto3.client("lambda", region_name=REGION)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("handlers.py", "# the real code runs on the local platform\n")
    arns = {n: lam.create_function(FunctionName=n, Runtime="python3.11", Role=role, Handler="handlers.x",
                                   Code={"ZipFile": buf.getvalue()})["FunctionArn"] for n in names}
    return role, arns


@mock_aws(config=MOTO)
def test_wordcount_under_motos_asl_interpreter(stack: Stack, tmp_path: Path) -> None:
    text = "to be or not to be\nthat is the question\n" * 200
    h = hdag.build(wds.load(WC, params={"mappers": 3}))
    cleanup = lambda_name("word-count", "funcsion-cleanup")
    entries = sorted({f.template or f.name for f in h.functions.values()})
    role, arns = create_lambdas(h, [lambda_name("word-count", e) for e in entries] + [cleanup])
    asl = build_asl(h, lambda e: arns[lambda_name("word-count", e)], arns[cleanup])
    with stack.client() as c:
        key = c.register_workflow(WC.read_text(), {"mappers": 3}, str(WC))
        run = c.start_run(key)
        run.put("raw_text", text)
        ex = LocalExecutor(h, c.endpoints, code_dir=WC.parent, options=ExecutorOptions(progress=False))
        ex.platform.deploy(cleanup, "sdk._cleanup:handler", memory_mb=256, timeout_s=60)

        def invoke(name: str, payload: dict[str, Any]) -> Any:
            try:
                return ex.platform.invoke(name, payload)
            except InvocationFailed as exc:
                raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc)) from None

        sfn = boto3.client("stepfunctions", region_name=REGION)
        try:
            with LambdaBridge(invoke) as bridge:
                sm = sfn.create_state_machine(name="wc", definition=json.dumps(asl), roleArn=role)["stateMachineArn"]
                ex_arn = start_execution(sm, run, sfn_client=sfn)
                deadline = time.time() + 120
                while (status := sfn.describe_execution(executionArn=ex_arn)["status"]) == "RUNNING":
                    assert time.time() < deadline
                    time.sleep(0.05)
                events = sfn.get_execution_history(executionArn=ex_arn, maxResults=1000)["events"]
        finally:
            ex.close()
        assert status == "SUCCEEDED", [e for e in events if "Failed" in e["type"]]
        called = {p["function"] for _, p in bridge.calls if "function" in p}
        assert called == set(h.functions)
        # every task and the cleanup task held the run's tokens only
        for _, p in bridge.calls:
            assert token_scope(p["funcsion"]["store_token"], stack.store.token) == f"{run.run_id}/"
            assert "admin_token" not in p["funcsion"] and stack.admin_token not in json.dumps(p)
            assert stack.store.token not in json.dumps(p)
        assert {"MapStateSucceeded", "TaskSucceeded"} <= {e["type"] for e in events}
        run.close()
        # the cleanup task copied the output and ended the run: every task committed, nothing is held
        summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run.run_id)
        assert summary["state"] == "ended" and summary["outcome"] == "succeeded"
        assert set(summary["committed_functions"]) == set(h.functions)
        assert summary["live_bytes"] == 0 and summary["allocated_bytes"] == 0
        assert summary["counters"]["freed"] >= len(h.intermediates) + 1
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        got = json.loads(cos.get(f"outputs/{run.run_id}/word_counts"))
    finally:
        cos.close()
    assert got == dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))
