"""What a client may declare in a request, checked before the daemon acts on
it: integers in range, key lists, the shape of a PUT's stripes and the
metadata server's allocation. Pure: a frame's meta in, values or a
``ProtocolError`` naming the request and the field out. Not the token scope
(``storage_functions.auth``) nor whether an allocation fits the pool
(``PlaceChunk.check``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..exceptions import ProtocolError, StoreError
from ..protocol import Frame

__all__ = ["meta_int", "meta_keys", "StripeShape", "stripe_shape", "alloc_chunks", "stripe_places", "MAX_CHUNKS",
           "CHUNK_SLACK"]

#: Chunks a stripe may have (d + p); every chunk of a stripe goes to its own function.
MAX_CHUNKS = 64
#: How much larger than its share of the stripe (``ceil(ol / d)``) a chunk may be:
#: pyeclib's fragment header and alignment, with room to spare.
CHUNK_SLACK = 4096
_U64 = (1 << 64) - 1


def meta_int(meta: dict[str, Any], name: str, what: str, *, default: int | None = None, lo: int = 0,
             hi: int = _U64) -> int:
    """``meta[name]`` as an int in ``lo..hi`` (``default``, unchecked, when
    absent and one is given)."""
    v = meta.get(name)
    if v is None and default is not None:
        return default
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError(f"{what}: meta field {name!r} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise ProtocolError(f"{what}: meta field {name!r} is {v}, outside {lo}..{hi}")
    return v


def meta_keys(meta: dict[str, Any], what: str) -> list[str]:
    """``meta["keys"]``: a list of strings (missing: empty)."""
    keys = meta.get("keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ProtocolError(f"{what}: meta field 'keys' must be a list of strings")
    return keys


@dataclass(frozen=True, slots=True)
class StripeShape:
    d: int
    p: int
    fs: int
    ol: int
    cl: int
    crcs: list[int]

    @property
    def n(self) -> int:
        return self.d + self.p


def stripe_shape(key: str, sf: Frame, s: int, left: int) -> StripeShape:
    """The shape of stripe ``s`` of a PUT of ``key`` as its STRIPE frame
    declares it, when ``left`` bytes of the object's declared size are not in
    an earlier stripe. Its payload must split into d+p chunks, its original
    length fit in ``left`` and each chunk be no larger than its share of the
    stripe (plus ``CHUNK_SLACK``): a PUT cannot send more than its size
    declares."""
    what = f"PUT {key!r} stripe {s}"
    m = sf.meta
    d = meta_int(m, "d", what, lo=1, hi=MAX_CHUNKS)
    p = meta_int(m, "p", what, default=0, hi=MAX_CHUNKS - d)
    n = d + p
    if sf.paylen % n:
        raise ProtocolError(f"{what}: {sf.paylen} bytes do not split into {n} chunks")
    cl = sf.paylen // n
    ol = meta_int(m, "ol", what, default=cl)
    if ol > left:
        raise ProtocolError(f"{what}: {ol} bytes, but only {left} of the object's declared size are left")
    fs = meta_int(m, "fs", what, default=cl, hi=cl)
    if cl > -(-ol // d) + (CHUNK_SLACK if n > 1 else 0):
        raise ProtocolError(f"{what}: chunks of {cl} bytes for {ol} bytes in {d} data chunks")
    crcs = m.get("crcs")
    if (not isinstance(crcs, list) or len(crcs) != n
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 1 << 32 for c in crcs)):
        raise ProtocolError(f"{what}: meta field 'crcs' must be {n} CRC-32 values")
    return StripeShape(d, p, fs, ol, cl, crcs)


def alloc_chunks(key: str, alloc: Any, n: int) -> list[tuple[Any, int, int, int]]:
    """A PUT's ``alloc``, the metadata server's placement of the object: for each of
    its ``n`` chunks (1 for an uncoded slice, d+p for a coded object) ``(function,
    block, offset, length)``: where chunk ``i`` starts, the function as the metadata
    server names it (an index or ``<prefix>-<i>``), and the bytes reserved for it
    there. Shapes only; whether the stripes fit is :func:`stripe_places`', whether the
    places are inside the pool ``PlaceChunk.check``'s."""
    what = f"PUT {key!r}"
    if not isinstance(alloc, list) or len(alloc) != n:
        raise ProtocolError(f"{what}: meta field 'alloc' must give one place for each of its {n} chunks")
    out = []
    for a in alloc:
        if (not isinstance(a, list) or len(a) != 4 or isinstance(a[0], bool) or not isinstance(a[0], (int, str))
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in a[1:]) or a[3] < 0):
            raise ProtocolError(f"{what}: allocation entry {a!r} is not [function, block, offset, length]")
        out.append((a[0], a[1], a[2], a[3]))
    return out


def stripe_places(key: str, chunks: list[tuple[Any, int, int, int]], used: list[int], cl: int,
                  block_size: int) -> list[tuple[Any, int, int]]:
    """Where each chunk of the next stripe goes: chunk ``i`` continues where chunk
    ``i`` of the stripes before it ended (``used[i]`` bytes into its reservation),
    so an object's chunk ``i`` lies end to end in the blocks the metadata server
    gave it. Advances ``used``; a stripe that does not fit raises ``StoreError``."""
    places = []
    for i, (fn, block, off, length) in enumerate(chunks):
        if not 0 <= off < block_size:
            raise StoreError(f"PUT {key!r}: the allocation cannot be used: offset {off} is outside a block of "
                             f"{block_size} bytes")
        if used[i] + cl > length:
            raise StoreError(f"PUT {key!r}: chunk {i} needs {used[i] + cl} bytes, the metadata server reserved "
                             f"{length} (client and server disagree on the erasure code or block size)")
        start = off + used[i]
        places.append((fn, block + start // block_size, start % block_size))
    for i in range(len(chunks)):
        used[i] += cl
    return places
