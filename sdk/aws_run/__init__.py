"""``funcsion run WDS --target aws``: a workflow run on an AWS deployment (its
CloudFormation stack's state machine, servers and COS) with the same
progress, end and report as a local run. Runs on the driver's machine, never
inside a Lambda."""

from __future__ import annotations

from ._billing import LambdaReport, parse_report_line, task_billing
from ._deployment import (OUTPUT_KEYS, REACH_HINT, AwsDeployment, DeploymentError, default_stack_name,
                          deployment_from_outputs, driver_endpoints, parse_tokens)
from ._driver import AwsClients, AwsRun, AwsRunOptions, RunTimedOut, connect
from ._history import CLEANUP_TASK, ExecutionEnd, ExecutionView, Invocation, lambda_error

__all__ = ["AwsClients", "AwsDeployment", "AwsRun", "AwsRunOptions", "CLEANUP_TASK", "DeploymentError",
           "ExecutionEnd", "ExecutionView", "Invocation", "LambdaReport", "OUTPUT_KEYS", "REACH_HINT", "RunTimedOut",
           "connect", "default_stack_name", "deployment_from_outputs", "driver_endpoints", "lambda_error",
           "parse_report_line", "parse_tokens", "task_billing"]
