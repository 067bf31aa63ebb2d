"""Deploy a workflow to AWS: one Lambda per WDS entry (replicas of a
templated entry share one), a cleanup Lambda, and the Step Functions state
machine generated from the HDAG, all created or updated through boto3; and
start a run's execution (``start_execution``): the driver, which holds the
store token, mints the run's store token and passes only run-scoped tokens
in the execution input (the state machine refuses anything else). Tasks
need no S3 permission: the daemon reads and writes their COS objects.

What gets made is planned without AWS (``sdk.deploy._plan``, also behind
``--dry-run``). The task zip (``sdk.deploy._zip``, from an allow-list) holds the handler
modules beside the WDS with the files they import (not ``inputs.py``) and the code a task
imports. Third-party
packages the SDK needs in a Lambda (``TASK_LAYER_PACKAGES``: thrift, pyeclib,
msgpack, aws-lambda-powertools) come from Lambda layers named with
``layers``. Reproducible to the byte, so an unchanged workflow redeploys
nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wds
from storage_functions.deploy import DeployResult, upsert_function

from .._client import Client
from ._aws_errors import describe_aws_error, is_aws_error
from ._plan import plan_workflow
from ._zip import build_task_zip

__all__ = ["build_task_zip", "deploy_workflow", "WorkflowDeployment", "CLEANUP_ENTRY", "WorkflowDeployError",
           "execution_input", "start_execution"]

CLEANUP_ENTRY = wds.CLEANUP_ENTRY  # validation keeps every WDS entry off its Lambda name
_ARN_ROLE = re.compile(r"^arn:aws[a-zA-Z-]*:iam::\d{12}:role/.+$")


class WorkflowDeployError(wds.FuncsionError):
    pass


@dataclass(frozen=True)
class WorkflowDeployment:
    workflow: str
    functions: list[DeployResult]
    state_machine_arn: str
    state_machine_action: str

    def to_dict(self) -> dict[str, Any]:
        return {"workflow": self.workflow, "state_machine_arn": self.state_machine_arn,
                "state_machine": self.state_machine_action,
                "functions": [{"name": r.name, "action": r.action, "arn": r.arn} for r in self.functions]}


def deploy_workflow(wds_path: str | Path, *, role_arn: str, state_machine_role_arn: str | None = None,
                    params: Mapping[str, int] | None = None, layers: Sequence[str] = (),
                    memory_mb: int = 512, timeout_s: int = 300, runtime: str = "python3.12",
                    max_concurrency: int = 0, lambda_client: Any = None, sfn_client: Any = None,
                    region_name: str | None = None, limits: wds.Limits | None = None,
                    endpoint_url: str | None = None) -> WorkflowDeployment:
    """Create or update the workflow's Lambdas and state machine (``plan_workflow``). Idempotent.
    ``limits`` bound the WDS (default ``wds.Limits()``). An error of AWS or botocore (no
    credentials, no region, an unreachable endpoint, a refusal) is a ``WorkflowDeployError``
    of one line naming the step (``describe_aws_error``)."""
    if not _ARN_ROLE.match(role_arn):
        raise WorkflowDeployError(f"role ARN {role_arn!r} is not an IAM role ARN "
                                  "(arn:aws:iam::<12-digit account>:role/<name>); set role_arn or --role-arn")
    plan = plan_workflow(wds_path, role_arn=role_arn, params=params, layers=layers, memory_mb=memory_mb,
                         timeout_s=timeout_s, runtime=runtime, max_concurrency=max_concurrency, limits=limits)
    import boto3

    def failed(step: str, exc: BaseException) -> WorkflowDeployError:
        return WorkflowDeployError(f"{step}: {describe_aws_error(exc, region=region_name, endpoint_url=endpoint_url)}")

    try:
        lam = lambda_client or boto3.client("lambda", region_name=region_name, endpoint_url=endpoint_url)
        sfn = sfn_client or boto3.client("stepfunctions", region_name=region_name, endpoint_url=endpoint_url)
    except Exception as exc:  # botocore: no region, a bad endpoint URL
        if is_aws_error(exc):
            raise failed("creating the AWS clients", exc) from exc
        raise
    results: list[DeployResult] = []
    arns: dict[str, str] = {}
    for f in plan.functions:
        try:
            r = upsert_function(lam, f.name, plan.zip, f.config)
        except Exception as exc:
            if is_aws_error(exc):
                raise failed(f"deploying Lambda {f.name} (entry {f.entry!r})", exc) from exc
            raise
        results.append(r)
        arns[f.entry] = r.arn
    definition = json.dumps(plan.definition(arns))
    sm_name = plan.state_machine_name
    sm_role = state_machine_role_arn or role_arn
    try:
        existing = [m for m in sfn.list_state_machines()["stateMachines"] if m["name"] == sm_name]
        if existing:
            arn = existing[0]["stateMachineArn"]
            sfn.update_state_machine(stateMachineArn=arn, definition=definition, roleArn=sm_role)
            action = "updated"
        else:
            arn = sfn.create_state_machine(name=sm_name, definition=definition, roleArn=sm_role)["stateMachineArn"]
            action = "created"
    except Exception as exc:
        if is_aws_error(exc):
            raise failed(f"deploying state machine {sm_name}", exc) from exc
        raise
    return WorkflowDeployment(plan.workflow, results, arn, action)


def execution_input(run: Client) -> dict[str, Any]:
    """The input of an execution for ``run`` (a driver's client bound by
    ``start_run``): the stack's endpoints with a run token minted from the
    driver's store token, and the run's metadata token; never the store-wide
    or the admin token. The execution must be named ``run.run_id``."""
    if not run.run_id or not run.token:
        raise ValueError("execution_input needs a client bound to a run: use Client.start_run(...) first")
    return {"funcsion": {**run.endpoints.for_run(run.run_id).to_dict(), "token": run.token}}


def start_execution(state_machine_arn: str, run: Client, *, sfn_client: Any = None,
                    region_name: str | None = None) -> str:
    """Start the workflow's state machine for ``run``; returns the execution ARN. An AWS
    error is a ``WorkflowDeployError`` of one line."""
    try:
        if sfn_client is None:
            import boto3

            sfn_client = boto3.client("stepfunctions", region_name=region_name)
        resp = sfn_client.start_execution(stateMachineArn=state_machine_arn, name=run.run_id,
                                          input=json.dumps(execution_input(run)))
    except Exception as exc:
        if is_aws_error(exc):
            raise WorkflowDeployError(f"starting an execution of {state_machine_arn} for run {run.run_id}: "
                                      f"{describe_aws_error(exc, region=region_name)}") from exc
        raise
    return str(resp["executionArn"])
