"""What the daemon's helpers need of the daemon, as Protocols, so that they
depend on these and not on ``Daemon`` (no import cycle): a GET's collector
(``GetHost``) and local recovery (``RecoveryHost``). ``_server.Daemon``
satisfies both."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._config import DaemonConfig
    from ._functions import FunctionHandle
    from ._objects import ObjectTable, ObjectVersion
    from ._outbox import BufferPool

__all__ = ["GetHost", "RecoveryHost"]


class GetHost(Protocol):
    """For ``Collector``: the config, the counters (``count``), the receive-buffer
    pool, the function connections, and a nudge for the GET watchdog."""

    config: DaemonConfig
    pool: BufferPool
    handles: list[FunctionHandle]

    def count(self, name: str, n: int = 1) -> None: ...

    def kick(self) -> None: ...


class RecoveryHost(Protocol):
    """For ``Recovery``: read a chunk from the buffer or COS, store it, and tell the
    store core a lost chunk is back (``recovered``: False when it was freed or
    placed again meanwhile, and the copy just stored was deleted again)."""

    config: DaemonConfig
    counters: dict[str, int]
    handles: list[FunctionHandle]

    @property
    def table(self) -> ObjectTable: ...

    def _read_chunk(self, obj: ObjectVersion, s: int, i: int) -> bytes | None: ...

    def recovered(self, obj: ObjectVersion, s: int, i: int, place: tuple[int, int, int]) -> bool: ...
