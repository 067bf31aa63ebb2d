"""Client-side Reed-Solomon (pyeclib ISA-L): plans, round trips, parity decode."""

from __future__ import annotations

import os

import pytest

from sdk._erasure import Codec


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
