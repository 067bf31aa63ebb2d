"""Client-side Reed-Solomon (pyeclib ISA-L): plans, round trips, parity decode."""

from __future__ import annotations

import io
import os
from typing import Any, Callable, Iterable

import pytest

from sdk._erasure import Codec, StripeInfo


@pytest.mark.parametrize("size", [0, 1, 4095, 1 << 20, (1 << 20) + 17, 3 * (1 << 20) + 5])
def test_round_trip_from_any_d_chunks(size: int) -> None:
    codec = Codec(4, 2, threshold=1 << 20, stripe_size=1 << 20)
    data = os.urandom(size)
    out = bytearray()
    for info, frags in codec.stripes(data):
        assert len(frags) == info.d + info.p
        if not info.coded:
            out += bytes(frags[0])
            continue
        assert all(len(f) == info.cl for f in frags)
        # drop two data chunks: decode needs parity
        have = {i: bytes(f) for i, f in enumerate(frags) if i not in (0, 2)}
        out += codec.decode(info, have)
    assert bytes(out) == data


def test_data_fragments_are_systematic() -> None:
    codec = Codec(10, 2, threshold=0)
    data = os.urandom(123457)
    (info, frags), = list(codec.stripes(data))
    joined = b"".join(bytes(f)[info.header:info.header + info.fs] for f in frags[:10])
    assert joined[:len(data)] == data


def test_below_threshold_is_one_uncoded_slice() -> None:
    codec = Codec()
    (info, frags), = list(codec.stripes(b"x" * 1000))
    assert (info.d, info.p, info.coded) == (1, 0, False)
    assert bytes(frags[0]) == b"x" * 1000


def test_plan_splits_into_even_stripes() -> None:
    codec = Codec(threshold=1, stripe_size=10)
    assert codec.plan(25) == [(0, 9), (9, 9), (18, 7)]
    assert sum(n for _, n in codec.plan(10 << 20)) == 10 << 20


def test_too_few_fragments() -> None:
    codec = Codec(4, 2, threshold=0)
    (info, frags), = list(codec.stripes(os.urandom(5000)))
    with pytest.raises(ValueError, match="need 4 fragments"):
        codec.decode(info, {0: frags[0], 1: frags[1]})


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        Codec(1, 0)


# -- stripes_from: the same stripes from a read(n) source ---------------------------
def _chunks(stripes: Iterable[tuple[StripeInfo, list[Any]]]) -> list[tuple[StripeInfo, list[bytes]]]:
    return [(info, [bytes(f) for f in frags]) for info, frags in stripes]


def _trickle(data: bytes, most: int) -> Callable[[int], bytes]:
    """read(n) that returns at most ``most`` bytes a call, like a pipe."""
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        out = data[pos:pos + min(n, most)]
        pos += len(out)
        return out
    return read


@pytest.mark.parametrize("size", [0, 1, 4095, (1 << 20) - 2, (1 << 20) - 1, 1 << 20, (1 << 20) + 17,
                                  3 * (1 << 20) + 5])
@pytest.mark.parametrize("prefix", [b"", b"\x01", b"abc"])
def test_stripes_from_equals_stripes(size: int, prefix: bytes) -> None:
    codec = Codec(4, 2, threshold=1 << 20, stripe_size=1 << 20)
    data = os.urandom(size)
    want = _chunks(codec.stripes(prefix + data))
    assert _chunks(codec.stripes_from(io.BytesIO(data).read, size, prefix=prefix)) == want
    assert _chunks(codec.stripes_from(io.BytesIO(data), size, prefix=prefix)) == want  # a file object
    assert _chunks(codec.stripes_from(_trickle(data, 100_003), size, prefix=prefix)) == want  # short reads


def test_stripes_from_prefix_longer_than_a_stripe() -> None:
    codec = Codec(4, 2, threshold=1, stripe_size=16)
    prefix, data = b"P" * 40, os.urandom(30)
    assert _chunks(codec.stripes_from(io.BytesIO(data).read, 30, prefix=prefix)) == _chunks(codec.stripes(prefix + data))


