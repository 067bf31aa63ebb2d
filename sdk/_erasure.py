"""Client-side erasure coding (SION Sec. 5.2, INFINICACHE Sec. 3.1):
Reed-Solomon d+p with pyeclib's ISA-L backend (``isa_l_rs_vand``). Covers
splitting an object into stripes, encoding each into d+p chunks, and
rebuilding a stripe from any d of them; not the wire.

Objects up to ``threshold`` bytes (default one block, 1 MiB) are one slice,
not coded (the metadata allocator's slice rule: an object that fits a block): below it encode+decode cost more than the transfer they guard
(``funcsion bench store`` prints the measurement). Larger objects are split
into stripes of at most ``stripe_size`` bytes (the SION "fragment"; 8 MiB
keeps ISA-L in cache and lets stripes pipeline) and each stripe is coded.

pyeclib fragments are systematic: data fragment ``i`` is an 80-byte header
then bytes ``[i*fs, (i+1)*fs)`` of the stripe (``fs`` = fragment payload
size), so a reader that got every data chunk copies payloads straight into
the output and never calls the decoder.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._isal import HEADER_BYTES, IsalEncoder, Piece, load_encoder

__all__ = ["Codec", "StripeInfo", "DEFAULT_D", "DEFAULT_P", "DEFAULT_THRESHOLD", "DEFAULT_STRIPE"]

DEFAULT_D = 10
DEFAULT_P = 2
DEFAULT_THRESHOLD = 1 << 20
DEFAULT_STRIPE = 8 << 20


@dataclass(frozen=True, slots=True)
class StripeInfo:
    d: int
    p: int
    fs: int  # payload bytes per fragment
    ol: int  # original bytes in the stripe
    cl: int  # bytes per chunk (fragment incl. header)

    @property
    def header(self) -> int:
        return self.cl - self.fs if self.p or self.d > 1 else 0

    @property
    def coded(self) -> bool:
        return self.d > 1 or self.p > 0


class Codec:
    def __init__(self, d: int = DEFAULT_D, p: int = DEFAULT_P, *, threshold: int = DEFAULT_THRESHOLD,
                 stripe_size: int = DEFAULT_STRIPE, ec_type: str = "isa_l_rs_vand") -> None:
        if d < 2 or p < 1:
            raise ValueError(f"erasure code needs d >= 2 and p >= 1, got {d}+{p}")
        if stripe_size < d:
            raise ValueError(f"stripe_size {stripe_size} is smaller than d={d}")
        self.d, self.p = d, p
        self.threshold = threshold
        self.stripe_size = stripe_size
        self.ec_type = ec_type
        self._local = threading.local()
        self._isal: IsalEncoder | bool = ec_type == "isa_l_rs_vand"  # True: not tried yet; False: never

    @property
    def driver(self):  # type: ignore[no-untyped-def]
        drv = getattr(self._local, "drv", None)
        if drv is None:
            from pyeclib.ec_iface import ECDriver

            drv = self._local.drv = ECDriver(k=self.d, m=self.p, ec_type=self.ec_type)
        return drv

    def coded(self, size: int) -> bool:
        return size > self.threshold

    def layout(self, size: int) -> list[StripeInfo]:
        """The stripes ``stripes()`` makes of an object of ``size`` bytes, without
        encoding: what the metadata allocator needs to place its chunks."""
        if not self.coded(size):
            return [StripeInfo(1, 0, size, size, size)]
        out = []
        for _, n in self.plan(size):
            cl = int(self.driver.get_segment_info(n, n)["fragment_size"])
            out.append(StripeInfo(self.d, self.p, -(-n // self.d), n, cl))
        return out

    def chunk_bytes(self, size: int) -> int:
        """Bytes chunk ``i`` of an object takes in one function (its stripes' chunks end
        to end); ``size`` for an uncoded slice."""
        return sum(st.cl for st in self.layout(size))

    def stripes(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[StripeInfo, list[Piece]]]:
        """Yield (info, chunks) per stripe, encoding lazily so the caller can
        send stripe k while stripe k+1 is not yet encoded. Each chunk is one
        buffer (joined from :meth:`stripe_pieces`' pieces: a copy; senders use those)."""
        for info, chunks in self.stripe_pieces(data):
            yield info, [c[0] if len(c) == 1 else b"".join(c) for c in chunks]

    def stripe_pieces(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[StripeInfo, list[list[Piece]]]]:
        """Like :meth:`stripes`, each chunk as the pieces it is sent as, back to back:
        a data chunk encoded in place is its 80-byte header and a memoryview of
        ``data`` (``data`` must not change until the pieces were sent)."""
        view = memoryview(data).cast("B")
        size = len(view)
        plan = self.plan(size)
        if not self.coded(size):
            yield StripeInfo(1, 0, size, size, size), [[view]]
            return
        whole = isinstance(data, bytes) and len(plan) == 1
        for start, n in plan:
            fast = self._fast_encode(data, start, n)
            if fast is not None:
                yield fast
                continue
            info, frags = self._encode(data if whole and isinstance(data, bytes) else bytes(view[start:start + n]))
            yield info, [[f] for f in frags]

    def _fast_encode(self, buf: Any, start: int, n: int) -> tuple[StripeInfo, list[list[Piece]]] | None:
        """ISA-L in place (see ``_isal``), or None: pyeclib does it."""
        enc = self._isal
        if enc is True:
            enc = self._isal = load_encoder(self.d, self.p, self.driver) or False
        if not isinstance(enc, IsalEncoder) or n < enc.MIN_STRIPE:
            return None
        got = enc.encode(buf, start, n)
        if got is None:
            return None
        fs, chunks = got
        return StripeInfo(self.d, self.p, fs, n, fs + HEADER_BYTES), chunks

    def stripes_from(self, read: Callable[[int], Any] | Any, size: int, *,
                     prefix: bytes | bytearray | memoryview = b"") -> Iterator[tuple[StripeInfo, list[Piece]]]:
        """Like :meth:`stripes` for the object ``prefix + <size bytes from
        read>``, pulling each stripe's bytes only when that stripe is encoded,
        so memory holds one stripe (and its chunks), not the object.
        ``read`` is ``read(n) -> bytes`` (a file's ``read``; short reads are
        retried) or a readable file object. The stripes, chunks and plan are
        byte for byte those of ``stripes(prefix + data)``. Reads exactly
        ``size`` bytes; a source that ends sooner raises ValueError."""
        for info, chunks in self.stripe_pieces_from(read, size, prefix=prefix):
            yield info, [c[0] if len(c) == 1 else b"".join(c) for c in chunks]

    def stripe_pieces_from(self, read: Callable[[int], Any] | Any, size: int, *,
                           prefix: bytes | bytearray | memoryview = b"") -> Iterator[tuple[StripeInfo, list[list[Piece]]]]:
        """:meth:`stripes_from` with each chunk as its pieces (see :meth:`stripe_pieces`)."""
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        if not callable(read):
            read = read.read
        pre = bytes(prefix)
        total = len(pre) + size
        plan = self.plan(total)
        if not self.coded(total):
            body = _read_exactly(read, size, 0, size)
            yield StripeInfo(1, 0, total, total, total), [[pre + body if pre else body]]
            return
        done = 0  # bytes taken from ``read`` so far
        for start, n in plan:
            head = pre[start:start + n]  # the part of the prefix in this stripe (usually none)
            body = _read_exactly(read, n - len(head), done, size)
            done += len(body)
            stripe = head + body if head else body
            out = self._fast_encode(stripe, 0, n) or self._encode_pieces(stripe)
            del body  # not alive while the next stripe is read
            yield out
            del out

    def _encode_pieces(self, stripe: bytes) -> tuple[StripeInfo, list[list[Piece]]]:
        info, frags = self._encode(stripe)
        return info, [[f] for f in frags]

    def _encode(self, stripe: bytes) -> tuple[StripeInfo, list[bytes | memoryview]]:
        frags = self.driver.encode(stripe)
        fs = self.driver.get_metadata(frags[0], formatted=True)["size"]
        return StripeInfo(self.d, self.p, fs, len(stripe), len(frags[0])), frags

    def plan(self, size: int) -> list[tuple[int, int]]:
        """(start, length) of each stripe of an object of ``size`` bytes."""
        if not self.coded(size):
            return [(0, size)]
        nstripes = -(-size // self.stripe_size)
        per = -(-size // nstripes)
        return [(start, min(per, size - start)) for start in range(0, size, per)] or [(0, 0)]

    def decode(self, info: StripeInfo, fragments: dict[int, bytes | bytearray]) -> bytes:
        """Rebuild one stripe from at least ``d`` fragments (index -> bytes)."""
        if not info.coded:
            return bytes(fragments[0])
        if len(fragments) < info.d:
            raise ValueError(f"need {info.d} fragments, have {len(fragments)}")
        from pyeclib.ec_iface import ECDriver

        drv = self.driver if (info.d, info.p) == (self.d, self.p) else ECDriver(k=info.d, m=info.p, ec_type=self.ec_type)
        out = drv.decode([bytes(f) for f in list(fragments.values())[:info.d + info.p]])
        return bytes(out[:info.ol])


def _read_exactly(read: Callable[[int], Any], n: int, done: int, size: int) -> bytes:
    """``n`` bytes from ``read`` as one ``bytes`` (pyeclib encodes only
    bytes); ``done`` (bytes read before) and ``size`` word the error."""
    if n == 0:
        return b""
    parts: list[Any] = []
    got = 0
    while got < n:
        more = read(n - got)
        if not more:
            raise ValueError(f"source ended early: expected {size} bytes, got {done + got}")
        if len(more) > n - got:
            raise ValueError(f"read({n - got}) returned {len(more)} bytes")
        parts.append(more)
        got += len(more)
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0]
    return b"".join(parts)
