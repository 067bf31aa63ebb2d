"""A large version's buffer file written off the relay path (``_buffer``): the
PUT's thread receives into a slot (``space``), sends it on to the function and
hands it over (``advance``); a writer thread writes full slots to the file in
order and gives them back. ``slots`` of ``slot_bytes`` bound what is in flight
(the receiver waits for a free one).

With ``direct`` the writer thread writes full slots with ``O_DIRECT``, past the
page cache. A buffer file is written once and read back rarely (its upload, a
GET before it, a restart), so the page cache gains little from holding it,
and a page it allocates costs more than the copy into it on a virtual machine
whose host backs guest memory on first touch: on the 2-core machine these
notes measure on, writing 120 MiB of new pages into the page cache took
~290 ms of CPU, overwriting pages that already existed 5 ms, and the same
bytes with ``O_DIRECT`` 30-45 ms. Slots are page-aligned anonymous mappings
(what ``O_DIRECT`` needs); only the last, partial slot goes through the page
cache. A file system that refuses ``O_DIRECT`` (tmpfs) gets every slot through
the page cache, and so does a disk slower than ``DIRECT_MIN_MBPS`` (an EBS
volume at its 125 MB/s baseline, where the page cache absorbs a PUT the disk
could not keep up with): the ring times its direct writes (``direct_bytes``,
``direct_s``) and the buffer, over every ``DIRECT_WINDOW`` bytes of them,
stops asking for them when they ran slower (``_buffer``). Writes are ``pwrite`` at the
ring's own offset: the file object's position is not used.
"""

from __future__ import annotations

import collections
import errno
import mmap
import os
import threading
import time
from typing import IO, Any

__all__ = ["FileRing", "DIRECT_MIN_MBPS", "DIRECT_WINDOW"]

#: direct writes slower than this (MB/s) lose to the page cache's (which the disk writes back
#: later); low enough that a busy machine's scheduling delays in the timing do not reach it (this
#: 2-core machine: 2.1-2.4 GB/s idle, ~1 GB/s timed within a loaded benchmark)
DIRECT_MIN_MBPS = 250.0
#: bytes of direct writes the buffer judges their rate over (not a single small file's)
DIRECT_WINDOW = 64 << 20

#: what O_DIRECT needs of a write's offset, length and buffer (a page covers every logical block size)
_ALIGN = mmap.PAGESIZE
_O_DIRECT = getattr(os, "O_DIRECT", 0)


class FileRing:
    def __init__(self, fh: IO[bytes], path: str | None = None, *, direct: bool = False,
                 slot_bytes: int = 512 << 10, slots: int = 4) -> None:
        if slot_bytes % _ALIGN:
            raise ValueError(f"slot_bytes {slot_bytes} is not a multiple of the page size {_ALIGN}")
        self.fh = fh
        self.fd = fh.fileno()
        self.path = path
        self.slot_bytes = slot_bytes
        self.direct = bool(direct and path and _O_DIRECT)  # asked for, and possible here
        self.direct_writes = 0  # slots written past the page cache
        self.direct_bytes = 0  # ... their bytes
        self.direct_s = 0.0  # ... and the seconds their writes took
        self.pos = fh.tell()  # the file offset of the next byte (written before the ring: kept)
        self._unmade = slots  # slots are made as the relay needs them
        self._free: list[Any] = []
        self._todo: collections.deque[tuple[Any, int] | None] = collections.deque()
        self._cond = threading.Condition()
        self._cur: Any = None
        self._off = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="buffer-write")
        self._thread.start()

    def _new_slot(self) -> Any:
        # a page-aligned mapping for O_DIRECT, else any buffer
        return mmap.mmap(-1, self.slot_bytes) if self.direct else bytearray(self.slot_bytes)

    def space(self) -> memoryview:
        """The free tail of the current slot (a new slot once it is full)."""
        if self._cur is None:
            with self._cond:
                if not self._free and self._unmade:
                    self._unmade -= 1
                    self._free.append(self._new_slot())
                self._cond.wait_for(lambda: bool(self._free) or self.error is not None)
                if self.error is not None:
                    raise OSError(f"buffer file write failed: {self.error!r}")
                self._cur, self._off = self._free.pop(), 0
        return memoryview(self._cur)[self._off:]

    def advance(self, n: int) -> None:
        """``n`` bytes of ``space()`` were filled."""
        assert self._cur is not None
        self._off += n
        if self._off == len(self._cur):
            self._hand_over()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            sp = self.space()
            k = min(len(sp), len(view))
            sp[:k] = view[:k]
            self.advance(k)
            view = view[k:]

    def _hand_over(self) -> None:
        if self._cur is not None and self._off:
            with self._cond:
                self._todo.append((self._cur, self._off))
                self._cond.notify_all()
            self._cur = None
        elif self._cur is not None:
            with self._cond:
                self._free.append(self._cur)
            self._cur = None

    def close(self) -> int:
        """Write what is left and wait for it; the file's length (``pos``). Raises the
        writer's error."""
        self._hand_over()
        with self._cond:
            self._todo.append(None)
            self._cond.notify_all()
        self._thread.join()
        for slot in self._free:
            if isinstance(slot, mmap.mmap):
                try:
                    slot.close()
                except BufferError:  # a view of it still held (a failed receive's frame): the GC frees it
                    pass
        self._free.clear()
        if self.error is not None:
            raise OSError(f"buffer file write failed: {self.error!r}")
        return self.pos

    def _open_direct(self) -> int | None:
        """A second descriptor of the file with O_DIRECT; None (and buffered writes from
        then on) when the file system refuses it."""
        assert self.path is not None
        try:
            return os.open(self.path, os.O_WRONLY | _O_DIRECT | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            self.direct = False
            return None

    def _write_slot(self, slot: Any, n: int, direct_fd: int | None) -> None:
        view = memoryview(slot)[:n]
        fd = direct_fd if direct_fd is not None and n % _ALIGN == 0 and self.pos % _ALIGN == 0 else self.fd
        t = time.perf_counter()
        while view:
            k = os.pwrite(fd, view, self.pos)
            self.pos += k
            view = view[k:]
        if fd == direct_fd:
            self.direct_writes += 1
            self.direct_bytes += n
            self.direct_s += time.perf_counter() - t

    def _run(self) -> None:
        direct_fd: int | None = None
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._todo))
                    item = self._todo.popleft()
                if item is None:
                    return
                slot, n = item
                try:
                    if self.error is None:
                        if direct_fd is None and self.direct:
                            direct_fd = self._open_direct()
                        self._write_slot(slot, n, direct_fd)
                except BaseException as exc:  # noqa: BLE001 - handed to the PUT's thread
                    self.error = exc
                with self._cond:
                    self._free.append(slot)
                    self._cond.notify_all()
        finally:
            if direct_fd is not None:
                os.close(direct_fd)
