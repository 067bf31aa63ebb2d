"""Object records and versions (SION Sec. 5.3.2): every PUT of a key makes a
new immutable version; a version is readable once all its chunks are in
function memory and in the persistent buffer. Covers the record layout and
the COS object format; not I/O.

COS object of one version (also the persistent-buffer file, byte for byte)::

    chunks of stripe 0 (d+p chunks of ``cl`` bytes), stripe 1, ...
    meta JSON {"key", "version", "size", "stripes": [{"d","p","fs","ol","cl","crcs"}]}
    u32 big-endian length of the meta JSON | b"SION"

so it can be written while the chunks stream in, and a reader finds the meta
in the last 8 bytes. Chunk ``i`` of stripe ``s`` is at
``sum(cl*(d+p) of stripes before s) + i*cl``.

``Held`` is the persistent buffer's hold on a version (``_buffer`` makes and reads
it); it is kept here, with the version that points to it.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

from ..protocol import compact_json

__all__ = ["Stripe", "ObjectVersion", "ObjectTable", "Held", "cos_object_key", "chunk_key", "trailer",
           "placed_chunks"]

TRAILER = struct.Struct("!I4s")


def cos_object_key(prefix: str, key: str, version: int) -> str:
    return f"{prefix}/objects/k-{quote(key, safe='')}/{version:08d}"


def chunk_key(key: str, version: int, stripe: int, index: int) -> str:
    return f"{version}/{stripe}/{index}/{key}"


@dataclass(slots=True)
class Stripe:
    d: int
    p: int
    fs: int  # payload bytes per fragment (decoders need it)
    ol: int  # original bytes in this stripe
    cl: int  # bytes per chunk as stored
    crcs: list[int]
    places: list[tuple[int, int, int] | None]  # (function index, block, offset) per chunk
    offset: int = 0  # of chunk 0 in the COS object / buffer file

    @property
    def n(self) -> int:
        return self.d + self.p

    def public(self) -> dict[str, Any]:
        return {"d": self.d, "p": self.p, "fs": self.fs, "ol": self.ol, "cl": self.cl}


@dataclass
class ObjectVersion:
    key: str
    version: int
    size: int = 0
    stripes: list[Stripe] = field(default_factory=list)
    state: str = "writing"  # writing | ready | failed | freed
    held: Held | None = None  # the persistent buffer's copy, while it holds one (``_buffer``)
    uploaded: bool = False
    uploading: bool = False
    cos_key: str = ""
    # (COS object, offset) when its COS copy went up inside a pack of small versions (``_buffer``)
    pack: tuple[str, int] | None = None
    # the metadata server's placement, per chunk: (function, block, offset, length reserved)
    alloc: list[tuple[Any, int, int, int]] | None = None
    readers: int = 0  # the PUT's read count from the workflow graph (0: not said)
    # chunks acknowledged, then lost with their function's instance while the PUT still ran:
    # (stripe, index, place), handed to recovery once the version is ready (``StoreState``)
    lost_writing: list[tuple[int, int, tuple[int, int, int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _head_json: tuple[bytes, bytes] | None = field(default=None, repr=False, compare=False)

    def chunk_offset(self, s: int, i: int) -> int:
        st = self.stripes[s]
        return st.offset + i * st.cl

    def cos_range(self, s: int, i: int) -> tuple[str, int]:
        """Where chunk ``i`` of stripe ``s`` sits in COS: (object key, offset)."""
        if self.pack is None:
            return self.cos_key, self.chunk_offset(s, i)
        return self.pack[0], self.pack[1] + self.chunk_offset(s, i)

    def head(self) -> dict[str, Any]:
        """What a GET reply tells the client before the chunks."""
        return {"version": self.version, "size": self.size, "stripes": [st.public() for st in self.stripes]}

    def head_json(self, inline: bool = False) -> bytes:
        """:meth:`head` as JSON, computed once (a version never changes);
        ``inline``: the reply carries the whole object as its payload."""
        cache = self._head_json
        if cache is None:
            raw = compact_json(self.head())
            cache = self._head_json = (raw.encode(), (raw[:-1] + ',"inline":1}').encode())
        return cache[1] if inline else cache[0]

    def meta(self) -> dict[str, Any]:
        return {"key": self.key, "version": self.version, "size": self.size,
                "stripes": [dict(st.public(), crcs=st.crcs) for st in self.stripes]}


def trailer(obj: ObjectVersion) -> bytes:
    raw = compact_json(obj.meta()).encode()
    return raw + TRAILER.pack(len(raw), b"SION")


class ObjectTable:
    """Key -> versions, newest last. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, list[ObjectVersion]] = {}

    def begin(self, key: str) -> ObjectVersion:
        with self._lock:
            vs = self._versions.setdefault(key, [])
            obj = ObjectVersion(key, (vs[-1].version + 1) if vs else 1)
            vs.append(obj)
            return obj

    def latest(self, key: str, version: int | None = None) -> ObjectVersion | None:
        with self._lock:
            for obj in reversed(self._versions.get(key, [])):
                if obj.state == "ready" and (version is None or obj.version == version):
                    return obj
        return None

    def add(self, obj: ObjectVersion) -> None:
        """Put back a version a restarted daemon rebuilt (``_restore``), in version order."""
        with self._lock:
            vs = self._versions.setdefault(obj.key, [])
            vs.append(obj)
            vs.sort(key=lambda o: o.version)

    def drop_failed(self, obj: ObjectVersion) -> None:
        with self._lock:
            vs = self._versions.get(obj.key, [])
            if obj in vs:
                vs.remove(obj)
            if not vs:
                self._versions.pop(obj.key, None)

    def versions(self, key: str) -> list[ObjectVersion]:
        """Every version of ``key``, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._versions.get(key, []))

    def pop(self, key: str) -> list[ObjectVersion]:
        with self._lock:
            return self._versions.pop(key, [])

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._versions)

    def all(self) -> list[ObjectVersion]:
        with self._lock:
            return [o for vs in self._versions.values() for o in vs]


@dataclass(eq=False, slots=True)
class Held:
    """One version in the persistent buffer (``_buffer``): its ``length`` bytes in ``mem``
    (None: spilled or large) and at ``base`` of the file ``path`` (a segment ``seg``, or
    its own file)."""

    obj: ObjectVersion
    length: int
    mem: bytearray | None = None
    path: str | None = None
    base: int = 0
    seg: str | None = None
    expires_at: float | None = None  # predicted expiry, on the buffer's clock

    def place(self) -> list[Any] | None:
        """What the durable log keeps to find it after a kill (segment versions only)."""
        return [self.seg, self.base, self.length] if self.seg is not None else None


def placed_chunks(versions: Iterable[ObjectVersion]) -> Iterator[tuple[ObjectVersion, int, int, tuple[int, int, int]]]:
    """Every chunk that has a place: (version, stripe, index, place)."""
    for obj in versions:
        for s, st in enumerate(obj.stripes):
            for i, pl in enumerate(st.places):
                if pl is not None:
                    yield obj, s, i, pl
