"""Function memory held by the grain: a block keeps only the grains its entries lie on,
and the pages of a grain no entry covers go back to the kernel (checked against the
process's own resident memory), while whole blocks stay whole."""

from __future__ import annotations

import mmap
import os
import random
import re

import pytest

from storage_functions.runtime._memory import BlockMemory, grain_of

MIB = 1 << 20
G = 64 << 10


def units_of(block: int, offset: int, length: int, block_size: int, grain: int) -> range:
    """The grains an entry lies on, counted the plain way (the entry runs on into the next block)."""
    if length <= 0:
        return range(0)
    start = block * block_size + offset
    return range(start // grain, (start + length - 1) // grain + 1)


def _put(mem: BlockMemory, key: str, block: int, offset: int, data: bytes) -> None:
    entry, views = mem.reserve(key, block, offset, len(data), 0)
    mem.fill(entry, views, data)


def _read(mem: BlockMemory, key: str) -> bytes:
    got = mem.get(key)
    assert got is not None
    return b"".join(bytes(v) for v in got[1])


def _anon_kib() -> int:
    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        text = f.read()
    return int(re.search(r"^Anonymous:\s+(\d+) kB", text, re.M).group(1))  # type: ignore[union-attr]


def test_the_grain_is_checked_against_the_page_and_the_block() -> None:
    assert grain_of(MIB, None) == MIB and grain_of(MIB, 2 * MIB) == MIB and grain_of(MIB, G) == G
    assert grain_of(1024, 512) == 1024  # a block under a page is always whole
    with pytest.raises(ValueError, match="multiple of the page size"):
        grain_of(MIB, 3 * mmap.PAGESIZE)
    assert list(units_of(1, MIB - 10, 20, MIB, G)) == [2 * 16 - 1, 2 * 16]  # runs on into the next block
    assert list(units_of(0, 0, 0, MIB, G)) == []


def test_used_counts_the_grains_entries_lie_on() -> None:
    mem = BlockMemory(MIB, 64 * MIB, G)
    _put(mem, "a", 0, 0, b"a" * 100_000)          # grains 0-1
    _put(mem, "b", 0, 3 * G + 5, b"b" * 10)       # grain 3
    _put(mem, "c", 0, 2 * G - 8, b"c" * 16)       # grains 1-2 (1 shared with a)
    assert mem.used() == 4 * G and mem.blocks_bytes() == MIB
    assert mem.delete("a")
    assert mem.used() == 3 * G                    # grain 0 went, grain 1 still holds c
    assert _read(mem, "b") == b"b" * 10 and _read(mem, "c") == b"c" * 16
    _put(mem, "d", 0, MIB - 100, b"d" * 300)      # the last grain of block 0 and the first of block 1
    assert mem.used() == 5 * G and mem.blocks_bytes() == 2 * MIB
    for k in "bcd":
        mem.delete(k)
    assert mem.used() == 0 and not mem.blocks and len(mem.held) == 0 and not mem.held.edges


def test_whole_blocks_count_whole() -> None:
    mem = BlockMemory(MIB, 64 * MIB)
    _put(mem, "a", 0, 0, b"a" * 10)
    assert mem.whole and mem.used() == MIB


def test_random_entries_keep_their_bytes_and_the_grain_count() -> None:
    rng = random.Random(7)
    mem = BlockMemory(MIB, 256 * MIB, G)
    live: dict[str, tuple[int, int, bytes]] = {}
    for i in range(400):
        if live and rng.random() < 0.45:
            k = rng.choice(sorted(live))
            del live[k]
            assert mem.delete(k)
        else:
            block, off, n = rng.randrange(8), rng.randrange(MIB), rng.randrange(1, 3 * G)
            start = block * MIB + off
            if any(start < b * MIB + o + len(d) and b * MIB + o < start + n for b, o, d in live.values()):
                continue  # the allocator never overlaps live entries
            data = rng.randbytes(n)
            _put(mem, f"k{i}", block, off, data)
            live[f"k{i}"] = (block, off, data)
        want = {u for b, o, d in live.values() for u in units_of(b, o, len(d), MIB, G)}
        assert len(mem.held) == len(want) and mem.used() == len(want) * G
    for k, (_, _, data) in live.items():
        assert _read(mem, k) == data


def test_a_grain_freed_while_a_get_sends_waits_for_it() -> None:
    mem = BlockMemory(MIB, 64 * MIB, G)
    _put(mem, "a", 0, 0, b"a" * (2 * G))
    _put(mem, "keep", 0, 4 * G, b"k")             # the block stays
    got = mem.get("a", pin=True)
    assert got is not None
    assert mem.delete("a")
    assert mem.used() == G                        # counted as given back at once
    assert b"".join(bytes(v) for v in got[1]) == b"a" * (2 * G)  # the bytes stay until the GET is done
    mem.unpin()
    assert bytes(got[1][0][:4]) == b"\0" * 4      # then the pages went back (read again: zero)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux's smaps_rollup")
def test_freed_grains_leave_the_process_while_their_blocks_stay() -> None:
    """Physical: 32 blocks each hold a 960 KiB entry and a 1 KiB one; freeing the large
    ones gives ~30 MiB back to the kernel with grains, nothing with whole blocks."""
    def drop(grain: int | None) -> tuple[int, int]:
        mem = BlockMemory(MIB, 64 * MIB, grain)
        big = b"x" * (960 << 10)
        for b in range(32):
            _put(mem, f"big{b}", b, 0, big)
            _put(mem, f"small{b}", b, 1000 << 10, b"y" * 1024)
        before = _anon_kib()
        for b in range(32):
            mem.delete(f"big{b}")
        after = _anon_kib()
        assert len(mem.blocks) == 32 and all(_read(mem, f"small{b}") == b"y" * 1024 for b in range(32))
        return before - after, mem.used()

    freed_kib, used = drop(G)
    assert freed_kib > 25 * 1024 and used == 32 * G
    freed_kib, used = drop(None)
    assert freed_kib < 4 * 1024 and used == 32 * MIB


def test_a_grain_set_answers_exactly_the_grains_that_came_and_went() -> None:
    """Random non-overlapping runs against a brute-force count of every grain."""
    from storage_functions.runtime._grains import GrainSet

    rng = random.Random(11)
    gs, count, live = GrainSet(100), {}, {}
    for i in range(2000):
        if live and rng.random() < 0.5:
            start, n = live.pop(rng.choice(sorted(live)))
            changed, sign = gs.remove(start, n), -1
        else:
            start, n = rng.randrange(5000), rng.randrange(1, 400)
            if any(start < s + m and s < start + n for s, m in live.values()):
                continue
            live[i] = (start, n)
            changed, sign = gs.add(start, n), 1
        before = {u for u, c in count.items() if c}
        for u in range(start // 100, (start + n - 1) // 100 + 1):
            count[u] = count.get(u, 0) + sign
        after = {u for u, c in count.items() if c}
        assert {u for r in changed for u in r} == (after - before if sign > 0 else before - after)
        assert len(gs) == len(after)
