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
    """Raised by an invoke callable when the handler failed (its type and message)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


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
            data = json.dumps({"errorType": err.error_type, "errorMessage": err.message}).encode()
        return AWSResponse(request.url, 200, headers, _Raw(data))
