"""SION's client daemon: function pool, PlaceChunk placement, two request
queues per function, persistent buffer with write-behind COS upload, first-d
GETs, versions and free; and its control loop (``Follower``), which carries
out the metadata server's storage instructions."""

from __future__ import annotations

from ._config import DaemonConfig
from ._control import ControlError, Follower, Instruction, InstructionSource, SourceView
from ._objects import ObjectTable, ObjectVersion, Stripe, chunk_key, cos_object_key
from ._placement import BlockAllocator, PlaceChunk, Placement, PoolExhausted
from ._server import Daemon

__all__ = ["Daemon", "DaemonConfig", "PlaceChunk", "Placement", "BlockAllocator", "PoolExhausted",
           "ObjectTable", "ObjectVersion", "Stripe", "chunk_key", "cos_object_key",
           "Follower", "Instruction", "InstructionSource", "SourceView", "ControlError"]
from ._local import RUNTIME_HANDLER, LocalStore  # noqa: E402
from ._aws import AwsStore  # noqa: E402

__all__ += ["LocalStore", "RUNTIME_HANDLER", "AwsStore"]
