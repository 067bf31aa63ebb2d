"""Deployment: the Step Functions bridge (ASL generated from the HDAG), the
AWS packaging of task handlers, and the one CloudFormation stack of a
deployment (``stack_name``, ``render_template``, ``deploy_stack``; the
stack's ``OUTPUTS`` are a contract). Runs on a developer's machine or a deploy
host, never inside a Lambda, so it may import hdag and networkx."""

from __future__ import annotations

from .asl import (CHECK_TOKENS, CLEANUP, END_RUN, FAILED, LAMBDA_RETRY, TOKENS_REFUSED, AslOptions, build_asl,
                  lambda_name, levels)
from ._stack import StackDeployError, StackDeployment, StackParameters, bundle, deploy_stack, write_dry_run
from ._template import OUTPUTS, TemplateSettings, render_template, stack_name, storage_prefix
from .aws import execution_input, start_execution

__all__ = ["AslOptions", "CHECK_TOKENS", "CLEANUP", "END_RUN", "FAILED", "LAMBDA_RETRY", "OUTPUTS", "StackDeployError",
           "StackDeployment", "StackParameters", "TOKENS_REFUSED", "TemplateSettings", "build_asl", "bundle",
           "deploy_stack", "execution_input", "lambda_name", "levels", "render_template", "stack_name",
           "start_execution", "storage_prefix", "write_dry_run"]
