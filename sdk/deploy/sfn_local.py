"""Run a generated state machine under moto's ASL interpreter with its Lambda
tasks carried out by real handlers.

moto's Lambda without Docker only echoes its input. ``LambdaBridge`` hooks
botocore's ``before-send`` event for ``lambda.Invoke`` on boto3's default
session (which moto's interpreter uses for its Lambda client) and answers the
call with what a local invoker returns: the local Lambda platform in the
embedded stack. A handler error comes back as a ``FunctionError`` payload, as
AWS does, so Retry and Catch act on it. Nothing else is touched: every other
AWS call still goes to moto.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable
from io import BytesIO
from typing import Any

__all__ = ["LambdaBridge", "HandlerError"]


class HandlerError(Exception):
    """Raised by an invoke callable when the handler failed (its type, message and, when
    known, its traceback: what Lambda's Python runtime sends as ``stackTrace``)."""

    def __init__(self, error_type: str, message: str, stack_trace: str | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.stack_trace = stack_trace

    def payload(self) -> dict[str, Any]:
        """The error payload Lambda returns: the stack trace as a list of frames, as the
        Python runtime gives it (without the first and last lines of a traceback)."""
        out: dict[str, Any] = {"errorType": self.error_type, "errorMessage": self.message}
        if self.stack_trace:
            out["stackTrace"] = _frames(self.stack_trace)
        return out


def _frames(trace: str) -> list[str]:
    """``'  File "x.py", line 3, in f\n    raise E\n'`` per frame, as Lambda lists them."""
    lines = trace.rstrip("\n").splitlines()
    if lines and lines[0].startswith("Traceback"):
        lines = lines[1:]
    frames: list[str] = []
    for ln in lines:
        if ln.startswith("  File "):
            frames.append(ln + "\n")
        elif ln.startswith("    ") and frames:
            frames[-1] += ln + "\n"
    return frames


class _Raw(BytesIO):
    def stream(self, **_: Any) -> Any:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


class LambdaBridge:
    """Context manager: while open, Lambda Invoke calls in this process go to ``invoke``."""

    def __init__(self, invoke: Callable[[str, dict[str, Any]], Any]) -> None:
        self.invoke = invoke
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._session: Any = None

    def __enter__(self) -> LambdaBridge:
        import boto3

        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        self._session = boto3.DEFAULT_SESSION._session  # the botocore session behind boto3.client()
        self._session.get_component("event_emitter").register_first("before-send.lambda.Invoke", self._on_invoke)
        return self

    def __exit__(self, *exc: object) -> None:
        self._session.get_component("event_emitter").unregister("before-send.lambda.Invoke", self._on_invoke)

    def _on_invoke(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        path = urllib.parse.urlparse(request.url).path
        ref = urllib.parse.unquote(path.split("/functions/", 1)[1].split("/invocations", 1)[0])
        name = ref.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in ref else ref
        body = request.body or b"{}"
        payload = json.loads(body.decode() if isinstance(body, bytes) else body or "{}")
        with self._lock:
            self.calls.append((name, payload))
        headers = {"Content-Type": "application/json", "X-Amz-Executed-Version": "$LATEST"}
        try:
            result = self.invoke(name, payload)
            data = json.dumps(result).encode()
        except HandlerError as err:
            headers["X-Amz-Function-Error"] = "Unhandled"
            data = json.dumps(err.payload()).encode()
        return AWSResponse(request.url, 200, headers, _Raw(data))
