"""What the daemon's helpers need of the daemon, as Protocols, so that they
depend on these and not on ``Daemon`` (no import cycle): a GET's collector
(``GetHost``, with recovery as a GET sees it: ``Routes``), local recovery
(``RecoveryHost``) and a restart's restore (``RestoreHost``). ``_server.Daemon``
satisfies them all. The other paths declare theirs next to them: a connection's
``_session.SessionHost``, the cache functions' ``_burst_io.CacheHost``, the GC
window's ``_gc_io.GcHost``; the PUT and GET paths are mixins whose class bodies
list what they use of the daemon (``_put.PutPath``, ``_get.GetPath``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._config import DaemonConfig
    from ._functions import FunctionHandle
    from ._objects import ObjectTable, ObjectVersion
    from ._buffer import PersistentBuffer
    from ._outbox import BufferPool
    from ._store_events import Event, Instruction
    from ._burst_io import CacheFunctions
    from ._gc_io import ReadNotes

__all__ = ["GetHost", "RecoveryHost", "RestoreHost", "Routes"]


class Routes(Protocol):
    """Recovery as a GET sees it (``_recovery.Recovery``): the recovery function holding
    a copy of a lost chunk, whether a function is busy recovering, and forgetting a
    copy that turned out gone."""

    def route(self, obj: ObjectVersion, s: int, i: int) -> int | None: ...

    def busy(self, fn: int) -> bool: ...

    def unroute(self, obj: ObjectVersion, s: int, i: int) -> None: ...


class GetHost(Protocol):
    """For ``Collector``: the config, the counters (``count``), the receive-buffer
    pool, the function connections, recovery (copies to reroute a GET to), the
    chunks GETs read (for the GC window), the cache functions (None: none), and a
    nudge for the GET watchdog."""

    config: DaemonConfig
    pool: BufferPool
    handles: list[FunctionHandle]

    @property
    def recovery(self) -> Routes: ...

    @property
    def reads(self) -> ReadNotes: ...

    @property
    def cache_functions(self) -> CacheFunctions | None: ...

    def count(self, name: str, n: int = 1) -> None: ...

    def kick(self) -> None: ...


class RecoveryHost(Protocol):
    """For ``Recovery``: the config, COS, the function connections, the counters
    (``count``), where a chunk was planned, the chunks placed per function, read a
    chunk from the buffer or COS, and tell the store core a lost chunk is back
    (``recovered``: False when it was freed or placed again meanwhile, and the copy
    just stored was deleted again)."""

    config: DaemonConfig
    cos: Any
    handles: list[FunctionHandle]

    @property
    def table(self) -> ObjectTable: ...

    def count(self, name: str, n: int = 1) -> None: ...

    def chunks_on(self, fn: int) -> int: ...

    def _handle(self, index: int) -> FunctionHandle: ...

    def _planned(self, obj: ObjectVersion, s: int, i: int) -> tuple[int, int, int]: ...

    def _read_chunk(self, obj: ObjectVersion, s: int, i: int) -> bytes | None: ...

    def recovered(self, obj: ObjectVersion, s: int, i: int, place: tuple[int, int, int]) -> bool: ...


class RestoreHost(Protocol):
    """For ``DurableTable`` (``_restore``): the buffer and its directory, COS, the
    counters, the store core (``_do``), what a function holds (``function_memory``),
    read a chunk from the buffer or COS, and the function connections."""

    config: DaemonConfig
    cos: Any
    buffer: PersistentBuffer
    buffer_dir: str
    counters: dict[str, int]
    handles: list[FunctionHandle]

    @property
    def table(self) -> ObjectTable: ...

    def count(self, name: str, n: int = 1) -> None: ...

    def _do(self, ev: Event) -> list[Instruction]: ...

    def _handle(self, index: int) -> FunctionHandle: ...

    def _read_chunk(self, obj: ObjectVersion, s: int, i: int) -> bytes | None: ...

    def function_memory(self, name: str, prefix: str = "", timeout_s: float = 10.0) -> dict[str, Any]: ...
