"""The storage-function runtime (the code inside a storage Lambda).

Deploy with handler ``storage_functions.runtime.handler``.
"""

from __future__ import annotations

from ._handler import FunctionState, handler, leave_at, reset_state
from ._log import LogState, log_key, node_hash, snapshot_key
from ._memory import BlockMemory, Entry, MemoryFull

__all__ = ["handler", "leave_at", "reset_state", "FunctionState", "LogState", "log_key", "node_hash",
           "snapshot_key", "BlockMemory", "Entry", "MemoryFull"]
