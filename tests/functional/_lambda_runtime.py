"""A small stand-in for AWS Lambda's Python runtime, run as a script in a bare
interpreter: ``python -I -S _lambda_runtime.py HANDLER FIRST_PARTY PATH...``.

As Lambda does, it puts the deployment zip and the layers (``PATH...``) on
``sys.path`` ahead of the standard library, imports the handler
(``module.function`` or ``module:function``) once at init, then serves
invocations one after another in the same process (a warm instance keeps its
module globals): each is one JSON line on stdin, ``{"event": ...,
"function_name": ..., "memory_mb": ..., "timeout_s": ..., "id": ...}``, and its
outcome one JSON line on stdout (with the request's ``id``): ``{"result": ...}`` or Lambda's error shape
(``errorType``, ``errorMessage``, ``stackTrace``), plus ``modules``, the
first-party modules (top-level names in ``FIRST_PARTY``, comma-separated) in
``sys.modules`` with where each was loaded from, for the tests' allow-list
check. A handler's prints go to stderr (the function's log). Imports nothing
outside the standard library: it must run with only the zip on the path.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
import uuid
from typing import Any


class Context:
    """The attributes of Lambda's context object that handlers read."""

    def __init__(self, function_name: str, memory_mb: int, timeout_s: float) -> None:
        self.function_name = function_name
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _error(exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
    return {"errorType": error_type or type(exc).__name__, "errorMessage": str(exc),
            "stackTrace": traceback.format_exception(exc)}


def main() -> None:
    ref, first_party, *paths = sys.argv[1:]
    sys.path[:0] = paths
    tops = set(first_party.split(","))
    out, sys.stdout = sys.stdout, sys.stderr
    module, _, name = ref.replace(":", ".").rpartition(".")
    handler: Any = None
    init_error: dict[str, Any] | None = None
    try:
        handler = getattr(importlib.import_module(module), name)
    except Exception as exc:  # noqa: BLE001 - Lambda reports it for every invocation
        init_error = _error(exc, "Runtime.ImportModuleError")
    for line in sys.stdin:
        req = json.loads(line)
        if init_error is not None:
            reply = dict(init_error)
        else:
            ctx = Context(req["function_name"], int(req["memory_mb"]), float(req["timeout_s"]))
            try:
                reply = {"result": handler(req["event"], ctx)}
            except Exception as exc:  # noqa: BLE001 - the invocation's error, as Lambda reports it
                reply = _error(exc)
        reply["id"] = req.get("id")
        reply["modules"] = {m: getattr(mod, "__file__", None) or "" for m, mod in list(sys.modules.items())
                            if m.split(".")[0] in tops}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
