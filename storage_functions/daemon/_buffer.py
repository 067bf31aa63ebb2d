"""The persistent buffer (SION Sec. 5.3.2) and its write-behind: a version's
bytes (the COS object: chunks, then the trailer) are held by the daemon while
they stream to the functions; a PUT returns when both hold them, and uploader
threads copy them to COS behind it, retrying until they land.

Where a version is held (:class:`Held`):

- a small one (up to ``memory_max_object`` bytes) in memory, and on disk by one
  ``write`` appending it to a segment file (``_segments``) -- no file of its own
  on the PUT's path; past ``memory_bytes`` of held versions a new one keeps only
  its segment copy (spilled: read back from the file);
- a large one in a file of its own (from 4 MiB written by a thread of its own
  off the relay, with ``O_DIRECT`` where the file system allows: the PUT's thread
  receives into slots it hands over, ``_file_ring``), uploaded
  without reading it into the process (``COS.put_file``: a hard link for the local COS, ``upload_file``
  multipart for S3).

When (``_upload_plan``): SION uploads at once; a coded version waits
``parity_delay_s`` (its parity covers the loss of up to ``p`` functions, the
buffer holds it whole) and is never uploaded if it is freed meanwhile; a chunk
loss expedites it. Due versions go up in batches, with one durable-log record
per batch; an uploader waits ``pack_linger_s`` past the first due version so
that versions PUT together go up together. Beyond SION, the small in-memory
versions of one run in a batch go up as ONE COS object (a pack; each version's
bytes at its offset, ``ObjectVersion.pack``), deleted once its last version is
freed: one COS PUT and one DELETE for up to ``batch`` versions instead of one
each, and far less of the daemon's CPU per small PUT. A version freed before its
upload started is never uploaded; one freed during its upload is deleted from
COS right after (a pack's share of it is let go). COS deletes run on the
uploader threads, never on the caller's, and are logged before and after
(``on_deletes``): a restarted daemon re-issues the ones a kill cut off, and
deletes a pack that went up without its record. ``close`` uploads what is still
queued without waiting for due times (bounded by ``close_timeout_s``).

Covers holding, reading back, the upload queue and retries; not the wire.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import socket
import threading
import time
from typing import IO, Any, Callable

from ..private_files import open_private, private_dir
from ._file_ring import DIRECT_MIN_MBPS, DIRECT_WINDOW, FileRing, SlotPool
from ._objects import TRAILER, Held, ObjectVersion, cos_object_key
from ._runs import run_of
from ._segments import SegmentLog
from ._upload_plan import UploadPolicy, UploadQueue

__all__ = ["PersistentBuffer", "Held", "BufferWriter", "BufferReader"]

log = logging.getLogger("storage_functions.daemon")

_BUF = ".buf"
#: COS requests a skipped upload saves: its PUT and the DELETE its free would have needed
REQUESTS_PER_SKIP = 2


class BufferReader:
    """An open hold on a version's bytes (valid after the buffer drops it: the file
    stays open, the memory referenced)."""

    def __init__(self, held: Held, fh: IO[bytes] | None) -> None:
        self.mem = memoryview(held.mem) if held.mem is not None else None
        self.fh = fh
        self.base = held.base

    def send(self, sock: socket.socket, off: int, n: int) -> None:
        if self.mem is not None:
            sock.sendall(self.mem[off:off + n])
        else:
            assert self.fh is not None
            sock.sendfile(self.fh, self.base + off, n)

    def read(self, off: int, n: int) -> bytes:
        if self.mem is not None:
            return bytes(self.mem[off:off + n])
        assert self.fh is not None
        return os.pread(self.fh.fileno(), n, self.base + off)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        if self.mem is not None:
            self.mem.release()

    def __enter__(self) -> BufferReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BufferWriter:
    """A version being written: ``write`` each piece as it arrives (or, for a large
    one, receive straight into ``space()`` and ``advance``), then ``finish`` (the
    version is held: ``obj.held``) or ``abort``. ``ring``: the large version's
    off-path file writer (None: a small one, in memory)."""

    def __init__(self, buf: PersistentBuffer, obj: ObjectVersion, small: bool, expires_at: float | None,
                 size: int = 0) -> None:
        self.buf, self.obj, self.expires_at = buf, obj, expires_at
        self.mem: bytearray | None = bytearray() if small else None
        self.path: str | None = None
        self.fh: IO[bytes] | None = None
        self.ring: FileRing | None = None
        if not small:
            self.path = buf.path_for(obj)
            self.fh = open_private(self.path, "wb")
            if size >= buf.ring_min_object:  # a thread of its own pays off past a few MiB
                self.ring = FileRing(self.fh, self.path, direct=buf.direct_io, pool=buf.slots)

    def write(self, piece: bytes | bytearray | memoryview) -> None:
        if self.mem is not None:
            self.mem += piece
        elif self.ring is not None:
            self.ring.write(piece)
        else:
            assert self.fh is not None
            self.fh.write(piece)

    def finish(self, tail: bytes) -> Held:
        b = self.buf
        if self.mem is not None:
            self.mem += tail
            seg, off = b.segments.append(self.mem)
            held = Held(self.obj, len(self.mem), mem=self.mem, path=b.segments.path(seg), base=off, seg=seg,
                        expires_at=self.expires_at)
            if not b._reserve(len(self.mem)):
                held.mem = None  # over the memory budget: served from the segment
        else:
            assert self.fh is not None and self.path is not None
            if self.ring is not None:
                self.ring.write(tail)
                length = self.ring.close()  # written with pwrite: the file object's position is not used
                b.direct_measured(self.ring.direct_bytes, self.ring.direct_s)
            else:
                self.fh.write(tail)
                length = self.fh.tell()
            if b.fsync:
                self.fh.flush()
                os.fsync(self.fh.fileno())
            self.fh.close()
            held = Held(self.obj, length, path=self.path, expires_at=self.expires_at)
        with self.obj.lock:
            self.obj.held = held
        return held

    def abort(self) -> None:
        if self.ring is not None:
            try:
                self.ring.close()
            except OSError:
                pass
        if self.fh is not None:
            self.fh.close()
            _unlink(self.path)
        self.mem = None


class PersistentBuffer:
    """``PersistentBuffer(directory, cos)``: ``writer`` per PUT, then ``submit`` (the
    version is readable); ``open``/``read`` while it holds a version, ``discard`` when
    it is freed, ``expedite`` when a chunk of it is lost; ``stats``, ``wait_idle``,
    ``close``. ``cos=None``: nothing is uploaded (the buffer holds versions until freed)."""

    def __init__(self, directory: str, cos: Any, *, workers: int = 2, policy: UploadPolicy | None = None,
                 fsync: bool = False, max_backoff_s: float = 5.0, memory_bytes: int = 256 << 20,
                 memory_max_object: int = 1 << 20, ring_min_object: int = 4 << 20, batch: int = 32,
                 close_timeout_s: float = 5.0, pack_linger_s: float = 0.01, pack_max_bytes: int = 16 << 20,
                 cos_prefix: str = "sion", direct_io: bool = True,
                 on_uploaded: Callable[[list[ObjectVersion]], None] | None = None,
                 on_deletes: Callable[[bool, list[str]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = directory
        private_dir(directory)
        self.cos = cos
        self.policy = policy or UploadPolicy()
        self.fsync = fsync
        self.max_backoff_s = max_backoff_s
        self.memory_bytes, self.memory_max_object = memory_bytes, memory_max_object
        self.ring_min_object = ring_min_object  # versions from this size are written to their file off the relay
        self.direct_io = direct_io  # ... with O_DIRECT where the file system allows (``_file_ring``)
        self.slots = SlotPool()  # the rings' slots, reused from one large version to the next
        self._direct_bytes, self._direct_s = 0, 0.0  # direct writes since the last judgement: bytes, seconds
        self.batch = max(1, batch)
        self.close_timeout_s = close_timeout_s
        self.on_uploaded = on_uploaded  # the durable table's record of the COS copies
        self.on_deletes = on_deletes  # ... and of COS deletes queued (True) and done (False)
        self.pack_linger_s = pack_linger_s
        self.pack_max_bytes = pack_max_bytes  # 0: every version goes up on its own, as in SION
        self.cos_prefix = cos_prefix
        self._packs: dict[str, list[int]] = {}  # pack COS key -> [live versions, versions]
        self.clock = clock
        self.segments = SegmentLog(directory, fsync=fsync)
        self._cond = threading.Condition()
        self._q: UploadQueue[Held] = UploadQueue()
        self._deletes: collections.deque[str] = collections.deque()
        self._outstanding = 0
        self._deletes_pending = 0  # COS deletes queued or under way
        self._closing = False
        self._mem_lock = threading.Lock()
        self.mem_held = 0  # bytes of versions held in memory
        self.uploads = 0
        self.skipped = 0  # versions freed before their upload: never uploaded
        self.skipped_coded = 0  # of those, ones that waited for the parity delay (would have gone up in SION)
        self.retries = 0
        self.deletes = 0  # COS deletes of versions freed after (or while) they were uploaded
        self.spilled = 0  # small versions over the memory budget, held in their segment only
        self.expedited = 0  # versions uploaded early: a chunk was lost, or cache functions load them
        self.pack_uploads = 0  # COS objects that carried several versions
        self.packed = 0  # versions that went up in one
        self.pack_deletes_saved = 0  # DELETEs a pack's one delete stood in for
        self.paused = threading.Event()
        self.paused.set()  # set = running
        self._workers = [threading.Thread(target=self._run, daemon=True, name=f"upload-{i}")
                         for i in range(workers if cos is not None else 0)]
        for t in self._workers:
            t.start()

    # -- holding ------------------------------------------------------------------------
    def path_for(self, obj: ObjectVersion) -> str:
        safe = obj.cos_key.replace("/", "_")
        return os.path.join(self.dir, f"{safe}{_BUF}")

    def writer(self, obj: ObjectVersion, size: int, expires_at_ms: int | None = None) -> BufferWriter:
        """A writer for version ``obj`` of ``size`` object bytes; ``expires_at_ms``: its
        predicted expiry (wall clock, ms), if the PUT said."""
        expires = None
        if expires_at_ms:
            expires = self.clock() + (expires_at_ms / 1000.0 - time.time())
        return BufferWriter(self, obj, size <= self.memory_max_object, expires, size)

    def direct_measured(self, n: int, seconds: float) -> None:
        """A large version's file had ``n`` bytes written with ``O_DIRECT`` in ``seconds``: once
        ``DIRECT_WINDOW`` bytes of them ran slower than ``DIRECT_MIN_MBPS`` (a slow disk), the
        next files go through the page cache."""
        with self._mem_lock:
            self._direct_bytes += n
            self._direct_s += seconds
            total, took = self._direct_bytes, self._direct_s
            if total < DIRECT_WINDOW or not self.direct_io:
                return
            self._direct_bytes, self._direct_s = 0, 0.0
            mbps = total / max(took, 1e-9) / 1e6
            if mbps >= DIRECT_MIN_MBPS:
                return
            self.direct_io = False
        log.warning("buffer files: O_DIRECT writes ran at %.0f MB/s (< %.0f): writing through the page "
                    "cache from now on", mbps, DIRECT_MIN_MBPS)

    def _reserve(self, n: int) -> bool:
        with self._mem_lock:
            if self.mem_held + n > self.memory_bytes:
                self.spilled += 1
                return False
            self.mem_held += n
            return True

    def _let_go(self, held: Held) -> None:
        """The buffer no longer holds ``held`` (taken off its version under its lock)."""
        if held.mem is not None:
            with self._mem_lock:
                self.mem_held -= held.length
        if held.seg is not None:
            self.segments.release(held.seg)
        else:
            _unlink(held.path)

    def drop(self, obj: ObjectVersion) -> None:
        """A PUT that failed after ``finish``: let its bytes go (nothing was queued)."""
        with obj.lock:
            held, obj.held = obj.held, None
        if held is not None:
            self._let_go(held)

    def open(self, obj: ObjectVersion) -> BufferReader | None:
        """The version's bytes while the buffer holds them and COS does not yet."""
        with obj.lock:
            held = obj.held
            if obj.uploaded or held is None:
                return None
            fh = None
            if held.mem is None:
                try:
                    fh = open(held.path or "", "rb")
                except FileNotFoundError:
                    return None
            return BufferReader(held, fh)

    def read(self, obj: ObjectVersion, off: int, n: int) -> bytes | None:
        r = self.open(obj)
        if r is None:
            return None
        with r:
            return r.read(off, n)

    # -- restart --------------------------------------------------------------------------
    def recover(self, obj: ObjectVersion, place: Any) -> bool:
        """A restarted daemon holds ``obj`` again if its bytes survived: its segment range
        (``place``, from the durable log) or its own file. False: neither did."""
        if isinstance(place, list) and len(place) == 3 and isinstance(place[0], str):
            seg, base, length = str(place[0]), int(place[1]), int(place[2])
            path = os.path.join(self.dir, seg)
            if _trailer_ok(path, base, length, obj):
                self.segments.adopt(seg)
                obj.held = Held(obj, length, path=path, base=base, seg=seg)
                return True
            return False
        path = self.path_for(obj)
        if os.path.exists(path):
            obj.held = Held(obj, os.path.getsize(path), path=path)
            return True
        return False

    def sweep(self, keep: set[str]) -> None:
        """At start, after ``recover``: delete version files not in ``keep`` (names) and
        segments no recovered version is in."""
        for name in os.listdir(self.dir):
            if name.endswith(_BUF) and name not in keep:
                _unlink(os.path.join(self.dir, name))
        self.segments.sweep()

    # -- write-behind -------------------------------------------------------------------
    def submit(self, obj: ObjectVersion) -> None:
        """Queue the version's upload, due as the policy says."""
        if self.cos is None:
            return
        with obj.lock:
            held = obj.held
        if held is None:
            return
        minp = min((st.p for st in obj.stripes), default=0)
        due = self.policy.due(self.clock(), minp, held.expires_at)
        with self._cond:
            self._outstanding += 1
            first = self._q.next_due()
            self._q.push(held, due)
            if first is None or due < first:  # else an uploader already waits for an earlier one
                self._cond.notify()

    def poke(self) -> None:
        """Wake the uploaders to look at the clock again (an injected clock moved)."""
        with self._cond:
            self._cond.notify_all()

    def expedite(self, obj: ObjectVersion) -> None:
        """Upload ``obj`` at once: a chunk of it was lost (its parity covers fewer losses now),
        or its readers are about to ask cache functions for it (they load from COS)."""
        with obj.lock:
            held = obj.held
        if held is None:
            return
        with self._cond:
            if self._q.expedite(held, self.clock()):
                self.expedited += 1
                self._cond.notify()

    def discard(self, obj: ObjectVersion) -> None:
        """The version was freed: never upload it, let its bytes go, and delete its COS
        copy (on an uploader thread) if it already got there."""
        with obj.lock:
            obj.state = "freed"
            held, obj.held = obj.held, None
            uploaded = obj.uploaded
        if held is not None:
            self._let_go(held)
            with self._cond:
                if self._q.drop(held):
                    self._skip_locked(held)
                    self._outstanding -= 1
                    self._cond.notify_all()
        if uploaded and self.cos is not None:
            self._release_copy(obj)

    def adopt_pack(self, pack: str) -> None:
        """A restarted daemon's live version whose COS copy is in ``pack``."""
        with self._cond:
            row = self._packs.setdefault(pack, [0, 0])
            row[0] += 1
            row[1] += 1

    def delete_later(self, cos_keys: list[str], *, logged: bool = False) -> None:
        """Delete these COS objects on an uploader thread (logged first unless ``logged``)."""
        if self.cos is None or not cos_keys:
            return
        if not logged and self.on_deletes is not None:
            self.on_deletes(True, list(cos_keys))
        with self._cond:
            self._deletes.extend(cos_keys)
            self._outstanding += len(cos_keys)
            self._deletes_pending += len(cos_keys)
            self._cond.notify()

    def _release_copy(self, obj: ObjectVersion) -> None:
        """``obj`` (uploaded) was freed: delete its COS object, or its pack once no live
        version is in it."""
        if obj.pack is None:
            self.delete_later([obj.cos_key])
            return
        pack = obj.pack[0]
        with self._cond:
            row = self._packs.get(pack)
            if row is None:
                return
            row[0] -= 1
            if row[0] > 0:
                return
            del self._packs[pack]
            self.pack_deletes_saved += row[1] - 1
        self.delete_later([pack])

    def _skip_locked(self, held: Held) -> None:
        self.skipped += 1
        if self.policy.coded(min((st.p for st in held.obj.stripes), default=0)):
            self.skipped_coded += 1

    def wait_durable(self, obj: ObjectVersion, timeout: float) -> bool:
        """Wait until ``obj``'s copy left the buffer: uploaded and logged by ``on_uploaded``, or
        dropped (freed first, or nothing to upload to); False past ``timeout``."""
        if self.cos is None:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: obj.held is None, timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued upload and COS delete is done."""
        with self._cond:
            return self._cond.wait_for(lambda: self._outstanding == 0, timeout)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            queued = len(self._q)
        decided = self.uploads + self.skipped
        return {"uploads": self.uploads, "uploads_skipped": self.skipped,
                "uploads_skipped_coded": self.skipped_coded,
                "uploads_skipped_share": round(self.skipped / decided, 4) if decided else 0.0,
                "cos_requests_saved": REQUESTS_PER_SKIP * self.skipped + self.packed - self.pack_uploads
                + self.pack_deletes_saved, "upload_retries": self.retries,
                "pack_uploads": self.pack_uploads, "packed_versions": self.packed,
                "packs_live": len(self._packs),
                "uploads_expedited": self.expedited, "uploads_queued": queued, "cos_deletes": self.deletes,
                "cos_deletes_pending": self._deletes_pending,
                "buffer_memory_bytes": self.mem_held, "buffer_spilled": self.spilled,
                "upload_delay_s": self.policy.delay_s, "parity_upload_delay_s": self.policy.parity_delay_s}

    def close(self) -> None:
        """Stop the uploaders: what is queued goes up now (no waiting for due times),
        for at most ``close_timeout_s``; what is left stays on disk for a restart."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + self.close_timeout_s
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))
        self.segments.close()
        self.slots.clear()

    # -- uploader threads -------------------------------------------------------------------
    def _next_job(self) -> tuple[str, Any] | None:
        with self._cond:
            while True:
                if self._deletes:
                    return "delete", self._deletes.popleft()
                running = self.paused.is_set()
                nd = self._q.next_due()
                now = self.clock()
                if running and nd is not None and (self._closing or nd + self.pack_linger_s <= now):
                    # past the first due version's linger: everything due goes, in one batch
                    batch = self._q.pop_all(self.batch) if self._closing else self._q.pop_due(now, self.batch)
                    if batch:
                        return "upload", batch
                if self._closing and (not running or not self._q):
                    return None
                timeout = 0.05 if not running else (None if nd is None else max(0.0, nd + self.pack_linger_s - now))
                self._cond.wait(timeout)

    def _run(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            kind, what = job
            if kind == "delete":
                self._delete(what)
                with self._cond:
                    self._outstanding -= 1
                    self._deletes_pending -= 1
                    self._cond.notify_all()
                continue
            done: list[ObjectVersion] = []
            try:
                alone, packs = self._packing(what)
                for group in packs:
                    done.extend(self._upload_pack(group))
                for held in alone:
                    if self._upload(held):
                        done.append(held.obj)
            finally:
                if done and self.on_uploaded is not None:
                    self.on_uploaded(done)
                for obj in done:  # logged: the buffer lets its copy go
                    with obj.lock:
                        held2, obj.held = obj.held, None
                    if held2 is not None:
                        self._let_go(held2)
                with self._cond:
                    self._outstanding -= len(what)
                    self._cond.notify_all()

    def _delete(self, cos_key: str) -> None:
        try:
            self.cos.delete(cos_key)
            with self._cond:
                self.deletes += 1
        except Exception as exc:  # noqa: BLE001 - still logged as queued: a restart tries again
            log.warning("COS delete of %s failed: %r", cos_key, exc)
            return
        if self.on_deletes is not None:
            self.on_deletes(False, [cos_key])

    def _packing(self, batch: list[Held]) -> tuple[list[Held], list[list[Held]]]:
        """(versions that go up alone, packs): the in-memory versions of one run, at most
        ``pack_max_bytes`` a pack; a pack of one goes alone."""
        if self.pack_max_bytes <= 0:
            return batch, []
        alone: list[Held] = []
        groups: dict[str | None, list[list[Held]]] = {}
        for held in batch:
            if held.mem is None or held.length > self.pack_max_bytes:
                alone.append(held)
                continue
            packs = groups.setdefault(run_of(held.obj.key), [[]])
            if packs[-1] and sum(h.length for h in packs[-1]) + held.length > self.pack_max_bytes:
                packs.append([])
            packs[-1].append(held)
        out: list[list[Held]] = []
        for packs in groups.values():
            for group in packs:
                if len(group) == 1:
                    alone.extend(group)
                elif group:
                    out.append(group)
        return alone, out

    def _pack_key(self, run: str | None) -> str:
        """A new pack's COS key: under its run's prefix (a run's end drops it with the rest)."""
        name = f"~pack-{os.urandom(8).hex()}"
        return cos_object_key(self.cos_prefix, f"{run}/{name}" if run else name, 0)

    def _upload_pack(self, group: list[Held]) -> list[ObjectVersion]:
        """Upload ``group``'s live versions as one COS object; the versions still live after."""
        members: list[tuple[Held, memoryview]] = []
        for held in group:
            obj = held.obj
            with obj.lock:
                if obj.state == "freed" or obj.held is not held or held.mem is None:
                    with self._cond:
                        self._skip_locked(held)
                    continue
                obj.uploading = True
                members.append((held, memoryview(held.mem)))
        if not members:
            return []
        pack = self._pack_key(run_of(group[0].obj.key))
        if self.on_deletes is not None:  # a kill before its record: the restart deletes it
            self.on_deletes(True, [pack])
        body = b"".join(m for _, m in members)
        backoff = 0.05
        try:
            while True:
                try:
                    self.cos.put(pack, body)
                    break
                except Exception as exc:  # noqa: BLE001 - retry whatever COS raised
                    nxt = self._back_off(f"pack {pack}", exc, backoff)
                    if nxt is None:
                        return []  # still queued to delete: a restart drops it; the versions stay buffered
                    backoff = nxt
        finally:
            for held, m in members:
                m.release()
                with held.obj.lock:
                    held.obj.uploading = False
        with self._cond:
            self.uploads += len(members)
            self.pack_uploads += 1
            self.packed += len(members)
            self._packs[pack] = [len(members), len(members)]  # before any can be freed as uploaded
        live: list[ObjectVersion] = []
        at = 0
        for held, _ in members:
            obj = held.obj
            with obj.lock:
                obj.pack = (pack, at)
                obj.uploaded = True
                freed = obj.state == "freed"
            at += held.length
            if freed:  # freed while it went up: its share of the pack is let go
                self._release_copy(obj)
            else:
                live.append(obj)
        return live

    def _back_off(self, what: str, exc: Exception, backoff: float) -> float | None:
        """An upload of ``what`` failed: count it and wait ``backoff`` (a close does not wait it
        out); the next back-off, or None when the buffer is closing."""
        with self._cond:
            self.retries += 1
        log.warning("upload of %s failed (%r); retrying in %.2fs", what, exc, backoff)
        with self._cond:
            if self._cond.wait_for(lambda: self._closing, backoff):
                return None
        return min(backoff * 2, self.max_backoff_s)

    def _upload(self, held: Held) -> bool:
        """Upload one version; True when its COS copy landed and it is still live."""
        obj = held.obj
        backoff = 0.05
        while True:
            with obj.lock:
                if obj.state == "freed" or obj.held is not held:
                    with self._cond:
                        self._skip_locked(held)
                    return False
                obj.uploading = True
                mem = held.mem
            try:
                if mem is not None:
                    self.cos.put(obj.cos_key, memoryview(mem))
                else:
                    self.cos.put_file(obj.cos_key, held.path or "", held.base, held.length)
                break
            except Exception as exc:  # noqa: BLE001 - retry whatever COS raised
                nxt = self._back_off(obj.cos_key, exc, backoff)
                if nxt is None:
                    return False
                backoff = nxt
            finally:
                with obj.lock:
                    obj.uploading = False
        with self._cond:
            self.uploads += 1
        with obj.lock:
            obj.uploaded = True
            freed = obj.state == "freed"
        if freed:  # freed while it went up: take the copy back
            if self.on_deletes is not None:
                self.on_deletes(True, [obj.cos_key])
            self._delete(obj.cos_key)
            return False
        return True


def _trailer_ok(path: str, base: int, length: int, obj: ObjectVersion) -> bool:
    """Whether ``path`` holds ``obj``'s bytes at ``base``: its trailer ends them."""
    try:
        with open(path, "rb") as fh:
            if length < TRAILER.size or os.fstat(fh.fileno()).st_size < base + length:
                return False
            n, magic = TRAILER.unpack(os.pread(fh.fileno(), TRAILER.size, base + length - TRAILER.size))
            if magic != b"SION" or n > length - TRAILER.size:
                return False
            meta = os.pread(fh.fileno(), n, base + length - TRAILER.size - n)
    except OSError:
        return False
    try:
        m = json.loads(meta)
    except ValueError:
        return False
    return isinstance(m, dict) and m.get("key") == obj.key and m.get("version") == obj.version


def _unlink(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
