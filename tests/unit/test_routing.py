"""Routing by rendezvous hash (funcsion_rpc.routing): each run and key has exactly one owner,
every process computes the same one, and adding a member moves only about 1/N of them, all to
the new member."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from funcsion_rpc import routing

names = st.text(alphabet=string.ascii_letters + string.digits + "-_/.", min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(key=names, n=st.integers(min_value=1, max_value=16))
def test_every_key_has_exactly_one_owner_in_range(key: str, n: int) -> None:
    o = routing.owner(key, n)
    assert 0 <= o < n
    assert routing.owner(key, n) == o                   # deterministic
    # exactly one member carries the highest weight (ties would need a 64-bit collision)
    weights = [routing.weight(m, key) for m in range(n)]
    assert weights.count(max(weights)) == 1 or n == 1
    assert routing.shard_of_run(key, n) in range(n) and routing.shard_of_function(key, n) in range(n)


@settings(max_examples=200, deadline=None)
@given(key=names, n=st.integers(min_value=1, max_value=15))
def test_adding_a_member_moves_a_key_only_to_the_new_member(key: str, n: int) -> None:
    before, after = routing.owner(key, n), routing.owner(key, n + 1)
    assert after in (before, n)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_adding_a_member_moves_about_one_in_n_plus_one(n: int) -> None:
    keys = [f"r-{i}" for i in range(1, 6001)]
    moved = sum(routing.shard_of_run(k, n) != routing.shard_of_run(k, n + 1) for k in keys)
    share = 1 / (n + 1)
    assert abs(moved / len(keys) - share) < 0.03, (moved, share)
    # and the load is balanced: no member owns more than its share by much
    counts = [0] * (n + 1)
    for k in keys:
        counts[routing.shard_of_run(k, n + 1)] += 1
    assert max(counts) / len(keys) < share + 0.03


def test_known_answers_pin_the_hash() -> None:
    """Every process (client, shard, daemon, any Python version) must agree: the answers are pinned,
    so a change to the hash (which would strand every live run on the wrong shard) fails here."""
    assert [routing.shard_of_run(f"r-{i}", 2) for i in range(1, 13)] == [1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1, 0]
    assert [routing.shard_of_run(f"r-{i}", 3) for i in range(1, 13)] == [1, 0, 2, 2, 0, 1, 1, 0, 1, 0, 2, 0]
    assert routing.weight(0, "run:r-1") == 7031459754201723234
    assert routing.owner("anything", 1) == 0


def test_no_members_is_refused_with_the_key() -> None:
    with pytest.raises(ValueError, match="'k'"):
        routing.owner("k", 0)
