"""Deployment: the Step Functions bridge (ASL generated from the HDAG) and the
AWS packaging of task handlers. Runs on a developer's machine or a deploy
host, never inside a Lambda, so it may import hdag and networkx."""

from __future__ import annotations

from .asl import CLEANUP, END_RUN, FAILED, LAMBDA_RETRY, AslOptions, build_asl, lambda_name, levels

__all__ = ["AslOptions", "CLEANUP", "END_RUN", "FAILED", "LAMBDA_RETRY", "build_asl", "lambda_name", "levels"]
