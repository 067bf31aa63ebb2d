"""Local recovery (SION Sec. 5.5): a storage function whose instance was lost
gets its chunks back.

When a new instance answers for a function (its memory is empty), the daemon
hands :class:`Recovery` every chunk that the metadata server had placed there.
A worker reads each chunk from the persistent buffer or its COS copy (checked
against the chunk's CRC: data and parity chunks alike, the COS object holds
all d+p) and stores it again at its place on the new instance. Until a chunk
is back, GETs of its object use the other chunks (first-d) or COS; once it is
back they read it from memory again, so one loss does not turn an object,
small ones included (one uncoded slice), into COS reads for the rest of its
life.

An object freed while its chunks are being recovered is not resurrected: a
chunk is stored again only while its version is still the table's, and one
that landed after a free is deleted at once. Chunks of a daemon that places
chunks itself (no metadata server) are not recovered: after a loss its
allocator reuses the function's blocks.

Not covered: parallel recovery by a group of recovery functions
(``diff_rank``), and rebuilding a chunk from the other chunks when neither
the buffer nor COS has it (it stays missing; first-d decodes around it).
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol import Frame, Op, Status
from ._objects import ObjectVersion, chunk_key

if TYPE_CHECKING:
    from ._host import RecoveryHost

__all__ = ["Recovery", "LostChunk"]

log = logging.getLogger("storage_functions.daemon")


@dataclass(frozen=True, slots=True)
class LostChunk:
    obj: ObjectVersion
    stripe: int
    index: int
    place: tuple[int, int, int]  # (function index, block, offset)


class Recovery:
    """Background workers that store lost chunks again where they were placed."""

    def __init__(self, daemon: RecoveryHost, *, workers: int = 2) -> None:
        self.daemon = daemon
        self._queue: queue.Queue[LostChunk | None] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"sion-recovery-{i}")
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def lost(self, chunks: list[LostChunk]) -> None:
        """Recover these chunks (their function's instance was replaced)."""
        with self._idle:
            self._pending += len(chunks)
        for c in chunks:
            self._queue.put(c)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every chunk handed over so far was recovered or given up."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    # -- workers ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._recover(item)
            except Exception:  # noqa: BLE001 - one chunk's failure must not stop recovery of the rest
                log.exception("recovering chunk %d/%d of %r failed", item.stripe, item.index, item.obj.key)
                self._done(item, ok=False)

    def _live(self, obj: ObjectVersion) -> bool:
        return self.daemon.table.latest(obj.key, obj.version) is obj

    def _recover(self, c: LostChunk) -> None:
        d = self.daemon
        st = c.obj.stripes[c.stripe]
        if not self._live(c.obj) or st.places[c.index] is not None:
            self._done(c, ok=None)        # freed meanwhile, or already stored again by a PUT retry
            return
        data = d._read_chunk(c.obj, c.stripe, c.index)
        d.counters["recovery_cos_reads"] = d.counters.get("recovery_cos_reads", 0) + 1
        if data is None:
            self._done(c, ok=False)
            return
        fn, block, off = c.place
        ckey = chunk_key(c.obj.key, c.obj.version, c.stripe, c.index)

        def replied(f: Frame | None, sock: Any) -> None:
            if f is not None and f.paylen and sock is not None:
                from ..protocol import drain

                drain(sock, f.paylen)
            ok = f is not None and f.status == Status.OK
            if ok:  # the store core places it again, or deletes it if it was freed while it travelled
                d.recovered(c.obj, c.stripe, c.index, c.place)
            self._done(c, ok=ok)

        d.handles[fn].request(Op.PUT, ckey, replied, a=block, b=off, crc=st.crcs[c.index], payload=data,
                              large=st.cl >= d.config.large_threshold)

    def _done(self, c: LostChunk, *, ok: bool | None) -> None:
        d = self.daemon
        if ok:
            d.counters["chunks_recovered"] = d.counters.get("chunks_recovered", 0) + 1
        elif ok is False:
            d.counters["chunks_unrecovered"] = d.counters.get("chunks_unrecovered", 0) + 1
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()
