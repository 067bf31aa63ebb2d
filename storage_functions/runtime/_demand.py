"""A storage function's demand cache (SION Sec. 5.3.3, 5.4): chunks a *cache
function* loads from COS when the daemon routes a GET to it because the
function holding the chunk is busy (a GET whose meta names the chunk's COS
copy: ``{"src": cos key, "off": int, "len": int, "crc": int}``). They live in the cache
space (blocks above ``CACHE_BASE``, not counted as the function's stored
data, never logged) and are the first to go: a new demand-cached chunk evicts
the least recently used ones when the cache space (``cache_cap``, shared with
recovery copies) is full, and a PUT of regular data that finds memory full
evicts demand-cached chunks until it fits. Recovery copies are never evicted
here (a recovery group's routes point at them).

``DemandCache`` is the pure policy (keys, sizes, use order); the handler
calls ``load`` and ``evict_for``. Not here: which GETs are routed to a cache
function (the daemon's ``_burst``).
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import MutableMapping
from typing import Any, Protocol

from ..protocol import Status
from ._memory import BlockMemory, MemoryFull

__all__ = ["DemandCache", "CacheSpace", "load", "evict_for", "read_cos_chunk"]


class CacheSpace(Protocol):
    """What the demand cache uses of a storage function's state (``_handler.FunctionState``):
    its name (in messages), its memory, the lock over its cache space, the cache space's
    keys (``cached``: key -> bytes) and next free block, and the demand cache itself."""

    cache_next: int

    @property
    def name(self) -> str: ...

    @property
    def memory(self) -> BlockMemory: ...

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def cached(self) -> MutableMapping[str, int]: ...

    @property
    def demand(self) -> DemandCache: ...


class DemandCache:
    """Demand-cached keys in least-recently-used order, with their sizes."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, int] = OrderedDict()
        self.loads = 0
        self.evictions = 0

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def bytes(self) -> int:
        return sum(self.entries.values())

    def touch(self, key: str) -> None:
        if key in self.entries:
            self.entries.move_to_end(key)

    def add(self, key: str, size: int) -> None:
        self.entries[key] = size
        self.entries.move_to_end(key)
        self.loads += 1

    def discard(self, key: str) -> None:
        self.entries.pop(key, None)

    def victims(self, need: int, free: int) -> list[str] | None:
        """The least recently used keys to evict so that ``need`` bytes fit in ``free``
        bytes plus what they release; None when evicting every one is not enough."""
        out: list[str] = []
        for key, size in self.entries.items():
            if free >= need:
                break
            out.append(key)
            free += size
        return out if free >= need else None


def _evict(st: CacheSpace, keys: list[str]) -> None:
    """Drop demand-cached ``keys`` (under ``st.lock``)."""
    for k in keys:
        st.demand.discard(k)
        st.cached.pop(k, None)
        st.memory.delete(k)
        st.demand.evictions += 1


def evict_for(st: CacheSpace, need_bytes: int) -> bool:
    """A PUT of regular data needs ``need_bytes`` more than memory has: demand-cached
    chunks go first (least recently used). False when they cannot make room."""
    mem = st.memory
    with st.lock:
        victims = st.demand.victims(need_bytes, mem.capacity - mem.blocks_bytes())
        if victims is None:
            return False
        _evict(st, victims)
    return True


def read_cos_chunk(st: CacheSpace, cos: Any, f: Any, throttle: Any, crc: int,
                   what: str = "load") -> tuple[bytes | None, int, str]:
    """The bytes of the chunk request ``f`` names (its meta's ``src``/``off``/``len``) read
    from COS at the instance's modelled bandwidth and checked against ``crc``: (data,
    Status.OK, "") or (None, status, message) when COS has none or it does not match."""
    m = f.meta
    src, off, length = str(m["src"]), int(m["off"]), int(m["len"])
    if cos is None:
        return None, Status.NOT_FOUND, f"function {st.name} has no COS to {what} {f.key} from"
    try:
        data = cos.get_range(src, off, length) if length else b""
    except Exception as exc:  # noqa: BLE001 - missing object or COS failure: the daemon reads elsewhere
        return None, Status.NOT_FOUND, f"{f.key}: {exc!r}"
    throttle.take(length)
    if len(data) != length or zlib.crc32(data) != crc:
        return None, Status.CORRUPT, f"{f.key}: the COS copy does not match its CRC"
    return data, Status.OK, ""


def load(st: CacheSpace, event: dict[str, Any], cos: Any, f: Any, throttle: Any) -> tuple[int, str]:
    """Load the chunk GET ``f`` asks for from its COS copy into the cache space (evicting
    least recently used demand-cached chunks to make room); (status, message)."""
    crc = int(f.meta.get("crc", f.crc))
    data, status, message = read_cos_chunk(st, cos, f, throttle, crc)
    if data is None:
        return status, message
    length = len(data)
    mem = st.memory
    blocks = max(1, -(-length // mem.block_size))
    with st.lock:
        if f.key in st.cached:
            st.demand.touch(f.key)
            return Status.OK, ""
        cap = int(event.get("cache_cap", 0) or 0)
        need = blocks * mem.block_size
        room = min(cap - sum(st.cached.values()), mem.capacity - mem.blocks_bytes())
        victims = st.demand.victims(need, room)
        if victims is None:
            return Status.FULL, f"{f.key}: the cache space of {st.name} is full"
        _evict(st, victims)
        block = st.cache_next
        st.cache_next += blocks
        st.cached[f.key] = length
        st.demand.add(f.key, length)
    try:
        entry, views = mem.reserve(f.key, block, 0, length, crc)
    except (MemoryFull, ValueError) as exc:
        with st.lock:
            st.cached.pop(f.key, None)
            st.demand.discard(f.key)
        return Status.FULL, str(exc)
    mem.fill(entry, views, data)
    return Status.OK, ""
