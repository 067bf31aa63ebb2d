"""Recovery of a storage function whose instance was lost (SION Sec. 5.5).

Detection is the function's own (``runtime._log.consistent``: the term, hash and
``diff_rank`` the daemon last heard against the instance's); the daemon learns it
from the HELLO (``lost``) and hands :meth:`Recovery.lost` the chunks its table had
placed there. What to restore is that list joined with the function's insertion
log read back from COS (last snapshot + later nodes, checked along the hash
chain, ``_manifest``): every listed chunk whose object version is still live and
placed there. A chunk of a freed object is never restored nor uploaded; one that
landed after a free is deleted at once.

Local recovery: the storage function itself downloads each chunk from COS into
its planned place (a RECOVER request; its instance serves PUTs and GETs
meanwhile); a chunk not yet in COS (still in the persistent buffer) or that COS
cannot give is pushed by the daemon. Small objects (one uncoded slice) go
first. Until a chunk is back its GETs use the other chunks (first-d), a
recovery function's copy, or COS; once it is back they read it from memory
again, so one loss never turns an object into COS reads for the rest of its
life.

Parallel recovery (Sec. 5.5.2): above ``parallel_recovery_threshold`` lost
chunks holding at least ``parallel_recovery_min_mb`` (a smaller loss is restored
alone about as fast, without doubling the COS reads) the daemon also invokes a recovery group of ``recovery_group_size``
other functions (each serves one storage function at a time); member i
downloads into its cache space the chunks whose key hashes to i modulo the
group size, and GETs of a missing chunk are rerouted to its copy
(:meth:`route`). The storage function starts its own downloads once the
group's are answered (they would compete for COS bandwidth). Service returns to the storage function chunk by chunk as it
restores them; the copies are kept ``recovery_keep_s`` after it finished (a
second loss soon after reuses them), then deleted; a freed object's copies go
at once.

Faults: a storage function killed during recovery fails its RECOVER requests;
they are sent again (up to 3 times), which invokes a new instance, whose loss is
detected in turn and whose recovery merges with the chunks still open. A
recovery function killed loses only copies: its routes are dropped when a new
instance answers or a rerouted GET fails, and the storage function's own
recovery is unaffected.

Not covered: rebuilding a chunk from the other chunks when neither the buffer
nor COS has it (it stays missing; first-d decodes around it); recovering chunks
of a daemon that places chunks itself (after a loss its allocator reuses the
blocks).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..protocol import Frame, Op, Status
from ._manifest import ManifestError, parse_chunk_key, read_manifest
from ._objects import ObjectVersion, chunk_key

if TYPE_CHECKING:
    from ._host import RecoveryHost

__all__ = ["Recovery", "LostChunk"]

log = logging.getLogger("storage_functions.daemon")

#: sends of one chunk to its function before it is given up, and the pause before a resend
#: (a failed connection fails the requests before its function's state says so)
MAX_TRIES = 5
RETRY_PAUSE_S = 0.1

ChunkId = tuple[str, int, int, int]  # (key, version, stripe, index)


@dataclass(frozen=True, slots=True)
class LostChunk:
    obj: ObjectVersion
    stripe: int
    index: int
    place: tuple[int, int, int]  # (function index, block, offset)

    @property
    def cid(self) -> ChunkId:
        return (self.obj.key, self.obj.version, self.stripe, self.index)

    @property
    def ckey(self) -> str:
        return chunk_key(self.obj.key, self.obj.version, self.stripe, self.index)


@dataclass
class _Group:
    """A recovery group serving one storage function."""

    members: list[int]
    copies: dict[int, set[str]] = field(default_factory=dict)  # member -> cached chunk keys
    inflight: int = 0  # copy requests not answered yet
    release: threading.Timer | None = None


class Recovery:
    """Restores lost chunks at their planned places, with a recovery group when many."""

    def __init__(self, daemon: RecoveryHost, *, workers: int = 2) -> None:
        self.daemon = daemon
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._open: dict[ChunkId, LostChunk] = {}  # being recovered
        self._open_on: dict[int, int] = {}  # function -> chunks of it being recovered
        self._tries: dict[ChunkId, int] = {}
        self._routes: dict[ChunkId, int] = {}  # chunk -> recovery function holding a copy
        self._groups: dict[int, _Group] = {}  # storage function -> its group
        self._serving: dict[int, int] = {}  # recovery function -> storage function
        self._rng = random.Random()
        self._starting = 0  # losses whose list is still being read
        self._queue: queue.Queue[LostChunk | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"sion-recovery-{i}")
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    # -- entry points ------------------------------------------------------------------
    def lost(self, chunks: list[LostChunk], fn: int | None = None) -> None:
        """A new instance answered for function ``fn`` (that of ``chunks``) without its
        memory: restore these chunks and the live ones its log lists."""
        if fn is None:
            if not chunks:
                return
            fn = chunks[0].place[0]
        with self._lock:
            self._starting += 1
        threading.Thread(target=self._start, args=(fn, list(chunks)), daemon=True,
                         name=f"sion-recover-{fn}").start()

    def busy(self, fn: int) -> bool:
        """Function ``fn`` is downloading chunks now: its own lost ones, or copies for the
        group it serves. A GET asks it only when the chunks on other functions do not
        suffice (its requests would queue behind the downloads)."""
        if self._open_on.get(fn):
            return True
        owner = self._serving.get(fn)
        g = self._groups.get(owner) if owner is not None else None
        return g is not None and g.inflight > 0

    def route(self, obj: ObjectVersion, s: int, i: int) -> int | None:
        """The recovery function holding a copy of this chunk, if any."""
        return self._routes.get((obj.key, obj.version, s, i))

    def unroute(self, obj: ObjectVersion, s: int, i: int) -> None:
        """A rerouted GET failed: that copy is gone."""
        with self._lock:
            self._routes.pop((obj.key, obj.version, s, i), None)

    def forget(self, obj: ObjectVersion) -> None:
        """``obj`` was freed: delete the copies recovery functions hold of it."""
        per_fn: dict[int, list[str]] = {}
        with self._lock:
            for cid in [c for c in self._routes if c[0] == obj.key and c[1] == obj.version]:
                m = self._routes.pop(cid)
                ckey = chunk_key(*cid)
                per_fn.setdefault(m, []).append(ckey)
                g = self._groups.get(self._serving.get(m, -1))
                if g is not None:
                    g.copies.get(m, set()).discard(ckey)
        self._delete(per_fn)

    def instance_changed(self, fn: int) -> None:
        """A new instance answers for ``fn``: copies it held as a recovery function are gone."""
        with self._lock:
            gone = [cid for cid, m in self._routes.items() if m == fn]
            for cid in gone:
                del self._routes[cid]
            g = self._groups.get(self._serving.get(fn, -1))
            if g is not None:
                g.copies.pop(fn, None)
        if gone:
            self._count("recovery_copies_lost", len(gone))

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every chunk handed over so far was recovered or given up."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._open and not self._starting, timeout_s)

    def wait_servable(self, fn: int, timeout_s: float) -> bool:
        """Wait until every lost chunk of ``fn`` is back or has a copy on a recovery function."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not self._starting and all(cid in self._routes for cid, c in self._open.items() if c.place[0] == fn), timeout_s)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"open": len(self._open), "routes": len(self._routes),
                    "groups": {self.daemon.handles[f].name: [self.daemon.handles[m].name for m in g.members]
                               for f, g in self._groups.items()}}

    def stop(self) -> None:
        with self._lock:
            timers = [g.release for g in self._groups.values() if g.release is not None]
        for t in timers:
            t.cancel()
        for _ in self._threads:
            self._queue.put(None)

    # -- what to recover -----------------------------------------------------------------
    def _start(self, fn: int, chunks: list[LostChunk]) -> None:
        try:
            chunks = chunks + self._from_log(fn, {c.ckey for c in chunks})
        except Exception:  # noqa: BLE001 - the table's list alone still restores what it placed
            log.exception("reading the insertion log of function %d failed", fn)
        with self._idle:
            self._starting -= 1
            self._idle.notify_all()  # nothing new to restore: a wait_idle may be over now
            new = [c for c in chunks if c.cid not in self._open]
            for c in new:
                self._open[c.cid] = c
                self._open_on[c.place[0]] = self._open_on.get(c.place[0], 0) + 1
                self._tries[c.cid] = 0
            g = self._groups.get(fn)
            if g is not None and g.release is not None:  # lost again while its group still holds copies
                g.release.cancel()
                g.release = None
        new.sort(key=lambda c: (len(c.obj.stripes) > 1 or c.obj.stripes[c.stripe].n > 1, c.obj.version))
        cfg = self.daemon.config
        g = None
        lost_bytes = sum(c.obj.stripes[c.stripe].cl for c in new)
        if cfg.recovery_group_size > 0 and len(new) > cfg.parallel_recovery_threshold and \
                lost_bytes >= cfg.parallel_recovery_min_mb * (1 << 20):
            g = self._parallel(fn, new)
        if g is None:
            for c in new:
                self._local(c)
        else:  # the group first: the function's own downloads would compete with it for COS
            for c in new:
                if not c.obj.uploaded:
                    self._local(c)
            with self._idle:
                self._idle.wait_for(lambda: g.inflight == 0, cfg.invoke_timeout_s + 60 * len(new))
            for c in new:
                if c.obj.uploaded:
                    self._local(c)
        self._maybe_finished(fn)

    def _from_log(self, fn: int, known: set[str]) -> list[LostChunk]:
        """Live chunks the function's log lists that the table's scan did not find."""
        d = self.daemon
        if d.cos is None:
            return []
        h = d.handles[fn]
        try:
            manifest = read_manifest(d.cos, d.config.cos_prefix, h.name, h.term, h.hash)
        except ManifestError as exc:
            log.warning("function %s: %s; recovering what the daemon's table placed there", h.name, exc)
            self._count("manifest_errors")
            return []
        self._count("manifest_reads")
        out: list[LostChunk] = []
        for ckey, (block, off, _length, _crc) in manifest.chunks.items():
            if ckey in known:
                continue
            parsed = parse_chunk_key(ckey)
            obj = d.table.latest(parsed[0], parsed[1]) if parsed is not None else None
            if parsed is None or obj is None or obj.alloc is None:
                self._count("recovery_skipped_freed")  # freed (or never readable): not resurrected
                continue
            _, _, s, i = parsed
            if s >= len(obj.stripes) or i >= obj.stripes[s].n:
                continue
            place = d._planned(obj, s, i)
            if place == (fn, block, off) and obj.stripes[s].places[i] is None:
                out.append(LostChunk(obj, s, i, place))
        return out

    def _live(self, c: LostChunk) -> bool:
        return self.daemon.table.latest(c.obj.key, c.obj.version) is c.obj

    # -- local recovery ------------------------------------------------------------------
    def _local(self, c: LostChunk) -> None:
        """The storage function downloads the chunk itself when COS has it, else the daemon pushes it."""
        d = self.daemon
        st = c.obj.stripes[c.stripe]
        if not self._live(c) or st.places[c.index] is not None:
            self._done(c, ok=None)  # freed meanwhile, or already stored again by a PUT retry
            return
        if not (c.obj.uploaded and d.cos is not None):
            self._queue.put(c)
            return
        fn, block, off = c.place

        def replied(f: Frame | None, sock: Any) -> None:
            _drain(f, sock)
            if f is None:
                self._again(c)
            elif f.status == Status.OK:
                self._landed(c)
            else:  # COS could not give it to the function: the daemon reads and pushes it
                self._queue.put(c)

        self._count("recovery_cos_reads")
        d.handles[fn].request(Op.RECOVER, c.ckey, replied, a=block, b=off, crc=st.crcs[c.index],
                              meta=_src(c, st.cl), large=True)

    def _again(self, c: LostChunk, *, push: bool = False) -> None:
        """The instance went away mid-request: send again after a pause (the send invokes
        a new instance, whose loss is detected and merged with what is still open)."""
        with self._lock:
            tries = self._tries.get(c.cid, 0) + 1
            self._tries[c.cid] = tries
        if tries >= MAX_TRIES:
            self._done(c, ok=False)
            return
        t = threading.Timer(RETRY_PAUSE_S * tries, self._queue.put if push else self._local, args=(c,))
        t.daemon = True
        t.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._push(item)
            except Exception:  # noqa: BLE001 - one chunk's failure must not stop recovery of the rest
                log.exception("recovering chunk %d/%d of %r failed", item.stripe, item.index, item.obj.key)
                self._done(item, ok=False)

    def _push(self, c: LostChunk) -> None:
        """The daemon reads the chunk (buffer or COS) and stores it at its place."""
        d = self.daemon
        st = c.obj.stripes[c.stripe]
        if not self._live(c) or st.places[c.index] is not None:
            self._done(c, ok=None)
            return
        data = d._read_chunk(c.obj, c.stripe, c.index)
        self._count("recovery_cos_reads")
        if data is None:
            self._done(c, ok=False)
            return
        fn, block, off = c.place

        def replied(f: Frame | None, sock: Any) -> None:
            _drain(f, sock)
            if f is None:
                self._again(c, push=True)
            elif f.status == Status.OK:
                self._landed(c)
            else:
                self._done(c, ok=False)

        d.handles[fn].request(Op.PUT, c.ckey, replied, a=block, b=off, crc=st.crcs[c.index], payload=data,
                              meta={"restore": 1},  # never over a live entry (its place was reused)
                              large=st.cl >= d.config.large_threshold)

    def _landed(self, c: LostChunk) -> None:
        """The function holds the chunk again: the store core places it there (GETs read it
        there from now on), or deletes it again when it was freed or placed meanwhile."""
        placed = self.daemon.recovered(c.obj, c.stripe, c.index, c.place)
        self._done(c, ok=True if placed else None)

    def _done(self, c: LostChunk, *, ok: bool | None) -> None:
        if ok:
            self._count("chunks_recovered")
        elif ok is False:
            self._count("chunks_unrecovered")
        with self._lock:
            if self._open.pop(c.cid, None) is not None:
                left = self._open_on.get(c.place[0], 0) - 1
                if left > 0:
                    self._open_on[c.place[0]] = left
                else:
                    self._open_on.pop(c.place[0], None)
            self._tries.pop(c.cid, None)
            self._idle.notify_all()
        self._maybe_finished(c.place[0])

    # -- parallel recovery ---------------------------------------------------------------
    def _pick_group(self, fn: int, size: int) -> list[int]:
        """Members for ``fn``'s group: its previous ones if still free, then functions that
        neither serve another group nor are recovering themselves: connected ones holding
        no chunks first, then connected ones, then the rest, at random within each."""
        d = self.daemon
        held = {i: d.chunks_on(i) > 0 for i in range(min(len(d.handles), d.config.max_functions))}
        with self._lock:
            g = self._groups.get(fn)
            recovering = {c.place[0] for c in self._open.values()}
            busy = {m for m, owner in self._serving.items() if owner != fn} | recovering | {fn}
            keep = [m for m in (g.members if g else []) if m not in busy]
            pool = [i for i in range(d.config.max_functions) if i not in busy and i not in keep]
            self._rng.shuffle(pool)
            # warm ones first (SION draws them from the active GC-buckets): no cold start in the
            # way; among them those holding no chunks, whose own loss would not take two at once
            pool.sort(key=lambda i: (not (i < len(d.handles) and d.handles[i].state == "active"),
                                     held.get(i, False)))
            members = (keep + pool)[:size]
            if g is None:
                g = self._groups[fn] = _Group(members)
            for m in g.members:
                if m not in members:
                    self._serving.pop(m, None)
            g.members = members
            for m in members:
                self._serving[m] = fn
                g.copies.setdefault(m, set())
        return members

    def _parallel(self, fn: int, chunks: list[LostChunk]) -> _Group | None:
        """Start the group's copies; returns the group (None: no COS or no free function)."""
        d = self.daemon
        if d.cos is None:
            return None
        members = self._pick_group(fn, d.config.recovery_group_size)
        if not members:
            return None
        self._count("parallel_recoveries")
        with self._lock:
            g = self._groups[fn]
        for c in chunks:
            if not c.obj.uploaded or c.cid in self._routes:
                continue
            m = members[zlib.crc32(c.ckey.encode()) % len(members)]
            with self._lock:
                g.inflight += 1
            self._copy(fn, m, c)
        return g

    def _copy(self, fn: int, m: int, c: LostChunk) -> None:
        d = self.daemon
        st = c.obj.stripes[c.stripe]

        def replied(f: Frame | None, sock: Any) -> None:
            _drain(f, sock)
            ok = f is not None and f.status == Status.OK
            with self._lock:
                g = self._groups.get(fn)
                if g is not None:
                    g.inflight -= 1
                    self._idle.notify_all()
                if not ok:
                    return  # no copy: the storage function's own recovery still brings it back
                keep = g is not None and m in g.members and self._live(c)
                if keep:
                    assert g is not None
                    g.copies.setdefault(m, set()).add(c.ckey)
                    self._routes[c.cid] = m
                    self._idle.notify_all()
            if keep:
                self._count("recovery_copies")
            else:
                self._delete({m: [c.ckey]})

        self._count("recovery_cos_reads")
        d._handle(m).request(Op.RECOVER, c.ckey, replied, crc=st.crcs[c.index],
                             meta=dict(_src(c, st.cl), cache=True), large=True)

    def _maybe_finished(self, fn: int) -> None:
        """Once ``fn`` recovered everything, its group's copies stay ``recovery_keep_s``."""
        with self._lock:
            g = self._groups.get(fn)
            if g is None or g.release is not None or any(c.place[0] == fn for c in self._open.values()):
                return
            g.release = threading.Timer(self.daemon.config.recovery_keep_s, self._release, args=(fn, g))
            g.release.daemon = True
            g.release.start()

    def _release(self, fn: int, g: _Group) -> None:
        with self._lock:
            if self._groups.get(fn) is not g or g.release is None:
                return
            del self._groups[fn]
            per_fn = {m: sorted(keys) for m, keys in g.copies.items() if keys}
            dropped = {cid for cid, m in self._routes.items() if m in g.copies}
            for cid in dropped:
                del self._routes[cid]
            for m in g.members:
                if self._serving.get(m) == fn:
                    del self._serving[m]
        self._delete(per_fn)

    def _delete(self, per_fn: dict[int, list[str]]) -> None:
        for m, keys in per_fn.items():
            if keys:
                self.daemon.handles[m].delete(keys)

    def _count(self, name: str, n: int = 1) -> None:
        self.daemon.count(name, n)


def _drain(f: Frame | None, sock: Any) -> None:
    if f is not None and f.paylen and sock is not None:
        from ..protocol import drain

        drain(sock, f.paylen)


def _src(c: LostChunk, length: int) -> dict[str, Any]:
    """A RECOVER's meta: where the chunk's COS copy is (its version's object, or a pack)."""
    src, off = c.obj.cos_range(c.stripe, c.index)
    return {"src": src, "off": off, "len": length}
