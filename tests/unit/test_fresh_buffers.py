"""``sdk._fresh``: a GET's result received straight into a new ``bytes`` (or
``bytearray``) object, on transparent huge pages when it is large and the kernel
takes the advice (checked in ``/proc/self/smaps``, not assumed)."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import pytest

from sdk._fresh import FRESH_MIN, HUGE_MIN, advise_huge, fresh_bytearray, fresh_bytes

MiB = 1 << 20


def _thp_advisable() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            mode = fh.read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def _huge_bytes_in(start: int, end: int) -> int:
    """AnonHugePages (bytes) of the mappings overlapping ``[start, end)``, from
    /proc/self/smaps (the advice splits the allocation's mapping in up to three)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                inside = lo < end and start < hi
            elif inside and line.startswith("AnonHugePages:"):
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.parametrize("size", [2, FRESH_MIN, 3 * MiB + 17])
def test_a_fresh_bytes_holds_what_was_written_into_its_view(size: int) -> None:
    made = fresh_bytes(size)
    if made is None:
        pytest.skip("no CPython C API here: the client receives into a bytearray")
    obj, view = made
    data = os.urandom(size)
    assert type(obj) is bytes and len(obj) == size and len(view) == size and not view.readonly
    view[:] = data
    view.release()
    assert obj == data and hash(obj) == hash(data)
    assert obj[1:5] == data[1:5] and obj.startswith(data[:7])


def test_a_fresh_bytearray_holds_what_was_written_and_stays_resizable() -> None:
    data = os.urandom(5 * MiB)
    out = fresh_bytearray(len(data))
    assert type(out) is bytearray and len(out) == len(data)
    memoryview(out)[:] = data
    assert out == data
    out.extend(b"tail")  # no buffer export is left behind
    assert out[-4:] == b"tail" and len(out) == len(data) + 4
    assert fresh_bytearray(0) == bytearray() and fresh_bytearray(1) == bytearray(1)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _thp_advisable(),
                    reason="transparent huge pages are off on this machine")
def test_the_advice_backs_fresh_memory_with_huge_pages() -> None:
    """On a fresh anonymous mapping (a large result's memory when malloc maps it; after a
    long run malloc may hand out heap it already backed, which faults less anyway)."""
    size = 40 * MiB
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert advise_huge(address, size)
        m[:] = b"\x01" * size  # the first touch backs it
        assert _huge_bytes_in(address, address + size) >= size - 4 * MiB, "backed with 4 KiB pages"
        assert not advise_huge(address, HUGE_MIN - 4096)  # below HUGE_MIN: no advice
    finally:
        m.close()


def test_a_large_fresh_result_is_advised_over_its_own_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    import sdk._fresh as fresh

    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(fresh, "advise_huge", lambda address, n: seen.append((address, n)) or True)
    size = 8 * MiB
    made = fresh.fresh_bytes(size)
    if made is None:
        pytest.skip("no CPython C API here")
    obj, view = made
    view[:] = b"\x02" * size
    view.release()
    assert seen == [(id(obj) + sys.getsizeof(b"") - 1, size)] and obj == b"\x02" * size
    out = fresh.fresh_bytearray(size)
    assert seen[-1][1] == size and len(seen) == 2 and len(out) == size
