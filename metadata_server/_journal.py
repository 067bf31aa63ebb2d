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
records. Not covered: snapshots/compaction (a long-lived server's journal grows with
its history; start a fresh journal between deployments).
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
                              records, scan)
from ._journal_format import _packer as new_packer
from ._journal_legacy import SQLITE_MAGIC, is_sqlite, open_legacy, read_events, scrub_clear_tokens

__all__ = ["Journal", "JournalBusy", "JournalCorrupt", "SYNC_MODES"]

log = logging.getLogger("funcsion.metadata")
SYNC_MODES = ("off", "normal", "full")
OFF_BUFFER = 1 << 20                # sync="off": bytes of groups held in the process at most
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
    def __init__(self, path: str | Path, *, sync: str = "normal") -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"journal sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.path = Path(path)
        self.sync = sync
        self.seq = 0                # events in the journal
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
                self.seq, self._size = found.events, found.end
                if found.schema != self._schema:
                    os.lseek(fd, self._size, os.SEEK_SET)
                    _write_all(fd, encode_schema(self._schema))
                    self._size = os.lseek(fd, 0, os.SEEK_END)
            os.lseek(fd, self._size, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

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
