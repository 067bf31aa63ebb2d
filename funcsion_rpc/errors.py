"""Errors of the metadata service, shared by the server core and the SDK client.

Each error carries a numeric ``code`` (the same numbers as ``enum ErrorCode``
in ``metadata_server/metadata.thrift``; a test pins them) and names the run,
the function and the object it is about. The server raises these, the Thrift
handler turns them into a ``MetadataFault`` on the wire, and
``MetadataClient`` turns the fault back into the same class here.

    FuncsionError                       (funcsion_errors: the project's root)
    └── MetadataError                   any refusal of the metadata service
        ├── UnknownRun                  no such run id
        ├── RunEnded                    the run ended (or its TTL passed)
        ├── UnknownWorkflow             no such registered workflow key
        ├── UnknownObject               the run's workflow declares no such object
        ├── ObjectNotWritten            declared, but its put has not finished yet
        ├── ObjectExpired               freed already (its reads committed, deleted, lease ran out)
        ├── UndeclaredOutput            a function wrote an object it does not declare
        ├── DuplicateWrite              a second, different write of the same object
        ├── Unauthorized                a missing or wrong run token / admin token
        ├── InvalidRequest              a malformed argument (negative size, bad policy, ...)
        └── ServiceUnavailable          the client could not reach the server

``retryable`` (a class attribute) says whether the same call may succeed when a
task is tried again: only ``ServiceUnavailable`` is; every other code is a
refusal the same call gets again. ``sdk.exceptions.is_retryable`` reads it.

Imports only the standard library and ``funcsion_errors``.
"""

from __future__ import annotations

from typing import ClassVar

from funcsion_errors import FuncsionError

__all__ = [
    "ErrorCode",
    "MetadataError",
    "UnknownRun",
    "RunEnded",
    "UnknownWorkflow",
    "UnknownObject",
    "ObjectNotWritten",
    "ObjectExpired",
    "UndeclaredOutput",
    "DuplicateWrite",
    "Unauthorized",
    "InvalidRequest",
    "ServiceUnavailable",
    "error_class",
]


class ErrorCode:
    """Wire codes; keep equal to ``enum ErrorCode`` in metadata.thrift."""

    UNKNOWN_RUN = 1
    RUN_ENDED = 2
    UNKNOWN_WORKFLOW = 3
    UNKNOWN_OBJECT = 4
    NOT_WRITTEN = 5
    EXPIRED = 6
    UNDECLARED_OUTPUT = 7
    DUPLICATE_WRITE = 8
    UNAUTHORIZED = 9
    INVALID_REQUEST = 10
    UNAVAILABLE = 11


class MetadataError(FuncsionError):
    """A refusal of the metadata service, naming run, function and object."""

    code: int = 0
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, run_id: str = "", function: str = "", object: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.function = function
        self.object = object

    def __str__(self) -> str:
        return f"{type(self).__name__}: {self.message}"

    def __reduce__(self) -> tuple[object, ...]:  # picklable across processes
        return (_rebuild, (self.code, self.message, self.run_id, self.function, self.object))


def _rebuild(code: int, message: str, run_id: str, function: str, obj: str) -> MetadataError:
    return error_class(code)(message, run_id=run_id, function=function, object=obj)


class UnknownRun(MetadataError):
    code = ErrorCode.UNKNOWN_RUN


class RunEnded(MetadataError):
    code = ErrorCode.RUN_ENDED


class UnknownWorkflow(MetadataError):
    code = ErrorCode.UNKNOWN_WORKFLOW


class UnknownObject(MetadataError):
    code = ErrorCode.UNKNOWN_OBJECT


class ObjectNotWritten(MetadataError):
    code = ErrorCode.NOT_WRITTEN


class ObjectExpired(MetadataError):
    code = ErrorCode.EXPIRED


class UndeclaredOutput(MetadataError):
    code = ErrorCode.UNDECLARED_OUTPUT


class DuplicateWrite(MetadataError):
    code = ErrorCode.DUPLICATE_WRITE


class Unauthorized(MetadataError):
    code = ErrorCode.UNAUTHORIZED


class InvalidRequest(MetadataError):
    code = ErrorCode.INVALID_REQUEST


class ServiceUnavailable(MetadataError):
    code = ErrorCode.UNAVAILABLE
    retryable = True


_BY_CODE: dict[int, type[MetadataError]] = {
    cls.code: cls
    for cls in (UnknownRun, RunEnded, UnknownWorkflow, UnknownObject, ObjectNotWritten, ObjectExpired,
                UndeclaredOutput, DuplicateWrite, Unauthorized, InvalidRequest, ServiceUnavailable)
}


def error_class(code: int) -> type[MetadataError]:
    """The exception class for a wire code (``MetadataError`` for codes this side does not know)."""
    return _BY_CODE.get(code, MetadataError)
