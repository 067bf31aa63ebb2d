"""The process of one local Lambda instance: import the handler once, then
run invocations until told to stop. Run as a script by path
(``python -P -u _worker.py REQ_FD RESP_FD``), so it imports nothing of
funcsion and the handler's module globals stay warm between invocations.

Protocol, both ways: frames of a 4-byte big-endian length and a UTF-8 JSON
object. Parent -> worker: ``init`` (handler, sys_path, function settings),
then ``invoke`` (request_id, event, deadline_ms) or ``exit``. Worker ->
parent: ``ready`` or ``init_error``, then per invoke ``result`` (the
handler's JSON text, duration, peak RSS) or ``error`` (Lambda's errorType,
errorMessage, stackTrace). EOF on the request pipe ends the worker, so a
dead parent leaves no instance behind.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import struct
import sys
import time
import traceback
from typing import Any

__all__ = ["HEADER", "encode_frame", "read_frame", "LambdaContext", "main"]

HEADER = struct.Struct(">I")


def encode_frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict[str, Any] | None:
    """Next frame from ``fd``, or None at EOF."""
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    body = _read_exact(fd, HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


class LambdaContext:
    """What AWS's Python runtime passes as ``context`` (``awslambdaric``).
    As there, ``memory_limit_in_mb`` is a str."""

    def __init__(self, request_id: str, deadline_ms: int, function: dict[str, Any]) -> None:
        self.aws_request_id = request_id
        self._deadline_ms = deadline_ms
        self.function_name = function["function_name"]
        self.function_version = function.get("function_version", "$LATEST")
        self.invoked_function_arn = function["invoked_function_arn"]
        self.memory_limit_in_mb = str(function["memory_mb"])
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = function.get("log_stream_name", "local")
        self.identity = None
        self.client_context = None

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))

    def __repr__(self) -> str:
        return f"LambdaContext({self.function_name!r}, request {self.aws_request_id})"


def _error(exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
    tb = traceback.extract_tb(exc.__traceback__)
    return {
        "errorType": error_type or type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_list(tb),
    }


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is KiB on Linux


def _load(init: dict[str, Any]) -> Any:
    spec: str = init["handler"]
    module_name, sep, attr = spec.partition(":")
    if not sep:  # AWS style "module.function"
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"handler {spec!r}: write 'package.module:function' or 'module.function'")
    module = importlib.import_module(module_name)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError(f"handler {spec!r} is not callable")
    return fn


def main(argv: list[str]) -> int:
    req_fd, resp_fd = int(argv[1]), int(argv[2])
    init = read_frame(req_fd)
    if init is None:
        return 0
    sys.path[:] = list(init["code_paths"]) + [p for p in init["sys_path"] if p not in init["code_paths"]]
    function = init["function"]
    max_payload = int(init["max_payload_bytes"])
    t0 = time.perf_counter()
    try:
        handler = _load(init)
    except BaseException as exc:
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.HandlerNotFound" \
            if isinstance(exc, AttributeError) else "Runtime.UserCodeSyntaxError" if isinstance(exc, SyntaxError) \
            else None
        _write_all(resp_fd, encode_frame({"op": "init_error", **_error(exc, kind)}))
        return 1
    _write_all(resp_fd, encode_frame({"op": "ready", "init_s": time.perf_counter() - t0}))
    while True:
        msg = read_frame(req_fd)
        if msg is None or msg["op"] == "exit":
            return 0
        context = LambdaContext(msg["request_id"], msg["deadline_ms"], function)
        start = time.perf_counter()
        try:
            result = handler(msg["event"], context)
        except Exception as exc:
            reply = {"op": "error", **_error(exc)}
        else:
            try:
                text = json.dumps(result)
            except (TypeError, ValueError) as exc:
                reply = {"op": "error", **_error(exc, "Runtime.MarshalError")}
                reply["errorMessage"] = f"Unable to marshal response: {exc}"
            else:
                if len(text) > max_payload:
                    reply = {"op": "error", "errorType": "Function.ResponseSizeTooLarge", "stackTrace": [],
                             "errorMessage": f"Response payload size ({len(text)} bytes) exceeded maximum "
                                             f"allowed payload size ({max_payload} bytes)."}
                else:
                    reply = {"op": "result", "result": text}
        reply["duration_s"] = time.perf_counter() - start
        reply["max_memory_used_mb"] = _peak_rss_mb()
        sys.stdout.flush()
        sys.stderr.flush()
        _write_all(resp_fd, encode_frame(reply))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
