"""Append-only segment files for the persistent buffer's small versions: a PUT
appends its whole version (chunks and trailer, the COS object's bytes) with one
``write`` to the open segment instead of creating, writing and closing a file of
its own. A segment is deleted once it is no longer the one appended to and none
of its versions is still held (each was uploaded or freed).

The files are ``seg-<process token>-<n>.seg`` (0600) in the buffer directory (a
name is never used twice, also across restarts); a version's place is
``(name, offset, length)``, which the durable table logs with the version, so a
daemon killed with -9 finds it again (``adopt``) and ``sweep`` deletes segments
no live version needs. A write is one ``os.write`` to an ``O_APPEND`` file: a
process killed at any point leaves whole versions and perhaps a torn tail that
no log record points at. Covers the files and the counts; not what is in them.
"""

from __future__ import annotations

import os
import re
import secrets
import threading

from ..private_files import FILE_MODE

__all__ = ["SegmentLog", "SEGMENT_RE"]

#: a segment file's name
SEGMENT_RE = re.compile(r"^seg-[0-9a-f]{12}-\d{6}\.seg$")


class SegmentLog:
    """``append(data) -> (name, offset)``; ``release(name)`` once a version appended
    there is no longer held; ``path(name)``. Rolls to a new segment past ``segment_bytes``.
    Thread-safe."""

    def __init__(self, directory: str, *, segment_bytes: int = 64 << 20, fsync: bool = False) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock = threading.Lock()
        self._live: dict[str, int] = {}  # segment -> versions held there
        self._cur: str | None = None
        self._fd: int | None = None
        self._size = 0
        self._token = secrets.token_hex(6)
        self._next = 1
        self.appended = 0  # versions appended
        self.deleted = 0  # segment files deleted

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def append(self, data: bytes | bytearray | memoryview) -> tuple[str, int]:
        """Append ``data``; returns (segment, offset)."""
        with self._lock:
            if self._fd is None or self._size >= self.segment_bytes:
                self._roll_locked()
            assert self._fd is not None and self._cur is not None
            off = self._size
            view = memoryview(data)
            while view:
                k = os.write(self._fd, view)
                view = view[k:]
            if self.fsync:
                os.fsync(self._fd)
            self._size += len(data)
            self._live[self._cur] = self._live.get(self._cur, 0) + 1
            self.appended += 1
            return self._cur, off

    def _roll_locked(self) -> None:
        old = self._cur
        if self._fd is not None:
            os.close(self._fd)
        n = f"seg-{self._token}-{self._next:06d}.seg"
        self._next += 1
        self._fd = os.open(self.path(n), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
                           | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        self._cur, self._size = n, 0
        if old is not None and not self._live.get(old):
            self._delete_locked(old)

    def adopt(self, n: str) -> None:
        """A restarted daemon holds a version in segment ``n`` again."""
        with self._lock:
            self._live[n] = self._live.get(n, 0) + 1

    def release(self, n: str) -> None:
        """A version in segment ``n`` is no longer held (uploaded or freed)."""
        with self._lock:
            left = self._live.get(n, 0) - 1
            if left > 0:
                self._live[n] = left
                return
            self._live.pop(n, None)
            if n != self._cur:
                self._delete_locked(n)

    def _delete_locked(self, n: str) -> None:
        try:
            os.unlink(self.path(n))
            self.deleted += 1
        except FileNotFoundError:
            pass

    def sweep(self) -> int:
        """Delete segment files no held version is in (at start, after ``adopt``); returns how many."""
        gone = 0
        with self._lock:
            for name in os.listdir(self.dir):
                if SEGMENT_RE.match(name) and name not in self._live and name != self._cur:
                    self._delete_locked(name)
                    gone += 1
        return gone

    def files(self) -> list[str]:
        return sorted(n for n in os.listdir(self.dir) if SEGMENT_RE.match(n))

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            cur, self._cur = self._cur, None
            if cur is not None and not self._live.get(cur):
                self._delete_locked(cur)
