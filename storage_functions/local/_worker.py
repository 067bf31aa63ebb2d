"""The process of one local Lambda instance: import the handler once, then
run invocations until told to stop. Run as a script by path
(``python -P -u _worker.py REQ_FD RESP_FD``), so it imports nothing of
funcsion and the handler's module globals stay warm between invocations.

Protocol, both ways: frames of a 4-byte big-endian length and a UTF-8 JSON
object. Parent -> worker: ``init`` (handler, sys_path, function settings),
then ``invoke`` (request_id, event, deadline_ms) or ``exit``. Worker ->
parent: ``ready`` or ``init_error``, then per invoke ``result`` (the
handler's JSON text, duration, peak RSS) or ``error`` (Lambda's errorType,
errorMessage, stackTrace, and ``traceback``: the whole formatted chain).
Stack traces hold the handler's frames, never this file's. EOF on the
request pipe ends the worker, so a dead parent leaves no instance behind.

Logs (``init`` has ``"log": true`` when stdout is the function's log file,
shared by all its instances): as in CloudWatch, each invocation is framed by
``START RequestId: ...``, ``END RequestId: ...`` and ``REPORT RequestId: ...
Duration ... Billed Duration ... Memory Size ... Max Memory Used ... [Init
Duration]`` lines; an unhandled error logs ``[ERROR] Type: message`` and its
traceback; and every line the handler prints carries the time and the request
id (``<UTC time>\t<request id>\t<text>``), so concurrent instances' lines
stay apart.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import os
import resource
import struct
import sys
import time
import traceback
from typing import Any

__all__ = ["HEADER", "encode_frame", "read_frame", "LambdaContext", "LogStream", "billed_ms", "main"]

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


_THIS_FILE = os.path.abspath(__file__)


def _handler_trace(exc: BaseException, code_paths: tuple[str, ...] = ()) -> traceback.TracebackException:
    """``exc``'s traceback, causes included, without this file's frames and, when a frame is in
    the function's code (``code_paths``), without the wrappers' frames above the first such
    (the handler's frames are what a user can act on; Lambda's runtime hides its own too).
    An exception whose ``after_return`` is true was raised by a wrapper after the handler
    returned (the SDK's ``MissingOutputs``): no frame of it is the handler's, none is shown
    (nor its cause, whose message the wrapper's repeats).
    The exception is not changed (some, like Thrift's, are immutable)."""
    te = traceback.TracebackException.from_exception(exc)
    after_return = bool(getattr(exc, "after_return", False))
    seen: set[int] = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        frames = [f for f in t.stack if os.path.abspath(f.filename) != _THIS_FILE]
        first = next((k for k, f in enumerate(frames)
                      if any(os.path.abspath(f.filename).startswith(p + os.sep) for p in code_paths)), 0)
        t.stack = traceback.StackSummary.from_list(frames[first:] if t is not te or not after_return else [])
        if t is te and after_return:
            t.__cause__ = t.__context__ = None  # the wrapper's message says its cause's
        if t.__cause__ is not None and _carries(t.stack, t.__cause__.stack):
            t.__cause__ = None  # a wrapper raised with its cause's traceback: show those frames once
        todo += [c for c in (t.__cause__, t.__context__) if c is not None]
    return te


def _carries(outer: traceback.StackSummary, inner: traceback.StackSummary) -> bool:
    """Whether ``outer`` ends with every frame of ``inner``."""
    key = [(f.filename, f.lineno, f.name) for f in inner]
    return bool(key) and [(f.filename, f.lineno, f.name) for f in outer][-len(key):] == key


def _error(exc: BaseException, error_type: str | None = None, code_paths: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"errorType": error_type or type(exc).__name__, "errorMessage": str(exc)}
    try:
        te = _handler_trace(exc, code_paths)
        shown = te.stack or te.__cause__ is not None or (te.__context__ is not None and not te.__suppress_context__)
        # no frame and no cause: the traceback would only repeat the message
        out.update(stackTrace=te.stack.format(), traceback="".join(te.format()) if shown else "")
    except Exception as fmt_exc:  # noqa: BLE001 - a report without a traceback beats a dead worker
        out.update(stackTrace=[], traceback=f"(the traceback could not be formatted: {fmt_exc!r})\n")
    return out


def _not_json(value: Any, path: str = "result") -> str | None:
    """Where in ``value`` the first value JSON cannot hold is, e.g. ``result['ids'][2] is a set``."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                return f"a key of {path} is a {type(k).__name__}"
            if (where := _not_json(v, f"{path}[{k!r}]")) is not None:
                return where
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if (where := _not_json(v, f"{path}[{i}]")) is not None:
                return where
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    return f"{path} is a {type(value).__name__}"


def _marshal_error(result: Any, exc: BaseException) -> dict[str, Any]:
    """Lambda's ``Runtime.MarshalError`` for a result ``json`` cannot encode, saying where in the
    result the value is and what to do; no stack (the JSON library's frames say nothing about
    the handler, which has returned)."""
    where = _not_json(result)
    message = (f"Unable to marshal response: {exc}" + (f" ({where})" if where else "")
               + "; return only JSON types (dict, list, str, int, float, bool, None), and sdk.put anything else")
    return {"errorType": "Runtime.MarshalError", "errorMessage": message, "stackTrace": [], "traceback": ""}


def billed_ms(duration_s: float) -> int:
    """Lambda's billed milliseconds: rounded up to a whole ms, at least 1 (the same rule as
    ``storage_functions.local._pricing.billed_ms``; this file imports nothing of funcsion)."""
    return max(1, math.ceil(round(duration_s * 1000.0, 6)))


def _utc_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class LogStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of an instance that logs to its function's file: each whole
    line goes out in one ``write`` (the file is opened for appending, so lines of concurrent
    instances never mix) as ``<UTC time>\t<request id>\t<text>``; outside an invocation (the
    handler module's import) the id is ``INIT``. A partial line waits for its newline or the
    end of the invocation."""

    request_id = "INIT"  # of the invocation running now, for both streams

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        text = self._pending + s
        whole, sep, self._pending = text.rpartition("\n")
        if sep:
            self.emit(whole.split("\n"), tag=True)
        return len(s)

    def end_invocation(self) -> None:
        """Write a partial line left by the invocation that ends."""
        if self._pending:
            pending, self._pending = self._pending, ""
            self.emit([pending], tag=True)

    def emit(self, lines: list[str], *, tag: bool) -> None:
        now = _utc_now()
        head = f"{now}\t{LogStream.request_id}\t" if tag else f"{now}\t"
        _write_all(self._fd, "".join(f"{head}{line}\n" for line in lines).encode("utf-8", "replace"))


def _log_error(stream: LogStream | None, err: dict[str, Any]) -> None:
    """What Lambda's runtime logs for an unhandled error: ``[ERROR] Type: message`` and the
    traceback, whose last line (the same error again) is left out, as Lambda does."""
    if stream is None:
        return
    head = f"{err['errorType']}: {err['errorMessage']}"
    text = err.get("traceback", "").rstrip("\n")
    trace = text.split("\n") if text else []
    message = err["errorMessage"].rstrip("\n").split("\n")
    if len(trace) >= len(message) and trace[-len(message)].endswith(f"{err['errorType']}: {message[0]}") \
            and trace[len(trace) - len(message) + 1:] == message[1:]:
        trace = trace[:-len(message)]
    stream.emit([f"[ERROR] {head}", *trace], tag=True)


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
    code_paths = tuple(os.path.abspath(p) for p in init["code_paths"])
    log: LogStream | None = None
    if init.get("log"):
        log = LogStream(1)
        sys.stdout = sys.stderr = log
    t0 = time.perf_counter()
    try:
        handler = _load(init)
    except BaseException as exc:  # noqa: BLE001 - Lambda reports any init failure as an error reply
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.HandlerNotFound" \
            if isinstance(exc, AttributeError) else "Runtime.UserCodeSyntaxError" if isinstance(exc, SyntaxError) \
            else None
        err = _error(exc, kind, code_paths)
        _log_error(log, err)
        _write_all(resp_fd, encode_frame({"op": "init_error", **err}))
        return 1
    _write_all(resp_fd, encode_frame({"op": "ready", "init_s": time.perf_counter() - t0}))
    while True:
        msg = read_frame(req_fd)
        if msg is None or msg["op"] == "exit":
            return 0
        request_id = msg["request_id"]
        context = LambdaContext(request_id, msg["deadline_ms"], function)
        if log is not None:
            log.emit([f"START RequestId: {request_id} Version: {context.function_version}"], tag=False)
            LogStream.request_id = request_id
        start = time.perf_counter()
        try:
            result = handler(msg["event"], context)
        except Exception as exc:  # noqa: BLE001 - a handler error is the invocation's reply, as on Lambda
            reply = {"op": "error", **_error(exc, code_paths=code_paths)}
            _log_error(log, reply)
        else:
            try:
                text = json.dumps(result)
            except (TypeError, ValueError) as exc:
                reply = {"op": "error", **_marshal_error(result, exc)}
                _log_error(log, reply)
            else:
                if len(text) > max_payload:
                    reply = {"op": "error", "errorType": "Function.ResponseSizeTooLarge", "stackTrace": [],
                             "errorMessage": f"Response payload size ({len(text)} bytes) exceeded maximum "
                                             f"allowed payload size ({max_payload} bytes)."}
                else:
                    reply = {"op": "result", "result": text}
        reply["duration_s"] = duration_s = time.perf_counter() - start
        reply["max_memory_used_mb"] = peak = _peak_rss_mb()
        sys.stdout.flush()
        sys.stderr.flush()
        if log is not None:
            log.end_invocation()
            LogStream.request_id = "INIT"
            _log_report(log, request_id, duration_s, peak, function, msg)
        _write_all(resp_fd, encode_frame(reply))


def _log_report(log: LogStream, request_id: str, duration_s: float, peak_mb: float, function: dict[str, Any],
                msg: dict[str, Any]) -> None:
    """CloudWatch's END and REPORT lines. ``msg`` may carry ``init_s`` (the platform's cold start
    of this instance, on its first invocation) and ``bill_init`` (whether init time is billed)."""
    init_s = float(msg.get("init_s") or 0.0)
    billed = billed_ms(duration_s + (init_s if msg.get("bill_init") else 0.0))
    report = (f"REPORT RequestId: {request_id}\tDuration: {duration_s * 1000:.2f} ms\tBilled Duration: {billed} ms"
              f"\tMemory Size: {function['memory_mb']} MB\tMax Memory Used: {peak_mb:.0f} MB")
    if init_s:
        report += f"\tInit Duration: {init_s * 1000:.2f} ms"
    log.emit([f"END RequestId: {request_id}", report], tag=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
