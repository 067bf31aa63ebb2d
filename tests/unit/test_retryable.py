"""Which errors a retry may fix: one decision (``sdk.exceptions``) for the executor and the ASL."""

from __future__ import annotations

import pytest

from sdk.exceptions import (CodecError, FatalTaskError, MissingOutputs, ObjectNotWritten, RunEnded, ServiceUnavailable,
                            StoreFailure, TaskFailed, UndeclaredOutput, UndeclaredRead, is_retryable,
                            retryable_error_name)
from sdk.local._executor import _retryable
from storage_functions.exceptions import InvocationFailed


@pytest.mark.parametrize(("exc", "retry"), [
    (ServiceUnavailable("down"), True), (StoreFailure("lost"), True), (ValueError("the handler's own bug"), True),
    (MissingOutputs("m"), False), (UndeclaredRead("r"), False), (UndeclaredOutput("w"), False),
    (ObjectNotWritten("n"), False), (RunEnded("e"), False), (CodecError("c"), False),
    (TaskFailed("t", retryable=True, cause="StoreFailure"), True), (FatalTaskError("t", cause="MissingOutputs"), False),
])
def test_is_retryable(exc: BaseException, retry: bool) -> None:
    assert is_retryable(exc) is retry


@pytest.mark.parametrize(("reason", "error_type", "retry"), [
    ("error", "FatalTaskError", False), ("error", "TaskFailed", True), ("error", "ValueError", True),
    ("marshal", "Runtime.MarshalError", False), ("init", "Runtime.ImportModuleError", False),
    ("killed", "Runtime.ExitError", True), ("timeout", "Sandbox.Timedout", True),
])
def test_executor_retries_by_error_name(reason: str, error_type: str, retry: bool) -> None:
    exc = InvocationFailed("x", reason=reason, error_type=error_type, error_message="m")
    assert _retryable(exc) is retry
    assert retryable_error_name(error_type) is retry
