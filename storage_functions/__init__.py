"""SION's ServerlessMemory layer: the storage-function runtime that runs inside
a storage Lambda, the client daemon (function pool, placement, queues,
persistent buffer, recovery), COS adapters, the local Lambda platform and the
AWS invoker. Not yet built."""

from __future__ import annotations

__all__: list[str] = []

# COS adapters (storage_functions.cos)
from .cos import COS, LocalCOS, S3COS, RetryPolicy, open_cos  # noqa: E402

__all__ += ["COS", "LocalCOS", "S3COS", "RetryPolicy", "open_cos"]

# invokers (storage_functions.invoker)
from .invoker import AwsInvoker, Invoker, LocalInvoker  # noqa: E402

__all__ += ["Invoker", "LocalInvoker", "AwsInvoker"]

# local Lambda platform (storage_functions.local), imported on first use: the
# storage Lambda's zip leaves local/ out (storage_functions.deploy)
__all__ += ["LocalPlatform", "PlatformConfig"]


def __getattr__(name: str) -> object:
    if name in ("LocalPlatform", "PlatformConfig"):
        from . import local

        return getattr(local, name)
    raise AttributeError(f"module 'storage_functions' has no attribute {name!r}")