def test_stripes_from_reads_one_stripe_at_a_time() -> None:
    codec = Codec(4, 2, threshold=1 << 20, stripe_size=1 << 20)
    src = io.BytesIO(os.urandom(5 * (1 << 20)))
    it = codec.stripes_from(src.read, 5 * (1 << 20), prefix=b"x")
    assert src.tell() == 0  # lazy: nothing read before the first stripe is asked for
    info, _ = next(it)
    assert src.tell() == info.ol - 1  # the first stripe only (one byte of it is the prefix)
    next(it)
    assert src.tell() == 2 * info.ol - 1


def test_stripes_from_short_source_names_expected_and_got() -> None:
    codec = Codec(4, 2, threshold=1 << 20, stripe_size=1 << 20)
    with pytest.raises(ValueError, match="expected 10 bytes, got 3"):
        list(codec.stripes_from(io.BytesIO(b"abc").read, 10))
    with pytest.raises(ValueError, match=f"expected {3 << 20} bytes, got {2 << 20}"):
        list(codec.stripes_from(io.BytesIO(bytes(2 << 20)).read, 3 << 20))
    with pytest.raises(ValueError, match="returned 5 bytes"):
        list(codec.stripes_from(lambda n: b"12345", 3))
    with pytest.raises(ValueError, match="size must be >= 0"):
        list(codec.stripes_from(io.BytesIO(b"").read, -1))


def test_stripes_from_reads_exactly_size_bytes() -> None:
    codec = Codec(4, 2, threshold=1 << 20, stripe_size=1 << 20)
    src = io.BytesIO(b"0123456789")
    (info, frags), = list(codec.stripes_from(src.read, 4, prefix=b"p"))
    assert bytes(frags[0]) == b"p0123" and info.ol == 5
    assert src.read() == b"456789"


# -- the in-place ISA-L encoder: byte for byte pyeclib's ---------------------------------
@pytest.mark.parametrize("d,p", [(10, 2), (4, 2), (3, 1)])
@pytest.mark.parametrize("n", [4096, 4097, 123457, (1 << 20) + 3, 8065970])
def test_isal_encoder_matches_pyeclib(d: int, p: int, n: int) -> None:
    from pyeclib.ec_iface import ECDriver

    from sdk._isal import load_encoder

    drv = ECDriver(k=d, m=p, ec_type="isa_l_rs_vand")
    enc = load_encoder(d, p, drv)
    assert enc is not None, "ISA-L (shipped with pyeclib) should load here"
    data = os.urandom(n + 11)
    for buf in (data, bytearray(data), memoryview(bytearray(data))):  # in place, at an offset
        got = enc.encode(buf, 11, n)
        assert got is not None
        fs, chunks = got
        assert [b"".join(bytes(x) for x in c) for c in chunks] == drv.encode(data[11:11 + n])
        assert len(chunks[0]) == 2 and isinstance(chunks[0][1], memoryview)  # header + a view: no copy
        assert fs == -(-n // d)


def test_isal_encoder_reads_read_only_views_in_place_and_declines_strided_ones() -> None:
    from pyeclib.ec_iface import ECDriver

    from sdk._isal import load_encoder

    drv = ECDriver(k=4, m=2, ec_type="isa_l_rs_vand")
    enc = load_encoder(4, 2, drv)
    assert enc is not None
    data = os.urandom(3 * 8192)
    got = enc.encode(memoryview(data)[8192:], 0, 8192)
    assert got is not None and [b"".join(bytes(x) for x in c) for c in got[1]] == drv.encode(data[8192:16384])
    assert enc.encode(memoryview(data)[::2], 0, 8192) is None


def test_codec_pieces_are_the_joined_chunks_and_read_only_views_still_encode() -> None:
    codec = Codec(10, 2, threshold=1 << 20, stripe_size=1 << 20)
    data = os.urandom(3 * (1 << 20) + 7)
    want = [(info, [bytes(f) for f in frags]) for info, frags in codec.stripes(data)]
    for src in (data, memoryview(data), bytearray(data)):
        got = [(info, [b"".join(bytes(x) for x in c) for c in chunks]) for info, chunks in codec.stripe_pieces(src)]
        assert got == want
    from sdk._isal import IsalEncoder

    assert isinstance(codec._isal, IsalEncoder)  # the in-place encoder was used, not pyeclib's
