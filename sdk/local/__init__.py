"""The embedded local stack: the workflow executor that runs task handlers as
processes with Step Functions-like retries, and the stack that starts the
metadata server, the daemon, the local Lambda platform and a local COS.
Runs on the developer's machine, never in a Lambda."""

from __future__ import annotations

from ._schedule import RetryPolicy, RunSchedule, TaskRecord

__all__ = ["RetryPolicy", "RunSchedule", "TaskRecord"]
