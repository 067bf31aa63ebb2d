"""The task zip tested as it deploys: ``plan_workflow`` builds it (the code
``funcsion deploy WDS --target aws`` runs), and each task Lambda runs it alone
in a bare interpreter (``python -I -S``) with a layer directory holding only
``TASK_LAYER_PACKAGES`` and their dependencies, plus boto3 (Lambda's runtime
ships it). The generated state machine runs under moto's ASL interpreter and
sends each Lambda the exact payload it sends on AWS (``LambdaBridge``); the
Lambdas are ``ZipInvoker`` functions with the handler the plan configures.
The word count runs against the real embedded stack, the cleanup handler from
the zip ends the run, the outputs are readable, and the first-party modules
the tasks imported equal the zip's modules (both ways).
"""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sdk.deploy import start_execution
from sdk.deploy._plan import plan_workflow
from sdk.deploy._zip import TASK_LAYER_PACKAGES
from sdk.deploy.sfn_local import HandlerError, LambdaBridge
from sdk.local._stack import Stack
from storage_functions.cos import open_cos
from storage_functions.exceptions import InvocationFailed
from tests.functional._bare_lambda import (
    LAMBDA_RUNTIME_PACKAGES, ZipInvoker, check_allow_list, failures, package_dir,
)

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"
MOTO = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
REGION = "us-east-1"

pytestmark = pytest.mark.slow


@mock_aws(config=MOTO)
def test_task_zip_as_deployed_runs_wordcount_and_the_cleanup_ends_the_run(stack: Stack, tmp_path: Path) -> None:
    params = {"mappers": 2, "reducers": 2}
    text = "to be or not to be\nthat is the question\n" * 100
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="funcsion-tasks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    plan = plan_workflow(WC, role_arn=role, params=params)
    zip_path = tmp_path / "task.zip"
    zip_path.write_bytes(plan.zip)
    assert "inputs.py" not in zipfile.ZipFile(io.BytesIO(plan.zip)).namelist()
    layer = package_dir(tmp_path / "layer", *TASK_LAYER_PACKAGES)
    runtime = package_dir(tmp_path / "runtime", *LAMBDA_RUNTIME_PACKAGES)
    # the Lambdas as the plan makes them: moto keeps the records, ZipInvoker runs the code
    lam = boto3.client("lambda", region_name=REGION)
    arns = {f.entry: lam.create_function(FunctionName=f.name, Code={"ZipFile": plan.zip}, **f.config)["FunctionArn"]
            for f in plan.functions}
    invokers = {f.name: ZipInvoker(zip_path, f.config["Handler"], paths=(layer, runtime), env={},
                                   log_dir=tmp_path, memory_mb=f.config["MemorySize"], timeout_s=f.config["Timeout"])
                for f in plan.functions}

    def invoke(name: str, payload: dict[str, Any]) -> Any:
        try:
            return invokers[name].invoke(name, payload)
        except InvocationFailed as exc:
            raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc)) from None

    sfn = boto3.client("stepfunctions", region_name=REGION)
    try:
        with stack.client() as c:
            run = c.start_run(c.register_workflow(WC.read_text(), params, str(WC)))
            run.put("raw_text", text)
            with LambdaBridge(invoke) as bridge:
                sm = sfn.create_state_machine(name="wc-zip", definition=json.dumps(plan.definition(arns)),
                                              roleArn=role)["stateMachineArn"]
                ex_arn = start_execution(sm, run, sfn_client=sfn)
                deadline = time.monotonic() + 120
                while (status := sfn.describe_execution(executionArn=ex_arn)["status"]) == "RUNNING":
                    assert time.monotonic() < deadline
                    time.sleep(0.05)  # moto's interpreter runs in its own thread; nothing to wait on but its status
                events = sfn.get_execution_history(executionArn=ex_arn, maxResults=1000)["events"]
            assert status == "SUCCEEDED", [e for e in events if "Failed" in e["type"]]
            assert {p["function"] for _, p in bridge.calls if "function" in p} == set(plan.graph.functions)
            assert any(p.get("action") == "end_run" and p.get("status") == "succeeded" for _, p in bridge.calls)
            run.close()
            summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run.run_id)
            assert summary["state"] == "ended" and summary["outcome"] == "succeeded"  # the cleanup from the zip
            assert summary["live_bytes"] == 0
    finally:
        for inv in invokers.values():
            inv.close()
        for client in (sfn, lam, iam):
            client.close()
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        got = json.loads(cos.get(f"outputs/{run.run_id}/word_counts"))
    finally:
        cos.close()
    assert got == dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))
    outcomes = [o for inv in invokers.values() for o in inv.outcomes]
    assert not failures(outcomes), failures(outcomes)
    check_allow_list(plan.zip, zip_path, [r for _, r in outcomes if r is not None])
