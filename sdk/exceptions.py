"""Errors users of the SDK see.

    FuncsionError                       (funcsion_errors: the project's root)
    ├── MetadataError ...               the metadata service refused (funcsion_rpc.errors, re-exported)
    │   ├── ObjectExpired, ObjectNotWritten, UndeclaredOutput, DuplicateWrite, Unauthorized, ...
    ├── StorageError ...                COS, Lambda platform, data path (storage_functions.exceptions)
    ├── StoreFailure                    the data path failed (a storage_functions error, wrapped here)
    ├── CodecError                      a value could not be encoded or decoded
    ├── ConfigError                     a configuration value is wrong
    └── TaskError                       a task broke a workflow rule
        ├── UndeclaredRead              read an object its WDS entry does not list as an input
        ├── MissingOutputs              returned without writing every declared output
        ├── NoRunContext                sdk.get/put outside a task and without a Client
        ├── ReferenceRefused            @sdk.offload: a reference forged, altered or of another execution
        ├── ReferenceFreed              @sdk.offload: a reference whose value was freed (names its last reader)
        ├── MapItemsTooLarge            sdk.offload_items: the chunk references would not fit in the state
        └── TaskFailed                  how an SDK error leaves a task handler (names task and run)
            └── FatalTaskError          ... one that no retry can fix

Retries: every class says whether trying a task again may help (``retryable``,
a class attribute: ``ServiceUnavailable`` and ``StoreFailure`` yes; refusals
of the metadata service, workflow rules and codec errors no); ``is_retryable``
reads it for any exception (errors of the handler's own code: yes, as Step
Functions does). A task handler raises ``FatalTaskError`` for the others, so
the error *name* Lambda reports carries the decision: ``NON_RETRYABLE_ERRORS``
lists the names no retry can fix, for both the local executor and the Step
Functions Retry list (``sdk.deploy.asl``).

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
    "FatalTaskError", "NON_RETRYABLE_ERRORS", "TaskFailed", "is_retryable", "retryable_error_name",
    "CodecError", "ConfigError", "DuplicateWrite", "FuncsionError", "InvalidRequest", "MetadataError",
    "MapItemsTooLarge", "MissingOutputs", "NoRunContext", "ReferenceFreed", "ReferenceRefused", "ObjectExpired", "ObjectNotWritten", "RunEnded", "ServiceUnavailable",
    "StoreFailure", "TaskError", "Unauthorized", "UndeclaredOutput", "UndeclaredRead", "UnknownObject",
    "UnknownRun", "UnknownWorkflow",
]


class StoreFailure(FuncsionError):
    """The data path (daemon or storage functions) failed; ``__cause__`` has the detail."""

    retryable = True


class TaskError(FuncsionError):
    """A task broke a rule of its workflow."""

    retryable = False


class UndeclaredRead(TaskError):
    pass


class MissingOutputs(TaskError):
    pass


class NoRunContext(TaskError):
    pass


class ReferenceRefused(TaskError):
    """An offloaded value's reference was forged, altered, or made by another execution."""


class ReferenceFreed(TaskError):
    """An offloaded value was read after its last declared reader committed (the message
    names that state)."""


class MapItemsTooLarge(TaskError):
    """``sdk.offload_items``: the references to a Map's items would not fit in the state (the
    message names the limit and the ``chunk_items`` that fits)."""


class TaskFailed(TaskError):
    """A task attempt failed; ``cause`` is the SDK error, ``retryable`` whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool, cause: str) -> None:
        super().__init__(message)
        self.retryable = retryable  # per instance here, per class elsewhere
        self.cause = cause
        #: raised after the handler returned (no frame of the handler's to show): the local
        #: platform's worker then shows no stack
        self.after_return = False


class FatalTaskError(TaskFailed):
    """A task attempt failed in a way no retry can fix (its class name is the error name Lambda
    and Step Functions report, so retriers can tell it apart)."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message, retryable=False, cause=cause)


#: Error names (Lambda's ``errorType``, Step Functions' ``Error``) that no retry can fix: a task's
#: SDK error that is not retryable, ``sdk.get``/``sdk.put`` in a handler without ``@sdk.task``
#: (there is no decorator to wrap it in ``FatalTaskError``), a result that is not JSON, a handler
#: that cannot be loaded.
NON_RETRYABLE_ERRORS: tuple[str, ...] = (
    FatalTaskError.__name__, NoRunContext.__name__, "Runtime.MarshalError", "Runtime.ImportModuleError",
    "Runtime.HandlerNotFound", "Runtime.UserCodeSyntaxError",
)


def is_retryable(exc: BaseException) -> bool:
    """Whether a task that raised ``exc`` may succeed when tried again (see the module docstring)."""
    return bool(getattr(exc, "retryable", True))


def retryable_error_name(name: str | None) -> bool:
    """Whether a failure reported only by its error name may go away on a retry."""
    return name not in NON_RETRYABLE_ERRORS
