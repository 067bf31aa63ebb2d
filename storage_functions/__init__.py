"""SION's ServerlessMemory layer: the storage-function runtime that runs inside
a storage Lambda, the client daemon (function pool, placement, queues,
persistent buffer, recovery), COS adapters, the local Lambda platform and the
AWS invoker.

Importing the package imports none of them: each name below loads its
subpackage on first use, so a deployment zip carries only what its handler
imports (a storage Lambda: ``runtime``, ``protocol``, ``exceptions``; a task:
the SDK's client side, see ``storage_functions.deploy``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cos import COS, S3COS, LocalCOS, RetryPolicy, open_cos
    from .invoker import AwsInvoker, Invoker, LocalInvoker
    from .local import LocalPlatform, PlatformConfig

# public name -> the submodule that defines it
_LAZY = {
    "COS": "cos", "LocalCOS": "cos", "S3COS": "cos", "RetryPolicy": "cos", "open_cos": "cos",
    "Invoker": "invoker", "LocalInvoker": "invoker", "AwsInvoker": "invoker",
    "LocalPlatform": "local", "PlatformConfig": "local",
}

__all__ = ["COS", "LocalCOS", "S3COS", "RetryPolicy", "open_cos", "Invoker", "LocalInvoker", "AwsInvoker",
           "LocalPlatform", "PlatformConfig"]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'storage_functions' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
