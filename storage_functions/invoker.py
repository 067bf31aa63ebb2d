"""Invokers: how the daemon (and anything else) starts Lambda functions.

One base class ``Invoker`` checks that a payload is JSON and under the size
limit, and maps failures to the storage error tree; two thin backends:
``LocalInvoker`` over a ``LocalPlatform`` and ``AwsInvoker`` over a boto3
``lambda`` client (``client=None`` builds one; throttling is retried with
backoff). ``invoke_async`` fires and forgets (``InvocationType='Event'``);
``invoke`` waits for the handler's JSON result. Not here: deploying
functions (``deploy.py``), the platform itself (``local/``).
"""

from __future__ import annotations

import json
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .cos._retry import RetryExhausted, RetryPolicy, call_with_retries
from .exceptions import (
    ConcurrencyLimit, FunctionNotDeployed, InvalidPayload, InvocationFailed, PlatformError,
)

if TYPE_CHECKING:
    from .local import LocalPlatform

__all__ = ["Invoker", "LocalInvoker", "AwsInvoker", "SYNC_PAYLOAD_LIMIT", "ASYNC_PAYLOAD_LIMIT"]

#: AWS Lambda's payload quotas (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html);
#: the asynchronous one is the long-standing 256 KiB, on the safe side of newer raises
SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024
ASYNC_PAYLOAD_LIMIT = 256 * 1024


class Invoker(ABC):
    """Start functions by name with a JSON payload."""

    def invoke_async(self, function_name: str, payload: dict[str, Any]) -> None:
        """Start ``function_name`` and return without waiting for it."""
        self._invoke_async(function_name, self._encode(function_name, payload, ASYNC_PAYLOAD_LIMIT))

    def invoke(self, function_name: str, payload: dict[str, Any]) -> Any:
        """Run ``function_name`` and return its JSON result; a handler error
        raises ``InvocationFailed``."""
        return self._invoke(function_name, self._encode(function_name, payload, SYNC_PAYLOAD_LIMIT))

    @staticmethod
    def _encode(function_name: str, payload: Any, limit: int) -> str:
        try:
            text = json.dumps(payload)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"payload for {function_name} is not JSON: {exc}") from None
        if len(text.encode()) > limit:
            raise InvalidPayload(f"payload for {function_name} is {len(text.encode())} bytes, "
                                 f"over Lambda's {limit}-byte limit for this invocation type")
        return text

    @abstractmethod
    def _invoke_async(self, function_name: str, payload: str) -> None: ...

    @abstractmethod
    def _invoke(self, function_name: str, payload: str) -> Any: ...


class LocalInvoker(Invoker):
    """Invoke functions deployed on a ``LocalPlatform``."""

    def __init__(self, platform: LocalPlatform) -> None:
        self.platform = platform

    def _invoke_async(self, function_name: str, payload: str) -> None:
        self.platform.invoke_async(function_name, json.loads(payload))

    def _invoke(self, function_name: str, payload: str) -> Any:
        return self.platform.invoke(function_name, json.loads(payload))


class AwsInvoker(Invoker):
    """Invoke AWS Lambda functions through boto3 (``lambda.invoke``).
    ``qualifier`` picks a version or alias. Throttling
    (``TooManyRequestsException``) and 5xx service errors are retried under
    ``retry``; then ``ConcurrencyLimit``/``PlatformError`` is raised."""

    def __init__(
        self,
        client: Any = None,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        qualifier: str | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("lambda", region_name=region_name, endpoint_url=endpoint_url)
        self.client = client
        self.qualifier = qualifier
        self.retry = retry if retry is not None else RetryPolicy(max_attempts=4, base_delay_s=0.1)
        self._sleep, self._clock, self._rng = sleep, clock, rng

    def _call(self, function_name: str, invocation_type: str, payload: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        kwargs: dict[str, Any] = {"FunctionName": function_name, "InvocationType": invocation_type,
                                  "Payload": payload.encode()}
        if self.qualifier:
            kwargs["Qualifier"] = self.qualifier

        def transient(exc: BaseException) -> bool:
            return isinstance(exc, ClientError) and (
                _code(exc) in ("TooManyRequestsException", "ServiceException", "EC2ThrottledException")
                or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500)

        try:
            resp: dict[str, Any] = call_with_retries(
                lambda: self.client.invoke(**kwargs), policy=self.retry, is_transient=transient,
                sleep=self._sleep, clock=self._clock, rng=self._rng)
        except RetryExhausted as exc:
            last = exc.last
            if _code(last) == "TooManyRequestsException":
                raise ConcurrencyLimit(f"{function_name}: throttled by Lambda after {exc.attempts} attempts: "
                                       f"{last}") from last
            raise PlatformError(f"{function_name}: lambda invoke failed after {exc.attempts} attempts: {last}") from last
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                raise FunctionNotDeployed(f"function {function_name!r} is not deployed in AWS Lambda: {exc}") from exc
            if _code(exc) in ("RequestTooLargeException", "InvalidRequestContentException"):
                raise InvalidPayload(f"{function_name}: Lambda refused the payload: {exc}") from exc
            raise PlatformError(f"{function_name}: lambda invoke failed: {exc}") from exc
        return resp

    def _invoke_async(self, function_name: str, payload: str) -> None:
        resp = self._call(function_name, "Event", payload)
        if resp.get("StatusCode") != 202:
            raise PlatformError(f"{function_name}: asynchronous invoke answered {resp.get('StatusCode')}, not 202")

    def _invoke(self, function_name: str, payload: str) -> Any:
        resp = self._call(function_name, "RequestResponse", payload)
        stream = resp.get("Payload")
        body = stream.read() if stream is not None else b""
        request_id = resp.get("ResponseMetadata", {}).get("RequestId")
        if resp.get("FunctionError"):
            try:
                err = json.loads(body or b"{}")
            except ValueError:
                err = {"errorMessage": body.decode(errors="replace")}
            etype = str(err.get("errorType") or resp["FunctionError"])
            emsg = str(err.get("errorMessage", ""))
            raise InvocationFailed(
                f"{function_name} (request {request_id}): {etype}: {emsg}", function_name=function_name,
                request_id=request_id, reason="timeout" if "timed out" in emsg else "error", error_type=etype,
                error_message=emsg, stack_trace="".join(err.get("stackTrace") or ()))
        return json.loads(body) if body else None


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))
