"""The journal: every event that changed the state, in order, in an append-only log.

The core is deterministic (events carry their time, run ids come from a
counter, token digests are in the ``StartRun`` event), so replaying the journal into
a fresh ``MetadataState`` rebuilds workflows, runs, counters, commit buffers,
allocations and the pending storage instructions exactly.

Format (``_journal_format``): length-prefixed msgpack records with a CRC each;
one record per ``append`` call, which the server makes once per loop round for
everything that round applied (group commit), before any reply of the round
goes out. Opening a journal checks every record: a torn tail (a crash during
the last write) is truncated, never misread; a damaged record with valid ones
after it is ``JournalCorrupt``.

Durability (``sync``): ``"normal"`` (default) writes each group to the file
with one ``write`` before the replies, so a killed server process loses
nothing it answered; ``"full"`` also ``fdatasync``\\ s each group (power loss);
``"off"`` keeps up to 1 MiB of groups in the process between writes (benchmarks:
a killed server loses them).

At rest: a run's token is never written, only its SHA-256 digest (``_tokens``).
A journal of an earlier version (SQLite) is converted when opened: its clear
tokens are first overwritten by their digests inside the SQLite file
(``_journal_legacy``), then its events are written to a new log beside it,
which replaces it by a rename; its ``-wal``/``-shm`` files are removed. A
journal file the server creates is mode 0600, in directories it creates with
mode 0700; existing files and directories keep theirs (a converted journal
keeps the old file's mode).

One writer: the journal holds an exclusive ``flock`` on its file while open, so
a second server on the same file gets ``JournalBusy`` instead of interleaving
records.

Compaction (``compact``): the owner hands a snapshot of the live state after
the journal's ``seq`` events (``_snapshot``); it is written to
``<path>.snapshot`` (a temporary file, fsync, rename) and the log starts
afresh in a new file whose first record says how many events precede it
(its ``base``), put in place by a rename. ``wants_compaction`` says when:
once the log holds more than ``compact_bytes`` and more than twice the last
snapshot, so the files stay proportional to what is live and the cost of
snapshots is amortised over the events they fold. A crash between the two
renames leaves a snapshot ahead of the log's base; opening finishes the
compaction (the log's events after the snapshot are rewritten into a file
based at it). ``replay`` yields the events after the snapshot; the owner
restores the snapshot (``snapshot``) first. ``read_since`` gives a shipper
(``_ship``) the log's whole records after an offset, under the writer's lock.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from funcsion_errors import FuncsionError

from ._events import Event
from ._journal_format import (MAGIC, JournalCorrupt, current_schema, decode_record, encode_record, encode_schema,
                              records, scan, unframe_snapshot)
from ._journal_format import _packer as new_packer
from ._journal_legacy import SQLITE_MAGIC, is_sqlite, open_legacy, read_events, scrub_clear_tokens

__all__ = ["Journal", "JournalBusy", "JournalCorrupt", "SYNC_MODES"]

log = logging.getLogger("funcsion.metadata")
SYNC_MODES = ("off", "normal", "full")
OFF_BUFFER = 1 << 20                # sync="off": bytes of groups held in the process at most
COMPACT_BYTES = 8 << 20             # default: compact once the log holds this much (and twice the snapshot)
SNAPSHOT_SUFFIX = ".snapshot"
_CONVERTING = ".converting"


class JournalBusy(FuncsionError):
    """The journal file is open for writing elsewhere."""


def _create_private(path: Path) -> None:
    """Create ``path``'s missing directories (0700) and ``path`` itself (0600) if it is missing."""
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Journal:
    def __init__(self, path: str | Path, *, sync: str = "normal", compact_bytes: int = COMPACT_BYTES) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"journal sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.path = Path(path)
        self.sync = sync
        self.seq = 0                # events in the journal (those folded into its snapshot included)
        self.base = 0               # events before the log file's first (in the snapshot)
        self.compact_bytes = compact_bytes
        self.compactions = 0        # snapshots written since it was opened
        self.snapshot_path = self.path.with_name(self.path.name + SNAPSHOT_SUFFIX)
        self._snapshot_size = 0
        self._snapshot_seq = 0
        self.groups = 0             # records (group commits) written since it was opened
        self.migrated = 0           # clear tokens of an old SQLite journal replaced by digests
        self.converted = 0          # events carried over from an old SQLite journal
        self.truncated = 0          # bytes of a torn tail dropped when it was opened
        self._lock = threading.Lock()
        self._packer = new_packer()
        self._held = bytearray()    # sync="off": groups not written yet
        self._fd = -1
        _create_private(self.path)
        self._schema = current_schema()
        with open(self.path, "rb") as f:
            self._lock_file(f.fileno())
            head = f.read(len(SQLITE_MAGIC))
            tmp = self.path.with_name(self.path.name + _CONVERTING)
            if tmp.exists():        # a conversion that did not finish: the old file is intact
                tmp.unlink()
            if is_sqlite(head):
                self._convert(tmp)
            else:
                self._drop_sidecars()
        self._open()

    def _lock_file(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JournalBusy(f"journal {self.path} is open already (another metadata server, or twice in "
                              "this process): a journal has one writer; stop the other server or give this "
                              "one its own --journal") from None

    # -- opening --------------------------------------------------------------------
    def _where(self, exc: Exception) -> JournalCorrupt:
        return JournalCorrupt(f"journal {self.path}: {exc}; move the file aside to start with an empty journal "
                              "(the runs it records are then forgotten), or restore it from a backup")

    def _open(self) -> None:
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._lock_file(fd)     # held until close (the file may be a new one after a conversion)
            size = os.fstat(fd).st_size
            if size and size < len(MAGIC) and MAGIC.startswith(os.pread(fd, size, 0)):
                os.ftruncate(fd, 0)    # a crash while the file was being started
                self.truncated, size = size, 0
            if size == 0:
                _write_all(fd, MAGIC + encode_schema(self._schema))
                os.fsync(fd)
                self._size = os.fstat(fd).st_size
            else:
                with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
                    try:
                        found = scan(mm)
                    except JournalCorrupt as exc:
                        raise self._where(exc) from None
                if found.torn:
                    log.warning("journal %s: dropped a torn tail of %d bytes after its %d events (a crash "
                                "during a write; no reply had gone out for them)", self.path, found.torn,
                                found.events)
                    os.ftruncate(fd, found.end)
                    os.fsync(fd)
                    self.truncated = found.torn
                self.base = found.base
                self.seq, self._size = found.base + found.events, found.end
                if found.schema != self._schema:
                    os.lseek(fd, self._size, os.SEEK_SET)
                    _write_all(fd, encode_schema(self._schema))
                    self._size = os.lseek(fd, 0, os.SEEK_END)
            os.lseek(fd, self._size, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._open_snapshot()

    def _open_snapshot(self) -> None:
        """Check the snapshot against the log; finish a compaction a crash interrupted."""
        if not self.snapshot_path.exists():
            if self.base:
                self.close()
                raise self._where(ValueError(f"the log starts after event {self.base} but its snapshot "
                                             f"{self.snapshot_path} is missing"))
            return
        try:
            blob = self.snapshot_path.read_bytes()
            seq, _ = unframe_snapshot(blob, f"snapshot {self.snapshot_path}")
        except JournalCorrupt as exc:
            self.close()
            raise self._where(exc) from None
        if seq < self.base:
            self.close()
            raise self._where(ValueError(f"its snapshot {self.snapshot_path} holds {seq} events and the log "
                                         f"starts after {self.base}: the snapshot is older than the log"))
        self._snapshot_size, self._snapshot_seq = len(blob), seq
        if seq > self.base:         # a crash between the snapshot's rename and the log's
            after = list(self.replay())[seq - self.base:] if self.seq > seq else []
            self._start_log(seq, after)
            log.warning("journal %s: finished a compaction a crash interrupted (snapshot at event %d)",
                        self.path, seq)

    def _start_log(self, base: int, events: Sequence[Event]) -> None:
        """Replace the log by a new file based at ``base`` holding ``events`` (under the lock or
        while opening)."""
        tmp = self.path.with_name(self.path.name + ".compacting")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, stat.S_IMODE(os.stat(self.path).st_mode))
        try:
            self._lock_file(fd)
            data = MAGIC + encode_schema(self._schema, base)
            if events:
                data += encode_record(events, self._packer)
            _write_all(fd, data)
            os.fsync(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._size, self.base = fd, len(data), base
        self.seq = base + len(events)
        self._held = bytearray()

    # -- compaction ---------------------------------------------------------------------
    def wants_compaction(self) -> bool:
        """Whether the log has grown past ``compact_bytes`` and twice the last snapshot."""
        return self._size + len(self._held) > max(self.compact_bytes, 2 * self._snapshot_size)

    def compact(self, snapshot: bytes) -> None:
        """Fold the log into ``snapshot`` (``_snapshot.encode_snapshot(state, self.seq)``: the state
        after every event appended so far) and start a new log after it."""
        seq, _ = unframe_snapshot(snapshot)
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"journal {self.path} is closed")
            if seq != self.seq:
                raise ValueError(f"a snapshot after event {seq} cannot compact journal {self.path}, which "
                                 f"holds {self.seq} events: snapshot the state after its last append")
            tmp = self.snapshot_path.with_name(self.snapshot_path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _write_all(fd, snapshot)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.snapshot_path)
            _fsync_dir(self.path.parent)
            self._snapshot_size, self._snapshot_seq = len(snapshot), seq
            self._start_log(seq, ())
            self.compactions += 1

    def snapshot(self) -> bytes | None:
        """The snapshot the log follows (None: the log holds every event)."""
        with self._lock:
            if self.base == 0 and not self.snapshot_path.exists():
                return None
            return self.snapshot_path.read_bytes()

    def generation(self) -> tuple[int, bytes | None]:
        """(base, snapshot) of the log as it is now, read together (None: never compacted)."""
        with self._lock:
            if self.base == 0 and not self.snapshot_path.exists():
                return 0, None
            return self.base, self.snapshot_path.read_bytes()

    def read_since(self, base: int, offset: int) -> bytes | None:
        """The log file's bytes after ``offset`` (whole records) if its base is still ``base``,
        else None (it was compacted since)."""
        with self._lock:
            if self._fd < 0 or base != self.base:
                return None
            return os.pread(self._fd, max(0, self._size - offset), offset)

    @property
    def size(self) -> int:
        """Bytes of the log file (its snapshot excluded)."""
        return self._size

    def _drop_sidecars(self) -> None:
        """SQLite's ``-wal``/``-shm`` of a journal that is a log now (a conversion that
        stopped after its rename)."""
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _convert(self, tmp: Path) -> None:
        """Replace an old SQLite journal by a log of the same events (see the module docstring)."""
        mode = stat.S_IMODE(os.stat(self.path).st_mode)
        n = 0
        try:
            db = open_legacy(self.path)
            try:
                self.migrated = scrub_clear_tokens(db, self.path)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                try:
                    os.fchmod(fd, mode)
                    _write_all(fd, MAGIC + encode_schema(self._schema))
                    for batch in read_events(db):
                        _write_all(fd, encode_record(batch, self._packer))
                        n += len(batch)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                db.close()
        except (sqlite3.Error, KeyError, TypeError, ValueError) as exc:
            tmp.unlink(missing_ok=True)
            raise self._where(ValueError(f"an old (SQLite) journal that cannot be read ({exc})")) from None
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self._drop_sidecars()
        self.converted = n
        log.info("journal %s: converted %d events from the old SQLite format", self.path, n)

    # -- writing ----------------------------------------------------------------------
    def append(self, events: Sequence[Event]) -> None:
        """Write ``events`` as one record (a group commit); see ``sync``."""
        if not events:
            return
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"journal {self.path} is closed")
            record = encode_record(events, self._packer)
            if self.sync == "off":
                self._held += record
                if len(self._held) >= OFF_BUFFER:
                    self._write_held()
            else:
                self._write(record)
                if self.sync == "full":
                    os.fdatasync(self._fd)
            self.seq += len(events)
            self.groups += 1

    def _write(self, data: bytes | bytearray) -> None:
        try:
            _write_all(self._fd, data)
        except BaseException:
            # leave no partial record for the next group to follow
            os.ftruncate(self._fd, self._size)
            os.lseek(self._fd, self._size, os.SEEK_SET)
            raise
        self._size += len(data)

    def _write_held(self) -> None:
        if self._held:
            held, self._held = self._held, bytearray()
            self._write(held)

    # -- reading ----------------------------------------------------------------------
    def replay(self) -> Iterator[Event]:
        """Every journaled event, oldest first."""
        with self._lock:
            if self._fd >= 0:
                self._write_held()
            end = self._size
        if end <= len(MAGIC):
            return
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as mm:
            schema = None
            for pos, payload, count in records(mm, end):
                try:
                    events, schema = decode_record(payload, count, schema, pos)
                except (JournalCorrupt, ValueError, TypeError) as exc:
                    raise self._where(exc) from None
                yield from events

    def close(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            try:
                self._write_held()
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
