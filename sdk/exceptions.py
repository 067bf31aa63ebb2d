"""Errors users of the SDK see.

    FuncsionError                       (funcsion_errors: the project's root)
    ├── MetadataError ...               the metadata service refused (funcsion_rpc.errors, re-exported)
    │   ├── ObjectExpired, ObjectNotWritten, UndeclaredOutput, DuplicateWrite, Unauthorized, ...
    ├── StorageError ...                COS, Lambda platform, data path (storage_functions.exceptions)
    ├── StoreFailure                    the data path failed (a storage_functions error, wrapped here)
    ├── CodecError                      a value could not be encoded or decoded
    ├── ConfigError                     a configuration value is wrong
    └── TaskError                       a task broke a workflow rule; a retry may act on it
        ├── UndeclaredRead              read an object its WDS entry does not list as an input
        ├── MissingOutputs              returned without writing every declared output
        └── NoRunContext                sdk.get/put outside a task and without a Client

``storage_functions`` errors derive from the same root; on the data path the
SDK still wraps them in ``StoreFailure`` (the original is its ``__cause__``)
so a task's caller sees one class for "the store failed".
"""

from __future__ import annotations

from funcsion_errors import FuncsionError
from funcsion_rpc.errors import (
    DuplicateWrite,
    InvalidRequest,
    MetadataError,
    ObjectExpired,
    ObjectNotWritten,
    RunEnded,
    ServiceUnavailable,
    Unauthorized,
    UndeclaredOutput,
    UnknownObject,
    UnknownRun,
    UnknownWorkflow,
)

from ._codecs import CodecError
from ._config import ConfigError

__all__ = [
    "CodecError", "ConfigError", "DuplicateWrite", "FuncsionError", "InvalidRequest", "MetadataError",
    "MissingOutputs", "NoRunContext", "ObjectExpired", "ObjectNotWritten", "RunEnded", "ServiceUnavailable",
    "StoreFailure", "TaskError", "Unauthorized", "UndeclaredOutput", "UndeclaredRead", "UnknownObject",
    "UnknownRun", "UnknownWorkflow",
]


class StoreFailure(FuncsionError):
    """The data path (daemon or storage functions) failed; ``__cause__`` has the detail."""


class TaskError(FuncsionError):
    """A task broke a rule of its workflow."""


class UndeclaredRead(TaskError):
    pass


class MissingOutputs(TaskError):
    pass


class NoRunContext(TaskError):
    pass
