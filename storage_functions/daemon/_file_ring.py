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

Slots come from a :class:`SlotPool` the buffer shares between its rings: a ring that
closes cleanly gives its slots back, already backed, for the next PUT. A new mapping's
pages cost a fault each on first touch, and an ``O_DIRECT`` write pins them again
(``get_user_pages``), on every PUT otherwise. Slots are 2 MiB: a 100 MiB PUT's 117 MiB
go out in 61 writes (and hand-overs to the writer thread) instead of 241 of 512 KiB. On the
2-core machine the 100 MiB PUT took 111-122 ms with pooled 2 MiB slots against 121-128 with
a new 512 KiB mapping per slot (3 alternating runs of ``funcsion bench store``).
"""

from __future__ import annotations

import collections
import errno
import mmap
import os
import threading
import time
from typing import IO, Any

__all__ = ["FileRing", "SlotPool", "DIRECT_MIN_MBPS", "DIRECT_WINDOW", "SLOT_BYTES"]

#: direct writes slower than this (MB/s) lose to the page cache's (which the disk writes back
#: later); low enough that a busy machine's scheduling delays in the timing do not reach it (this
#: 2-core machine: 2.1-2.4 GB/s idle, ~1 GB/s timed within a loaded benchmark)
DIRECT_MIN_MBPS = 250.0
#: bytes of direct writes the buffer judges their rate over (not a single small file's)
DIRECT_WINDOW = 64 << 20

#: what O_DIRECT needs of a write's offset, length and buffer (a page covers every logical block size)
_ALIGN = mmap.PAGESIZE
_O_DIRECT = getattr(os, "O_DIRECT", 0)

#: a ring's slot: the unit of one write to its file (and of what it waits for)
SLOT_BYTES = 2 << 20


class SlotPool:
    """Page-aligned slots of ``slot_bytes`` (anonymous mappings, what ``O_DIRECT`` needs),
    kept for reuse: ``take`` one (a kept one, else a new one), ``give`` it back (kept while
    fewer than ``keep`` are, else unmapped). Thread-safe."""

    def __init__(self, slot_bytes: int = SLOT_BYTES, keep: int = 8) -> None:
        if slot_bytes <= 0 or slot_bytes % _ALIGN:
            raise ValueError(f"slot_bytes {slot_bytes} is not a positive multiple of the page size {_ALIGN}")
        self.slot_bytes = slot_bytes
        self.keep = keep
        self.made = 0  # slots mapped over the pool's life (the rest were reused)
        self._kept: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._kept:
                return self._kept.pop()
            self.made += 1
        return mmap.mmap(-1, self.slot_bytes)

    def give(self, slot: mmap.mmap) -> None:
        with self._lock:
            if len(self._kept) < self.keep:
                self._kept.append(slot)
                return
        _unmap(slot)

    def idle(self) -> int:
        """Slots kept for reuse now."""
        with self._lock:
            return len(self._kept)

    def clear(self) -> None:
        with self._lock:
            kept, self._kept = self._kept, []
        for slot in kept:
            _unmap(slot)


def _unmap(slot: mmap.mmap) -> None:
    try:
        slot.close()
    except BufferError:  # a view of it still held (a failed receive's frame): the GC frees it
        pass


class FileRing:
    """``FileRing(fh, path, direct=..., pool=..., slots=...)``: ``space``/``advance`` (or
    ``write``) the version's bytes, then ``close``. Its slots are ``pool``'s (a pool of its
    own by default, unmapped at close)."""

    def __init__(self, fh: IO[bytes], path: str | None = None, *, direct: bool = False,
                 pool: SlotPool | None = None, slots: int = 4) -> None:
        self.pool = pool if pool is not None else SlotPool(keep=0)
        self.fh = fh
        self.fd = fh.fileno()
        self.path = path
        self.slot_bytes = self.pool.slot_bytes
        self.direct = bool(direct and path and _O_DIRECT)  # asked for, and possible here
        self.direct_writes = 0  # slots written past the page cache
        self.direct_bytes = 0  # ... their bytes
        self.direct_s = 0.0  # ... and the seconds their writes took
        self.pos = fh.tell()  # the file offset of the next byte (written before the ring: kept)
        self._unmade = slots  # slots are taken from the pool as the relay needs them
        self._free: list[mmap.mmap] = []
        self._todo: collections.deque[tuple[Any, int] | None] = collections.deque()
        self._cond = threading.Condition()
        self._cur: Any = None
        self._off = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="buffer-write")
        self._thread.start()

    def space(self) -> memoryview:
        """The free tail of the current slot (a new slot once it is full)."""
        if self._cur is None:
            with self._cond:
                if not self._free and self._unmade:
                    self._unmade -= 1
                    self._free.append(self.pool.take())
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
        free, self._free = self._free, []
        for slot in free:  # back to the pool; a failed ring's may still be viewed (its frame): not reused
            if self.error is None:
                self.pool.give(slot)
            else:
                _unmap(slot)
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
