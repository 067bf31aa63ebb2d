"""Zero-copy Reed-Solomon encode of large stripes: ISA-L's parity
(``ec_encode_data``, the library pyeclib's ``isa_l_rs_vand`` backend runs,
loaded from the copy pyeclib ships) over the caller's own buffer, with the
80-byte liberasurecode fragment headers built here. Covers the encode only;
decoding (needed only when a parity chunk stands in for a data chunk) stays
with pyeclib.

pyeclib copies the stripe into ``bytes`` (it takes nothing else), copies it
again into d fragments and computes p parities, holding the GIL throughout:
~60 ms per 100 MiB on this machine, where ISA-L's parity alone takes ~4 ms.
Fragments are systematic, so data chunk ``i`` is its header followed by bytes
``[i*fs, (i+1)*fs)`` of the stripe (zero-padded past its end): here it is
those two pieces, a memoryview of the caller's buffer and no copy, and only
the p parities are new memory. The output is byte for byte pyeclib's: the
encoder checks that against pyeclib when it is built (and is not used when
the check fails or the library is missing; callers fall back to pyeclib).
Any contiguous buffer is read in place, read-only ones included.
Not thread-safe to build; ``encode`` is safe from any thread (ctypes releases
the GIL during the call).
"""

from __future__ import annotations

import ctypes
import struct
import zlib
from typing import Any

from storage_functions.checksum import buffer_address, load_isal

__all__ = ["IsalEncoder", "load_encoder", "Piece", "HEADER_BYTES"]

Piece = bytes | bytearray | memoryview

_META = struct.Struct("<IIIQ")  # idx, size (fs), frag_backend_metadata_size, orig_data_size
_META_LEN = 59  # liberasurecode's packed fragment_metadata_t
_HEADER = 80
#: liberasurecode's fragment header: a chunk is this many bytes more than its payload
HEADER_BYTES = _HEADER


class IsalEncoder:
    """Encode stripes for a d+p ``isa_l_rs_vand`` code; see the module docstring."""

    #: stripes below this many bytes go to pyeclib: the fixed cost here (~20 us: headers,
    #: ctypes) passes pyeclib's copies below ~512 KiB (``funcsion bench store``'s "ec"
    #: figures: 256 KiB 23 us here against pyeclib's 13, 1 MiB 38 against 57)
    MIN_STRIPE = 512 << 10

    def __init__(self, lib: Any, d: int, p: int, template: bytes) -> None:
        self.lib, self.d, self.p = lib, d, p
        self._fixed = template[_META.size:_HEADER]  # checksum type .. libec version, then crc and padding
        mat = (ctypes.c_ubyte * ((d + p) * d))()
        lib.gf_gen_rs_matrix(mat, d + p, d)
        self._tables = (ctypes.c_ubyte * (d * p * 32))()
        lib.ec_init_tables(d, p, ctypes.byref(mat, d * d), self._tables)

    def header(self, idx: int, fs: int, ol: int) -> bytes:
        """Fragment ``idx``'s 80-byte header for a stripe of ``ol`` bytes."""
        head = bytearray(_META.pack(idx, fs, 0, ol) + self._fixed)
        head[_META_LEN + 8:_META_LEN + 12] = struct.pack("<I", zlib.crc32(head[:_META_LEN]))
        return bytes(head)

    def encode(self, buf: Any, start: int, n: int) -> tuple[int, list[list[Piece]]] | None:
        """(fs, chunks) for the stripe ``buf[start:start+n]``: chunk ``i`` as its pieces
        (header, payload[, zero padding]); None when ``buf`` is not one contiguous
        buffer (the caller encodes another way)."""
        try:
            with buffer_address(buf) as (base, _):
                return self._encode_at(buf, base, start, n)
        except BufferError:
            return None

    def _encode_at(self, buf: Any, base: int, start: int, n: int) -> tuple[int, list[list[Piece]]]:
        d, p = self.d, self.p
        fs = -(-n // d)
        view = memoryview(buf).cast("B")
        chunks: list[list[Piece]] = []
        ptrs = (ctypes.c_void_p * d)()
        padded: list[Any] = []
        for i in range(d):
            lo = start + i * fs
            have = max(0, min(fs, start + n - lo))
            head = self.header(i, fs, n)
            if have == fs:
                ptrs[i] = base + lo
                chunks.append([head, view[lo:lo + fs]])
                continue
            pad = bytearray(fs)  # the stripe's end: its last bytes and zeros, one small copy
            if have:
                pad[:have] = view[lo:lo + have]
            cbuf = (ctypes.c_char * fs).from_buffer(pad)
            padded.append(cbuf)
            ptrs[i] = ctypes.addressof(cbuf)
            chunks.append([head, pad])
        parity = [bytearray(_HEADER + fs) for _ in range(p)]
        pbufs = [(ctypes.c_char * fs).from_buffer(b, _HEADER) for b in parity]
        pptrs = (ctypes.c_void_p * p)(*[ctypes.addressof(b) for b in pbufs])
        self.lib.ec_encode_data(fs, d, p, self._tables, ptrs, pptrs)
        del pbufs, padded  # the exports end: the bytearrays may be used freely
        for j, b in enumerate(parity):
            b[:_HEADER] = self.header(d + j, fs, n)
            chunks.append([b])
        return fs, chunks


def load_encoder(d: int, p: int, driver: Any) -> IsalEncoder | None:
    """An encoder for ``driver`` (a pyeclib ``isa_l_rs_vand`` ECDriver of the same d+p)
    whose output was checked byte for byte against the driver's; None when ISA-L is not
    loadable or the output differs (a pyeclib/liberasurecode whose format this does not know)."""
    lib = load_isal()
    if lib is None:
        return None
    try:
        sample = bytes(range(256)) * 40 + b"odd length"  # any contents: the check is byte for byte
        frags = driver.encode(sample)
        enc = IsalEncoder(lib, d, p, bytes(frags[0][:_HEADER]))
        for buf in (sample, bytearray(sample)):
            got = enc.encode(buf, 0, len(buf))
            if got is None or [b"".join(bytes(x) for x in c) for c in got[1]] != [bytes(f) for f in frags]:
                return None
    except (OSError, AttributeError, ValueError, TypeError):
        return None
    return enc
