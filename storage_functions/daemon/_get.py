"""The daemon's GET path (I/O shell): a read of a version still in the
persistent buffer is answered from it (memory, or ``sendfile`` from its file); any other starts a first-d
``Collector`` (``_collect``, around its pure ``_window.GetWindow``), which the
GET watchdog thread moves along; stripes the functions cannot complete are
finished from the buffer or COS. Mixed into ``_server.Daemon``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Protocol

from ..exceptions import NotEnoughChunks, StorageError, UnknownKey
from ..protocol import Frame, Op, Status, pack_header, send_frame, status_for
from ._checks import meta_int
from ._collect import Collector
from ._objects import ObjectVersion, chunk_key
from ._lanes import Lanes

if TYPE_CHECKING:
    from ._buffer import PersistentBuffer
    from ._burst_io import CacheFunctions
    from ._config import DaemonConfig
    from ._gc_io import ReadNotes
    from ._functions import FunctionHandle
    from ._objects import ObjectTable
    from ._outbox import BufferPool
    from ._recovery import Recovery
    from ..throttle import HostLink

__all__ = ["GetPath", "GetPathHost"]

log = logging.getLogger("storage_functions.daemon")


class GetPathHost(Protocol):
    """What the GET path uses of the daemon: the config, COS and the persistent buffer
    (a read-after-write, a fallback), the version table, the counters, the chunks GETs
    read (the GC window), and what a ``Collector`` needs (``_host.GetHost``): the
    receive-buffer pool, the function connections, recovery's routes and the cache
    functions; and the daemon's stop (the watchdog's end)."""

    config: DaemonConfig
    cos: Any
    buffer: PersistentBuffer
    host_link: HostLink
    reads: ReadNotes
    pool: BufferPool
    handles: list[FunctionHandle]
    recovery: Recovery
    cache_functions: CacheFunctions
    _stopping: threading.Event

    @property
    def table(self) -> ObjectTable: ...

    def count(self, name: str, n: int = 1) -> None: ...


if TYPE_CHECKING:
    _Host = GetPathHost
else:  # at run time a plain mixin: the Protocol's stubs never enter Daemon's method order
    _Host = object


class GetPath(_Host):
    """GET: ``_get`` is called by a client connection's thread (``_session``). A mixin
    of ``_server.Daemon``: its methods use the daemon only through ``GetPathHost``;
    the GETs in flight and the watchdog's wake-up are its own."""

    _gets: set[Collector]
    _gets_lock: threading.Lock
    _watch_cond: threading.Condition

    # -- GET ----------------------------------------------------------------------
    def _get(self, sock: socket.socket, lanes: Lanes, f: Frame) -> None:
        """Answer GET ``f`` in its turn among the connection's requests (``lanes``):
        the session thread goes on to the client's next request while the chunks
        come in (a client may pipeline GETs, see ``_lanes``)."""
        arrived = time.monotonic()
        version = f.meta.get("version")
        if version is not None:
            version = meta_int(f.meta, "version", f"GET {f.key!r}")
        obj = self.table.latest(f.key, version)
        if obj is None:
            where = f" on daemon {self.config.daemon_id!r} (an object lives on the one daemon its placement " \
                    "names; ask that one)" if self.config.daemon_id else ""
            raise UnknownKey(f"{f.key!r}{f' version {version}' if version is not None else ''}: no such object{where}")
        self.count("gets")
        if self.host_link.mbps > 0:  # the modelled NIC: the reply starts once its bytes' turn is through
            wire = sum(st.d * st.cl for st in obj.stripes)
            self.host_link.carry(wire, wire, arrived)
        head = pack_header(Op.REPLY, reqid=f.reqid, meta=obj.head_json())
        r = self.buffer.open(obj)
        if r is not None:  # read-after-write from the persistent buffer, in order, on this client's thread
            self.count("buffer_hits")
            self.count("gets_from_buffer")
            self._note_buffer_read(obj)
            lane = lanes.open(0)  # written on this thread once every earlier reply was: holds nothing back
            try:
                # (the previous replies are written: the client read them or its socket holds them)
                lane.wait_head(self.config.get_timeout_s)
                with r:
                    sock.sendall(head)
                    for s, st in enumerate(obj.stripes):
                        for i in range(st.d):
                            send_frame(sock, Op.CHUNK, a=s, b=i, paylen=st.cl)
                            if st.cl:
                                r.send(sock, obj.chunk_offset(s, i), st.cl)
                    send_frame(sock, Op.END, reqid=f.reqid)
            finally:
                lane.finish()
            return
        # no waiting here: the function reader threads hand the chunks to the outbox
        # and the last one adds END; the GET watchdog handles stragglers and fallbacks
        lane = lanes.open(obj.size)
        col = Collector(self, lane, obj, f.reqid, head, window=self.config.get_window, extra=self.config.get_extra)
        with self._gets_lock:
            self._gets.add(col)
        try:
            col.start()
        except StorageError as exc:  # the reply has its lane: end it there, in turn
            col.fail(status_for(exc), str(exc).encode())

    def _note_buffer_read(self, obj: ObjectVersion) -> None:
        """A read served from the buffer is still a read of the chunks the functions hold:
        the GC window hears of it as of a GET asked of them (data read while its upload
        waits, e.g. a coded version in its parity delay, stays hot and is not released)."""
        reads = self.reads
        if not reads.on:
            return
        for s, st in enumerate(obj.stripes):
            for i, pl in enumerate(st.places[:st.d]):
                if pl is not None:
                    reads.note(pl[0], chunk_key(obj.key, obj.version, s, i))

    def _get_watch_loop(self) -> None:
        """Stripes without a chunk for ``get_straggler_s`` (ask the untried
        chunks), stripes that ran out of chunks or of ``get_timeout_s`` since
        they were requested (finish them from the buffer or COS)."""
        c = self.config
        tick = max(0.002, min(0.02, c.get_straggler_s / 4))
        while not self._stopping.is_set():
            with self._watch_cond:
                self._watch_cond.wait(tick)
            now = time.monotonic()
            with self._gets_lock:
                cols = list(self._gets)
            for col in cols:
                try:
                    done, short = col.check(now, c.get_straggler_s, c.get_timeout_s)
                except Exception as exc:  # noqa: BLE001 - one GET's bug must not stop every GET's watchdog
                    log.exception("GET watchdog: %r failed", col.obj.key)
                    col.fail(Status.ERROR, f"{col.obj.key!r}: the GET failed in the daemon: {exc!r}".encode())
                    done, short = True, []
                if done:
                    with self._gets_lock:
                        self._gets.discard(col)
                for s in short:
                    threading.Thread(target=self._fallback_stripe, args=(col, s), daemon=True,
                                     name="sion-get-fallback").start()

    def kick(self) -> None:
        with self._watch_cond:
            self._watch_cond.notify()

    def _fallback_stripe(self, col: Collector, s: int) -> None:
        """Send the chunks of stripe ``s`` that first-d could not get, from
        the buffer or COS; END with an error if there are not enough."""
        have = col.take_over(s, self.config.get_timeout_s)
        if have is None:
            return
        obj = col.obj
        st = obj.stripes[s]
        if col.full(s):
            return
        self.count("cos_fallbacks")
        try:
            for i in range(st.n):
                if col.full(s):
                    break
                if i in have:
                    continue
                data, source = self._read_chunk_from(obj, s, i)
                if data is not None:
                    col.forward(s, i, data, source=source)
            if not col.full(s):
                raise NotEnoughChunks(f"{obj.key!r} version {obj.version}: stripe {s} has {col.got[s]} of "
                                      f"{st.d} chunks and no readable COS copy")
        except StorageError as exc:
            col.fail(status_for(exc), str(exc).encode())
        except OSError as exc:  # a buffer file that went away under the read: this GET fails, not the daemon
            col.fail(Status.ERROR, f"{obj.key!r}: reading stripe {s} failed: {exc!r}".encode())

    def _read_chunk(self, obj: ObjectVersion, s: int, i: int) -> bytes | None:
        return self._read_chunk_from(obj, s, i)[0]

    def _read_chunk_from(self, obj: ObjectVersion, s: int, i: int) -> tuple[bytes | None, str]:
        """Chunk ``i`` of stripe ``s`` from the persistent buffer or else COS, and which
        (``buffer``/``cos``); None when neither has it intact."""
        st = obj.stripes[s]
        data = self.buffer.read(obj, obj.chunk_offset(s, i), st.cl)
        source = "buffer"
        if data is None and self.cos is not None:
            source = "cos"
            src, off = obj.cos_range(s, i)
            try:
                data = self.cos.get_range(src, off, st.cl) if st.cl else b""
            except Exception as exc:  # noqa: BLE001
                log.warning("COS read of %s failed: %r", src, exc)
                return None, source
        if data is None or len(data) != st.cl or zlib.crc32(data) != st.crcs[i]:
            return None, source
        return data, source
