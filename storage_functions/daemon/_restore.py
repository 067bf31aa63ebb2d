"""Daemon restart without loss: the object table written through to the durable
log (``_durable``) and rebuilt from it when a daemon starts on the same buffer
directory after a kill -9.

The daemon calls five hooks: ``put`` (a version is about to become readable:
logged before the PUT is acknowledged, with the place of its bytes when they
are in a buffer segment), ``uploaded`` (COS copies landed, one record a batch
and one per pack), ``freed`` (keys freed: logged before their bytes go),
``deletes`` (COS deletes queued, then done) and, at start, ``restore`` then
``verify`` once it listens. ``restore`` puts every live
version of the log back in the table, readable at once: its chunk places are
reserved again, its buffered bytes (its segment range or its own file, when the
upload had not finished) are queued for upload, and without them its COS copy is
looked for; a packed version's pack is counted again, and the COS deletes the
log holds as queued (a kill cut them off, or a pack went up without its
record) are issued again. Buffer files and segments no live version needs (a PUT cut short by
the kill, a free whose file outlived it) are deleted. ``verify`` asks every function that should hold
chunks what it holds (STAT); chunks it still holds (a warm instance that
outlived the daemon, as on Lambda) are used as they are, the others are stored
there again from the buffer file or COS, a few workers at a time. Until a
chunk is back its GETs decode around it or read COS (first-d).

Objects freed while the daemon was down are not resurrected: their drops were
not acknowledged, so the control loop is offered them again, and runs that
ended meanwhile are dropped by its start-up sweep (``Daemon.sweep_runs``).
Not covered: chunk places a standalone daemon changed after a function loss
(they are logged as first placed).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..protocol import Frame, Op, Status, drain
from ._control_ship import TableShipper, restore_table, table_prefix
from ._durable import TABLE_LOG, DurableLog
from ._objects import ObjectVersion, Stripe, chunk_key
from ._store_events import ChunkStored, Restored

if TYPE_CHECKING:
    from ._host import RestoreHost

__all__ = ["DurableTable", "version_record", "version_from_record"]

log = logging.getLogger("storage_functions.daemon")


def version_record(obj: ObjectVersion) -> dict[str, Any]:
    """What the log keeps of a readable version (``put`` record's ``m``); ``buf``: where
    a buffer segment holds its bytes (``[segment, offset, length]``), if one does."""
    held = obj.held
    return {"size": obj.size, "cos_key": obj.cos_key, "buf": held.place() if held is not None else None,
            "readers": obj.readers,
            "alloc": [list(a) for a in obj.alloc] if obj.alloc is not None else None,
            "stripes": [{"d": st.d, "p": st.p, "fs": st.fs, "ol": st.ol, "cl": st.cl, "crcs": list(st.crcs),
                         "places": [list(pl) if pl is not None else None for pl in st.places], "off": st.offset}
                        for st in obj.stripes]}


def version_from_record(key: str, version: int, m: dict[str, Any]) -> ObjectVersion:
    """The table's version from a log record (readable; buffer and upload state unset)."""
    stripes = [Stripe(int(s["d"]), int(s["p"]), int(s["fs"]), int(s["ol"]), int(s["cl"]),
                      [int(c) for c in s["crcs"]],
                      [(int(p[0]), int(p[1]), int(p[2])) if p is not None else None for p in s["places"]],
                      int(s.get("off", 0)))
               for s in m.get("stripes", [])]
    alloc = m.get("alloc")
    pack = m.get("pack")
    readers = m.get("readers")  # the PUT's read count (a broadcast's copies are readied by it)
    return ObjectVersion(key, version, size=int(m.get("size", 0)), stripes=stripes, state="ready",
                         readers=readers if isinstance(readers, int) and readers > 0 else 0,
                         cos_key=str(m.get("cos_key", "")),
                         pack=(str(pack[0]), int(pack[1])) if isinstance(pack, list) and len(pack) == 2 else None,
                         alloc=[(a[0], int(a[1]), int(a[2]), int(a[3])) for a in alloc] if alloc else None)


class DurableTable:
    """The daemon's hooks onto its durable log ``<buffer_dir>/_table.log``."""

    def __init__(self, daemon: RestoreHost, *, workers: int = 4) -> None:
        self.daemon = daemon
        self.log = DurableLog(os.path.join(daemon.buffer_dir, TABLE_LOG), fsync=daemon.config.buffer_fsync)
        self.workers = workers
        self.restored: list[ObjectVersion] = []
        self._pending = 0
        self._idle = threading.Condition()
        self._open = False
        self.shipper: TableShipper | None = None
        self.restored_from_cos = 0          # bytes of the log restored from COS at start

    # -- hooks while serving ----------------------------------------------------------
    def put(self, obj: ObjectVersion) -> None:
        self.log.append({"o": "put", "k": obj.key, "v": obj.version, "m": version_record(obj)})
        self._ship_now()

    def _ship_now(self) -> None:
        """A synchronous shipper (``control_ship_lag_s = 0``) ships the record just logged."""
        s = self.shipper
        if s is not None and s.synchronous:
            s.ship_once()

    def uploaded(self, objs: list[ObjectVersion]) -> None:
        """COS copies of ``objs`` landed (one record, and one per pack they went up in)."""
        alone = [o for o in objs if o.pack is None]
        packs: dict[str, list[list[Any]]] = {}
        for o in objs:
            if o.pack is not None:
                packs.setdefault(o.pack[0], []).append([o.key, o.version, o.pack[1]])
        for pack, members in packs.items():
            self.log.append({"o": "pk", "c": pack, "kv": members})
        if len(alone) == 1:
            self.log.append({"o": "up", "k": alone[0].key, "v": alone[0].version})
        elif alone:
            self.log.append({"o": "ups", "kv": [[o.key, o.version] for o in alone]})
        self._ship_now()

    def deletes(self, queued: bool, cos_keys: list[str]) -> None:
        """COS objects about to be deleted (``queued``; a restart deletes them if the kill
        comes first), or whose delete was done."""
        if cos_keys:
            self.log.append({"o": "dq" if queued else "dd", "c": cos_keys})
            self._ship_now()

    def freed(self, keys: Iterable[str]) -> None:
        live = self.log.image.live
        held = [k for k in keys if k in live]
        if held:
            self.log.append({"o": "free", "k": held})
            self._ship_now()

    def moved(self, obj: ObjectVersion) -> None:
        """A chunk of ``obj`` the metadata server moved (GC compaction) landed at its new place:
        a restart restores the version's allocation and places as they are now."""
        if obj.key in self.log.image.live:
            self.log.append({"o": "mv", "k": obj.key, "v": obj.version,
                             "a": [list(a) for a in obj.alloc] if obj.alloc is not None else None,
                             "p": [[list(pl) if pl is not None else None for pl in st.places] for st in obj.stripes]})
            self._ship_now()

    def evicted(self, keys: Iterable[str]) -> None:
        """The chunks of ``keys``' versions left function memory (``Daemon.evict``): a restart
        restores them without places (read from the buffer or COS), not into memory again."""
        live = self.log.image.live
        held = [k for k in keys if k in live]
        if held:
            self.log.append({"o": "ev", "k": held})
            self._ship_now()

    def close(self) -> None:
        if self.shipper is not None:
            self.shipper.stop()             # ships what is left
            self.shipper = None
        self.log.close()

    # -- start --------------------------------------------------------------------------
    def restore(self) -> int:
        """Rebuild the table from the log (before the daemon accepts connections); returns
        the versions restored."""
        d = self.daemon
        c = d.config
        shipping = c.control_ship_lag_s is not None and d.cos is not None
        prefix = table_prefix(c.cos_prefix, c.state_id) if shipping else ""
        if prefix and not os.path.exists(self.log.path):     # a new host: the table is in COS
            self.restored_from_cos = restore_table(d.cos, prefix, self.log.path)
        img = self.log.open()
        self._open = True
        d.counters["table_restored_from_cos_bytes"] = self.restored_from_cos
        if prefix:
            self.shipper = TableShipper(self.log, d.cos, prefix, lag_s=c.control_ship_lag_s or 0.0)
            self.shipper.ship_once()
            self.shipper.start()
        d.counters["daemon_restarts"] = self.log.earlier_starts
        if self.log.torn_bytes:
            log.warning("durable table %s: cut a torn record of %d bytes from its end", self.log.path,
                        self.log.torn_bytes)
        keep: set[str] = set()
        for key, version, meta in img.versions():
            obj = version_from_record(key, version, meta)
            obj.uploaded = bool(meta.get("uploaded"))
            has_file = not obj.uploaded and d.buffer.recover(obj, meta.get("buf"))
            if not obj.uploaded and not has_file and d.cos is not None:
                obj.uploaded = self._in_cos(obj.cos_key)  # it landed; the kill came before the record
            if has_file and obj.held is not None and obj.held.seg is None:
                keep.add(os.path.basename(d.buffer.path_for(obj)))
            elif not obj.uploaded and not has_file:
                d.count("restore_memory_only")
                log.warning("%r version %d: neither its buffer file nor a COS copy survived; readable only "
                            "while its functions still hold its chunks", key, version)
            d._do(Restored(obj=obj, now=time.monotonic()))  # in the table, its places reserved again
            self.restored.append(obj)
        d.buffer.sweep(keep)
        for obj in self.restored:
            if obj.held is not None:
                d.buffer.submit(obj)
            elif obj.uploaded and obj.pack is not None:
                d.buffer.adopt_pack(obj.pack[0])
        if img.deletes:  # queued before the kill, or a pack that went up unrecorded
            d.buffer.delete_later(sorted(img.deletes), logged=True)
        d.counters["restored_objects"] = len(self.restored)
        if self.restored:
            log.info("restored %d object versions from %s (%d earlier daemon processes)", len(self.restored),
                     self.log.path, self.log.earlier_starts)
        return len(self.restored)

    def _in_cos(self, cos_key: str) -> bool:
        try:
            return bool(self.daemon.cos.exists(cos_key))
        except Exception as exc:  # noqa: BLE001 - COS unreachable now: the buffer file is gone anyway
            log.warning("COS lookup of %s failed: %r", cos_key, exc)
            return False

    def verify(self) -> None:
        """Once the daemon listens: check every function that should hold restored chunks,
        and store again the ones it does not (background workers)."""
        by_fn: dict[int, list[tuple[ObjectVersion, int, int]]] = {}
        for obj in self.restored:
            for s, st in enumerate(obj.stripes):
                for i, pl in enumerate(st.places):
                    if pl is not None:
                        by_fn.setdefault(pl[0], []).append((obj, s, i))
        self.restored = []
        if not by_fn:
            return
        q: queue.Queue[tuple[int, list[tuple[ObjectVersion, int, int]]] | None] = queue.Queue()
        with self._idle:
            self._pending += len(by_fn)
        for item in sorted(by_fn.items()):
            q.put(item)
        for n in range(min(self.workers, len(by_fn))):
            q.put(None)
            threading.Thread(target=self._worker, args=(q,), daemon=True, name=f"sion-restore-{n}").start()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every restored chunk was found or stored again (or given up)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    # -- workers --------------------------------------------------------------------------
    def _worker(self, q: queue.Queue[tuple[int, list[tuple[ObjectVersion, int, int]]] | None]) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            try:
                self._check_function(*item)
            except Exception:  # noqa: BLE001 - one function's failure must not stop the others
                log.exception("restoring the chunks of function %d failed", item[0])
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _live(self, obj: ObjectVersion) -> bool:
        return self.daemon.table.latest(obj.key, obj.version) is obj

    def _check_function(self, fn: int, chunks: list[tuple[ObjectVersion, int, int]]) -> None:
        d = self.daemon
        h = d._handle(fn)
        try:
            held = d.function_memory(h.name, timeout_s=d.config.invoke_timeout_s)
        except Exception as exc:  # noqa: BLE001 - no answer: store everything again
            log.info("restore: %s did not say what it holds (%r)", h.name, exc)
            held = {}
        entries = held.get("entries") or {}
        for obj, s, i in chunks:
            st = obj.stripes[s]
            pl = st.places[i]
            if pl is None or not self._live(obj):
                continue
            ckey = chunk_key(obj.key, obj.version, s, i)
            if entries.get(ckey) == [pl[1], pl[2], st.cl]:  # the warm instance still holds it: counted again
                d._do(ChunkStored(obj=obj, stripe=s, index=i, place=pl, now=time.monotonic()))
                d.count("reattached_chunks")
                continue
            self._store_again(obj, s, i, pl, ckey)

    def _store_again(self, obj: ObjectVersion, s: int, i: int, pl: tuple[int, int, int], ckey: str) -> None:
        d = self.daemon
        st = obj.stripes[s]
        data = d._read_chunk(obj, s, i)
        if data is None:
            d.count("restore_unreadable_chunks")
            return
        done = threading.Event()
        fn, block, off = pl

        def replied(f: Frame | None, sock: Any) -> None:
            try:
                if f is not None and f.paylen and sock is not None:
                    drain(sock, f.paylen)
                if f is None or f.status != Status.OK:
                    d.count("restore_unreadable_chunks")
                    return
                # counted in the ledger, or deleted again when it was freed while it travelled
                out = d._do(ChunkStored(obj=obj, stripe=s, index=i, place=pl, now=time.monotonic()))
                if not out:
                    d.count("restored_chunks")
            finally:
                done.set()

        d.handles[fn].request(Op.PUT, ckey, replied, a=block, b=off, crc=st.crcs[i], payload=data,
                              meta={"restore": 1},  # never over a live entry (its place was reused)
                              large=st.cl >= d.config.large_threshold)
        done.wait(d.config.put_timeout_s)
