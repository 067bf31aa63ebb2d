"""Start a run's execution on AWS (``start_execution``): the driver, which
holds the store token, mints the run's store token and passes only
run-scoped tokens in the execution input (the state machine refuses anything
else). Tasks need no S3 permission: the daemon reads and writes their COS
objects.

Deploying is one CloudFormation stack (``sdk.deploy._stack``, rendered by
``sdk.deploy._template``; ``funcsion deploy WDS --target aws``). The task zip
(``sdk.deploy._zip``, from an allow-list) holds the handler modules beside the
WDS with the files they import (not ``inputs.py``) and the code a task imports. Third-party packages the
SDK needs in a Lambda (``TASK_LAYER_PACKAGES``: thrift, pyeclib, msgpack,
aws-lambda-powertools) come from Lambda layers.
"""

from __future__ import annotations

import json
from typing import Any

import wds

from .._client import Client
from ._aws_errors import describe_aws_error, is_aws_error
from ._zip import build_task_zip

__all__ = ["build_task_zip", "CLEANUP_ENTRY", "WorkflowDeployError", "execution_input", "start_execution"]

CLEANUP_ENTRY = wds.CLEANUP_ENTRY  # validation keeps every WDS entry off its Lambda name


class WorkflowDeployError(wds.FuncsionError):
    pass


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
