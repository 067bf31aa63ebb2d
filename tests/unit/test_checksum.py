"""storage_functions.checksum: zlib's CRC-32 values, from ISA-L for large buffers."""

from __future__ import annotations

import mmap
import os
import time
import zlib

import pytest

from storage_functions import checksum
from storage_functions.checksum import ISAL_MIN, buffer_address, crc32


@pytest.mark.parametrize("n", [0, 1, ISAL_MIN - 1, ISAL_MIN, ISAL_MIN + 13, 806677])
def test_same_values_as_zlib_for_every_buffer_kind(n: int) -> None:
    data = os.urandom(n + 5)
    want = zlib.crc32(data[5:])
    m = mmap.mmap(-1, max(1, n + 5))
    m[:n + 5] = data
    for buf in (data[5:], bytearray(data[5:]), memoryview(data)[5:], memoryview(m)[5:5 + n]):
        assert crc32(buf) == want
    assert crc32(data[5 + n // 2:], crc32(data[5:5 + n // 2])) == want  # chained, as zlib's
    del buf
    m.close()


def test_isal_is_used_here_and_is_faster_than_zlib() -> None:
    assert checksum._ISAL_CRC is not None, "ISA-L ships with pyeclib, installed here"
    data = os.urandom(32 << 20)

    def best(fn: object) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            fn(data)  # type: ignore[operator]
            times.append(time.perf_counter() - t)
        return min(times)

    assert best(crc32) < best(zlib.crc32)


def test_buffer_address_refuses_a_strided_view() -> None:
    with pytest.raises(BufferError):
        with buffer_address(memoryview(bytes(100))[::2]):
            pass
