"""SION's ServerlessMemory layer: the storage-function runtime that runs inside
a storage Lambda, the client daemon (function pool, placement, queues,
persistent buffer, recovery), COS adapters, the local Lambda platform and the
AWS invoker. Not yet built."""

from __future__ import annotations

__all__: list[str] = []

# COS adapters (storage_functions.cos)
from .cos import COS, LocalCOS, S3COS, RetryPolicy, open_cos  # noqa: E402

__all__ += ["COS", "LocalCOS", "S3COS", "RetryPolicy", "open_cos"]

# local Lambda platform (storage_functions.local)
from .local import LocalPlatform, PlatformConfig  # noqa: E402

__all__ += ["LocalPlatform", "PlatformConfig"]
