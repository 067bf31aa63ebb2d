"""``FileRing``: a large version's buffer file written by a thread of its own, full slots
with O_DIRECT where the file system allows; the file holds exactly what was handed over, in
order, whether the slots went past the page cache or through it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from storage_functions.daemon import _file_ring
from storage_functions.daemon._buffer import PersistentBuffer
from storage_functions.daemon._file_ring import DIRECT_MIN_MBPS, DIRECT_WINDOW, FileRing, SlotPool
from storage_functions.private_files import open_private

SLOT = 64 << 10


def _fill(ring: FileRing, data: bytes) -> None:
    """Receive ``data`` as a socket would: into ``space()`` in odd-sized pieces."""
    view = memoryview(data)
    step = 3 * 4096 + 17
    while view:
        sp = ring.space()
        k = min(len(sp), len(view), step)
        sp[:k] = view[:k]
        ring.advance(k)
        view = view[k:]


@pytest.mark.parametrize("direct", [True, False])
def test_the_file_holds_every_byte_in_order_and_its_length_is_returned(tmp_path: Path, direct: bool) -> None:
    data = os.urandom(10 * SLOT + 12345)
    path = str(tmp_path / "v.buf")
    with open_private(path, "wb") as fh:
        ring = FileRing(fh, path, direct=direct, pool=SlotPool(SLOT), slots=2)
        _fill(ring, data[:7 * SLOT + 100])
        ring.write(data[7 * SLOT + 100:])  # the rest as a copy, like the trailer
        assert ring.close() == len(data)
    assert Path(path).read_bytes() == data
    if direct and ring.direct:  # the file system took O_DIRECT: every full slot went past the page cache
        assert ring.direct_writes == 10 and ring.direct_bytes == 10 * SLOT and ring.direct_s > 0
    else:
        assert ring.direct_writes == ring.direct_bytes == 0


def test_a_disk_slower_than_the_page_cache_loses_direct_writes_for_the_next_files(tmp_path: Path) -> None:
    buf = PersistentBuffer(str(tmp_path / "buf"), None)
    try:
        assert buf.direct_io
        buf.direct_measured(0, 0.0)  # no direct writes (tmpfs): nothing learnt
        mb = DIRECT_WINDOW / 1e6
        buf.direct_measured(4 << 20, 4.2 / (DIRECT_MIN_MBPS / 10))  # one slow small file decides nothing
        assert buf.direct_io
        buf.direct_measured(DIRECT_WINDOW - (4 << 20), mb / (DIRECT_MIN_MBPS * 4))  # the window: over the threshold
        assert buf.direct_io
        buf.direct_measured(DIRECT_WINDOW, mb / (DIRECT_MIN_MBPS * 2))
        assert buf.direct_io
        buf.direct_measured(DIRECT_WINDOW, mb / (DIRECT_MIN_MBPS / 2))  # an EBS volume at its 125 MB/s baseline
        assert not buf.direct_io
    finally:
        buf.close()


def test_a_file_system_that_refuses_o_direct_gets_every_slot_through_the_page_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.open

    def refuse(p: str, flags: int, *a: int) -> int:
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT refused (tmpfs)")
        return real(p, flags, *a)

    monkeypatch.setattr(_file_ring.os, "open", refuse)
    data = os.urandom(3 * SLOT + 1)
    path = str(tmp_path / "v.buf")
    with open_private(path, "wb") as fh:
        ring = FileRing(fh, path, direct=True, pool=SlotPool(SLOT))
        _fill(ring, data)
        assert ring.close() == len(data)
    assert Path(path).read_bytes() == data and not ring.direct and ring.direct_writes == 0


def test_a_write_error_reaches_the_puts_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: memoryview, pos: int) -> int:
        raise OSError(errno.ENOSPC, "no space left on device")

    monkeypatch.setattr(_file_ring.os, "pwrite", full)
    path = str(tmp_path / "v.buf")
    with open_private(path, "wb") as fh:
        ring = FileRing(fh, path, direct=False, pool=SlotPool(SLOT), slots=1)
        with pytest.raises(OSError, match="no space left"):
            _fill(ring, os.urandom(4 * SLOT))  # the receiver waits for a slot the writer gave back failed
            ring.close()
    with pytest.raises(ValueError, match="page size"):
        SlotPool(1000)


def test_closing_while_a_view_of_a_slot_is_still_held_does_not_fail(tmp_path: Path) -> None:
    """A receive that failed mid-slot leaves a view of the slot in its traceback; the PUT's
    abort closes the ring all the same."""
    path = str(tmp_path / "v.buf")
    with open_private(path, "wb") as fh:
        ring = FileRing(fh, path, direct=True, pool=SlotPool(SLOT))
        held = ring.space()
        held[:5] = b"abcde"
        ring.advance(5)
        assert ring.close() == 5
        del held
    assert Path(path).read_bytes() == b"abcde"


def test_the_next_ring_reuses_the_slots_a_clean_ring_gave_back_and_a_failed_ones_are_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SlotPool(SLOT, keep=4)
    for n in range(3):  # three versions of 5 slots each, through a ring of 2 slots
        data = os.urandom(5 * SLOT)
        path = str(tmp_path / f"v{n}.buf")
        with open_private(path, "wb") as fh:
            ring = FileRing(fh, path, direct=True, pool=pool, slots=2)
            _fill(ring, data)
            assert ring.close() == len(data)
        assert Path(path).read_bytes() == data  # a reused slot carries none of the last version's bytes
    assert pool.made == 2 and pool.idle() == 2

    def full(fd: int, data: memoryview, pos: int) -> int:
        raise OSError(errno.ENOSPC, "no space left on device")

    monkeypatch.setattr(_file_ring.os, "pwrite", full)
    path = str(tmp_path / "failed.buf")
    with open_private(path, "wb") as fh:
        ring = FileRing(fh, path, direct=False, pool=pool, slots=2)
        with pytest.raises(OSError, match="no space left"):
            _fill(ring, os.urandom(4 * SLOT))
        with pytest.raises(OSError, match="no space left"):
            ring.close()
    assert pool.idle() == 0  # unmapped: a view of a failed ring's slot may still be held
    pool.give(pool.take())
    assert pool.made == 3 and pool.idle() == 1
    pool.clear()
    assert pool.idle() == 0
