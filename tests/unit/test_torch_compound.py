"""Compound objects of ``sdk.torch`` without a store: the packing format's round trip and its
refusals, and ``CompoundSampler``'s order (object by object, every sample once, a new order
each epoch)."""

from __future__ import annotations

import pytest

from sdk.torch import COMPOUND_MAGIC, CompoundSampler, pack_samples, unpack_samples


def test_pack_unpack_round_trip_keeps_every_sample_and_its_bytes() -> None:
    samples = [bytes([i]) * (i * 37 % 50) for i in range(16)]  # sizes differ, one is empty
    blob = pack_samples(samples)
    assert blob.startswith(COMPOUND_MAGIC)
    assert [bytes(v) for v in unpack_samples(blob)] == samples
    assert [bytes(v) for v in unpack_samples(pack_samples([b"x" * 4096]))] == [b"x" * 4096]


def test_unpack_refuses_what_is_not_a_whole_compound_object() -> None:
    blob = pack_samples([b"abc", b"defg"])
    with pytest.raises(ValueError, match="truncated"):
        unpack_samples(blob[:-1])
    with pytest.raises(ValueError, match="not a compound object"):
        unpack_samples(b"XXXX" + blob[4:])
    with pytest.raises(ValueError, match="shorter than its header"):
        unpack_samples(b"FS")
    with pytest.raises(ValueError, match="at least one sample"):
        pack_samples([])


class _Layout:
    """What the sampler reads from a ``CompoundDataset``: where each object starts, its count."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.starts = [sum(counts[:i]) for i in range(len(counts))]


def _object_of(layout: _Layout, index: int) -> int:
    return max(i for i, s in enumerate(layout.starts) if s <= index)


def test_sampler_keeps_each_objects_samples_together_and_shuffles_across_epochs() -> None:
    layout = _Layout([16] * 8 + [5])
    sampler = CompoundSampler(layout, seed=3)  # type: ignore[arg-type]
    first, second = list(sampler), list(sampler)
    for order in (first, second):
        assert sorted(order) == list(range(133)) and len(sampler) == 133
        objects = [_object_of(layout, i) for i in order]
        runs = [o for k, o in enumerate(objects) if k == 0 or objects[k - 1] != o]
        assert sorted(runs) == list(range(9))  # each object's samples are one contiguous run
    assert first != second  # a new order each epoch
    assert list(CompoundSampler(layout, seed=3)) == first  # and reproducible from the seed
    assert list(CompoundSampler(layout, shuffle=False)) == list(range(133))  # type: ignore[arg-type]
