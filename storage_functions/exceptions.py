"""Errors of the storage layer.

``storage_functions`` runs inside storage Lambdas and may import only the
standard library and boto3, so its root is its own ``StorageError``; the SDK
maps these to the ``FuncsionError`` tree at its boundary.

    StorageError
    ├── COSError                 an object-store call failed after its retries
    │   └── COSNotFound          no such key in the object store
    ├── PlatformError            the (local or AWS) Lambda platform refused or failed
    │   ├── FunctionNotDeployed  invoke/kill of a name that was never deployed
    │   ├── InvocationFailed     the handler raised, timed out, or its instance died
    │   └── ConcurrencyLimit     more concurrent instances than the configured limit
    ├── StoreError               the data path (daemon, storage functions) failed
    │   ├── ObjectTooLarge       over the configured maximum object size
    │   ├── UnknownKey           no such key/version in the store
    │   ├── ChunkCorrupt         a chunk failed its checksum (recovered from parity/COS when possible)
    │   ├── NotEnoughChunks      fewer than d chunks reachable and no COS copy
    │   └── AuthError            a missing or wrong run token / invocation secret
    └── ProtocolError            a peer sent a frame this side cannot parse
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "COSError",
    "COSNotFound",
    "PlatformError",
    "FunctionNotDeployed",
    "InvocationFailed",
    "ConcurrencyLimit",
    "StoreError",
    "ObjectTooLarge",
    "UnknownKey",
    "ChunkCorrupt",
    "NotEnoughChunks",
    "AuthError",
    "ProtocolError",
]


class StorageError(Exception):
    """Root of the storage layer's errors."""


class COSError(StorageError):
    pass


class COSNotFound(COSError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "not found"


class PlatformError(StorageError):
    pass


class FunctionNotDeployed(PlatformError):
    pass


class InvocationFailed(PlatformError):
    pass


class ConcurrencyLimit(PlatformError):
    pass


class StoreError(StorageError):
    pass


class ObjectTooLarge(StoreError):
    pass


class UnknownKey(StoreError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown key"


class ChunkCorrupt(StoreError):
    pass


class NotEnoughChunks(StoreError):
    pass


class AuthError(StoreError):
    pass


class ProtocolError(StorageError):
    pass
