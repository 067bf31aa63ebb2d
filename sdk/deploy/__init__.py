"""Deployment: the Step Functions bridge (ASL generated from the HDAG) and the
AWS packaging of task handlers. Runs on a developer's machine or a deploy
host, never inside a Lambda, so it may import hdag and networkx."""

from __future__ import annotations

from .asl import (CHECK_TOKENS, CLEANUP, END_RUN, FAILED, LAMBDA_RETRY, TOKENS_REFUSED, AslOptions, build_asl,
                  lambda_name, levels)
from .aws import execution_input, start_execution

__all__ = ["AslOptions", "CHECK_TOKENS", "CLEANUP", "END_RUN", "FAILED", "LAMBDA_RETRY", "TOKENS_REFUSED", "build_asl",
           "execution_input", "lambda_name", "levels", "start_execution"]
