"""Errors of the storage layer.

``storage_functions`` runs inside storage Lambdas and may import only the
standard library, boto3 and ``funcsion_errors``, whose ``FuncsionError`` is
the root here too; the SDK wraps these in ``StoreFailure`` at its boundary.

    FuncsionError                (funcsion_errors)
    └── StorageError
        ├── COSError                 an object-store call failed (after its retries for transient errors)
        │   ├── COSNotFound          no such key in the object store
        │   ├── InvalidKey           a key the object store cannot hold (also a ValueError)
        │   └── COSConfigError       a COS URL or option that cannot be used (also a ValueError)
        ├── PlatformError            the (local or AWS) Lambda platform refused or failed
        │   ├── PlatformConfigError  a platform setting (argument or FUNCSION_* variable) is invalid
        │   │                        (also a ValueError); names the field
        │   ├── FunctionNotDeployed  invoke/kill of a name that was never deployed
        │   ├── InvocationFailed     the handler raised, timed out, ran out of memory, or its
        │   │                        instance died; carries error_type/error_message/stack_trace
        │   ├── ConcurrencyLimit     more concurrent instances than the configured limit
        │   ├── InvalidPayload       an event or result that is not JSON or is over the size limit
        │   │                        (also a ValueError)
        │   ├── DeployError          packaging or creating/updating a Lambda function failed
        │   └── ForkServerError      the local platform's fork server could not start, import its
        │                            modules or fork (instances then start fresh interpreters)
        ├── StoreError               the data path (daemon, storage functions) failed
        │   ├── ObjectTooLarge       over the configured maximum object size
        │   ├── NoRoom               the pool has no room where the metadata server placed an
        │   │                        object (a function outside it); the SDK writes it to COS
        │   ├── UnknownKey           no such key/version in the store
        │   ├── ChunkCorrupt         a chunk failed its checksum (recovered from parity/COS when possible)
        │   ├── NotEnoughChunks      fewer than d chunks reachable and no COS copy
        │   ├── ManifestError        a storage function's insertion log in COS does not continue its
        │   │                        hash chain (also a ValueError; recovery uses the daemon's table)
        │   └── AuthError            a missing or wrong run token / invocation secret
        ├── ControlError             the daemon's control loop cannot follow the metadata server
        │                            as configured (e.g. another block size)
        ├── TlsError                 a TLS setting cannot be used: an unreadable certificate, key or
        │                            CA, or a certificate that does not match the advertised name
        │                            (also a ValueError)
        └── ProtocolError            a peer sent a frame this side cannot parse
"""

from __future__ import annotations

from funcsion_errors import FuncsionError

__all__ = [
    "StorageError",
    "BufferTooSmall",
    "COSError",
    "COSNotFound",
    "InvalidKey",
    "COSConfigError",
    "PlatformError",
    "ForkServerError",
    "PlatformConfigError",
    "FunctionNotDeployed",
    "InvocationFailed",
    "ConcurrencyLimit",
    "InvalidPayload",
    "DeployError",
    "StoreError",
    "ObjectTooLarge",
    "NoRoom",
    "UnknownKey",
    "ChunkCorrupt",
    "NotEnoughChunks",
    "ManifestError",
    "AuthError",
    "ControlError",
    "TlsError",
    "ProtocolError",
]


class StorageError(FuncsionError):
    """Root of the storage layer's errors."""


class COSError(StorageError):
    pass


class COSNotFound(COSError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "not found"


class InvalidKey(COSError, ValueError):
    pass


class COSConfigError(COSError, ValueError):
    pass


class PlatformError(StorageError):
    pass


class PlatformConfigError(PlatformError, ValueError):
    pass


class FunctionNotDeployed(PlatformError):
    pass


class InvocationFailed(PlatformError):
    """An invocation did not return a result.

    ``reason`` is one of ``"error"`` (the handler raised), ``"timeout"``,
    ``"oom"`` (over its memory size), ``"killed"`` (the instance died or was
    killed, e.g. by fault injection), ``"init"`` (the handler could not be
    imported), ``"marshal"`` (the result is not JSON), ``"shutdown"`` (the
    platform stopped). ``error_type``/``error_message``/``stack_trace`` follow
    Lambda's error payload (``errorType``, ``errorMessage``, ``stackTrace``);
    the local platform's ``stack_trace`` is the whole formatted traceback (the
    handler's frames, causes included), AWS's the frames it sent.
    """

    def __init__(
        self,
        message: str,
        *,
        function_name: str | None = None,
        request_id: str | None = None,
        reason: str = "error",
        error_type: str | None = None,
        error_message: str | None = None,
        stack_trace: str = "",
    ) -> None:
        super().__init__(message)
        self.function_name = function_name
        self.request_id = request_id
        self.reason = reason
        self.error_type = error_type
        self.error_message = error_message
        self.stack_trace = stack_trace


class ConcurrencyLimit(PlatformError):
    pass


class InvalidPayload(PlatformError, ValueError):
    pass


class DeployError(PlatformError):
    pass


class ForkServerError(PlatformError):
    pass


class StoreError(StorageError):
    pass


class ObjectTooLarge(StoreError):
    pass


class NoRoom(StoreError):
    pass


class BufferTooSmall(StoreError, ValueError):
    """``get_into`` was given a buffer smaller than the object (``size`` says how large)."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


class UnknownKey(StoreError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown key"


class ChunkCorrupt(StoreError):
    pass


class NotEnoughChunks(StoreError):
    pass


class ManifestError(StoreError, ValueError):
    """A snapshot or log node that does not continue a function's hash chain."""


class AuthError(StoreError):
    pass


class ControlError(StorageError):
    pass


class ProtocolError(StorageError):
    pass


class TlsError(StorageError, ValueError):
    """A TLS setting cannot be used (``storage_functions.tls``); names the setting and the fix."""
