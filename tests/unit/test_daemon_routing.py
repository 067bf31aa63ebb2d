"""Routing objects over several daemons (funcsion_rpc.routing.daemon_order / daemon_of, issue 31
item 1): every key maps to exactly one daemon of the deployment, by id whatever order the ids are
listed in; adding a daemon moves at most about 1/N of the keys, all of them to the new daemon;
removing one moves only its own keys."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from funcsion_rpc import routing

keys = st.text(alphabet=string.ascii_letters + string.digits + "-_/.", min_size=1, max_size=60)
ids = st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=12, unique=True).map(
    lambda ns: [f"daemon-{n}" for n in ns])


@settings(max_examples=150, deadline=None)
@given(key=keys, daemons=ids, data=st.data())
def test_every_key_maps_to_exactly_one_daemon_whatever_the_order(key: str, daemons: list[str],
                                                                  data: st.DataObject) -> None:
    order = routing.daemon_order(key, daemons)
    assert sorted(order) == sorted(daemons)                 # a ranking of all of them, each once
    owner = routing.daemon_of(key, daemons)
    assert owner == order[0] and owner in daemons
    shuffled = data.draw(st.permutations(daemons))
    assert routing.daemon_of(key, shuffled) == owner        # by id, not by position
    assert routing.daemon_order(key, shuffled) == order


@settings(max_examples=150, deadline=None)
@given(key=keys, daemons=ids)
def test_adding_a_daemon_moves_a_key_only_to_it_and_removing_one_only_moves_its_keys(
        key: str, daemons: list[str]) -> None:
    new = "daemon-new"
    before, after = routing.daemon_of(key, daemons), routing.daemon_of(key, [*daemons, new])
    assert after in (before, new)
    if len(daemons) > 1:
        gone = daemons[-1]
        left = routing.daemon_of(key, daemons[:-1])
        assert left == before or before == gone
        # the fall-back order when a daemon is full is the ranking without it
        assert routing.daemon_order(key, daemons[:-1]) == [d for d in routing.daemon_order(key, daemons) if d != gone]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_adding_a_daemon_moves_at_most_about_one_in_n_plus_one(n: int) -> None:
    members = [f"daemon-{i}" for i in range(n)]
    objects = [f"r-{i % 40}/obj_{i:05d}" for i in range(6000)]
    moved = sum(routing.daemon_of(k, members) != routing.daemon_of(k, [*members, f"daemon-{n}"]) for k in objects)
    share = 1 / (n + 1)
    assert moved / len(objects) < share + 0.03, (moved, share)
    assert moved / len(objects) > share - 0.03                # and the new daemon does take its share
    counts = {d: 0 for d in members}
    for k in objects:
        counts[routing.daemon_of(k, members)] += 1
    assert max(counts.values()) / len(objects) < 1 / n + 0.03  # spread evenly


def test_known_answers_pin_the_hash() -> None:
    """Clients, the allocator and every daemon must agree on a key's daemon: pinned."""
    three = ["daemon-0", "daemon-1", "daemon-2"]
    assert [routing.daemon_of(f"r-1/k{i}", three) for i in range(8)] == [
        "daemon-2", "daemon-0", "daemon-0", "daemon-2", "daemon-0", "daemon-2", "daemon-2", "daemon-2"]
    assert routing.daemon_of("anything", ["daemon-7"]) == "daemon-7"


def test_no_daemons_is_refused_with_the_key() -> None:
    with pytest.raises(ValueError, match="'k'"):
        routing.daemon_of("k", [])

