"""Deploy a workflow to AWS: one Lambda per WDS entry (replicas of a
templated entry share one), a cleanup Lambda, and the Step Functions state
machine generated from the HDAG, all created or updated through boto3; and
start a run's execution (``start_execution``): the driver, which holds the
store token, mints the run's store token and passes only run-scoped tokens
in the execution input (the state machine refuses anything else). Tasks
need no S3 permission: the daemon reads and writes their COS objects.

The task zip (``sdk.deploy._zip``, from an allow-list) holds the Python files
beside the WDS (handlers, inputs) and the code a task imports. Third-party
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

import hdag
import wds
from storage_functions.deploy import DeployResult, upsert_function

from .._client import Client
from ._zip import build_task_zip
from .asl import AslOptions, build_asl, lambda_name

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


def _aws_handler(ref: str) -> str:
    """``module:function`` -> AWS's ``module.function``."""
    return ref.replace(":", ".")


def deploy_workflow(wds_path: str | Path, *, role_arn: str, state_machine_role_arn: str | None = None,
                    params: Mapping[str, int] | None = None, layers: Sequence[str] = (),
                    memory_mb: int = 512, timeout_s: int = 300, runtime: str = "python3.12",
                    max_concurrency: int = 0, lambda_client: Any = None, sfn_client: Any = None,
                    region_name: str | None = None, limits: wds.Limits | None = None) -> WorkflowDeployment:
    """Create or update the workflow's Lambdas and state machine. Idempotent. ``limits``
    bound the WDS (default ``wds.Limits()``)."""
    if not _ARN_ROLE.match(role_arn):
        raise WorkflowDeployError(f"role ARN {role_arn!r} is not an IAM role ARN "
                                  "(arn:aws:iam::<12-digit account>:role/<name>); set role_arn or --role-arn")
    path = Path(wds_path)
    graph = hdag.build(wds.load(path, params=params, limits=limits))
    app = graph.workflow.app
    import boto3
    from botocore.exceptions import ClientError

    lam = lambda_client or boto3.client("lambda", region_name=region_name)
    sfn = sfn_client or boto3.client("stepfunctions", region_name=region_name)
    code = build_task_zip(path.parent)
    entries: dict[str, str] = {}
    for f in graph.functions.values():
        entries.setdefault(f.template or f.name, f.handler)
    entries[CLEANUP_ENTRY] = "sdk._cleanup:handler"
    results: list[DeployResult] = []
    arns: dict[str, str] = {}
    for entry, ref in entries.items():
        name = lambda_name(app, entry)
        wanted = {"Role": role_arn, "Handler": _aws_handler(ref), "Runtime": runtime, "MemorySize": memory_mb,
                  "Timeout": timeout_s, "Description": f"funcsion {graph.key} {entry}",
                  "Environment": {"Variables": {"FUNCSION_WORKFLOW": graph.key}}}
        if layers:
            wanted["Layers"] = list(layers)
        try:
            r = upsert_function(lam, name, code, wanted)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise WorkflowDeployError(f"deploying Lambda {name} (entry {entry!r}): {err.get('Code')}: "
                                      f"{err.get('Message')}") from exc
        results.append(r)
        arns[entry] = r.arn
    definition = json.dumps(build_asl(graph, arns.__getitem__, arns[CLEANUP_ENTRY],
                                      AslOptions(max_concurrency=max_concurrency)))
    sm_name = re.sub(r"[^A-Za-z0-9_-]", "-", f"funcsion-{app}-{graph.workflow.workflow_id}")[:80]
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
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise WorkflowDeployError(f"deploying state machine {sm_name}: {err.get('Code')}: {err.get('Message')}") from exc
    return WorkflowDeployment(graph.key, results, arn, action)


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
    """Start the workflow's state machine for ``run``; returns the execution ARN."""
    if sfn_client is None:
        import boto3

        sfn_client = boto3.client("stepfunctions", region_name=region_name)
    resp = sfn_client.start_execution(stateMachineArn=state_machine_arn, name=run.run_id,
                                      input=json.dumps(execution_input(run)))
    return str(resp["executionArn"])
