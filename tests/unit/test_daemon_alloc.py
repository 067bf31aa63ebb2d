"""The metadata server's placement as the daemon reads it: one reservation per chunk, the
stripes' chunks laid end to end in it, refused when they do not fit."""

from __future__ import annotations

import pytest

from storage_functions.daemon._checks import alloc_chunks, stripe_places
from storage_functions.exceptions import ProtocolError, StoreError

BS = 1000


def test_stripes_continue_where_the_last_stripe_of_that_chunk_ended():
    chunks = alloc_chunks("r/k", [["sion-0", 4, 0, 2500], ["sion-1", 7, 0, 2500], [2, 0, 0, 2500]], 3)
    used = [0, 0, 0]
    assert stripe_places("r/k", chunks, used, 900, BS) == [("sion-0", 4, 0), ("sion-1", 7, 0), (2, 0, 0)]
    assert stripe_places("r/k", chunks, used, 900, BS) == [("sion-0", 4, 900), ("sion-1", 7, 900), (2, 0, 900)]
    assert stripe_places("r/k", chunks, used, 700, BS) == [("sion-0", 5, 800), ("sion-1", 8, 800), (2, 1, 800)]
    assert used == [2500] * 3
    with pytest.raises(StoreError, match="chunk 0 needs 2501 bytes, the metadata server reserved 2500"):
        stripe_places("r/k", chunks, used, 1, BS)


def test_a_slice_starts_at_its_offset_in_a_shared_block():
    chunks = alloc_chunks("r/s", [["sion-3", 2, 600, 300]], 1)
    assert stripe_places("r/s", chunks, [0], 300, BS) == [("sion-3", 2, 600)]
    with pytest.raises(StoreError, match="offset 1000 is outside a block"):
        stripe_places("r/s", alloc_chunks("r/s", [["sion-3", 2, 1000, 300]], 1), [0], 300, BS)


@pytest.mark.parametrize("alloc", [
    [["sion-0", 0, 0]],                     # no length
    [["sion-0", 0, 0, -1]],                 # negative length
    [["sion-0", "0", 0, 5]],                # not integers
    [[True, 0, 0, 5]],                      # a bool is not a function
    [["sion-0", 0, 0, 5], ["sion-1", 0, 0, 5]],   # two places for one chunk
    {"sion-0": [0, 0, 5]},                  # not a list
])
def test_malformed_allocations_are_protocol_errors(alloc):
    with pytest.raises(ProtocolError, match="PUT 'r/x'"):
        alloc_chunks("r/x", alloc, 1)
