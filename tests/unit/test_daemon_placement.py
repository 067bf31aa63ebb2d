"""Placement over several daemons (issue 31 item 1), with no network: the allocator puts every
chunk of one object on ONE daemon's functions (``allocate(daemon=)``, slice pools per daemon), the
metadata core chooses that daemon by the rendezvous hash of the object's store key among the
daemons with room and names it in the placement, a full daemon's objects fall down the
rendezvous order, a function cannot change daemons, and an instruction stays pending until every
daemon acknowledged it. One daemon (no id) is the unscoped path as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import routing
from metadata_server import CoreDriver, DropObject, Placed, reply
from metadata_server._allocator import Allocator, Solo
from metadata_server._daemons import choose_daemon
from metadata_server._state import InvalidRequest

D, P = 4, 2


def two_daemons(blocks: int = 8, functions: int = D + P) -> Allocator:
    a = Allocator(block_size=1000, data_chunks=D, parity_chunks=P)
    for k in range(2):
        for i in range(functions):
            a.register(f"sion-d{k}-{i}", blocks, f"daemon-{k}")
    return a


def daemon_of_extents(a: Allocator, placement: object) -> set[str]:
    return {a.daemon_of(e.function) for e in placement.extents}  # type: ignore[attr-defined]


def test_an_allocation_scoped_to_a_daemon_lands_only_on_its_functions() -> None:
    a = two_daemons()
    assert a.daemons == {"daemon-0", "daemon-1"}
    placed = []
    for i in range(40):                 # slices of one pool key, alternating daemons: each stays home
        d = f"daemon-{i % 2}"
        p = a.allocate(90, "r-1", 3, daemon=d)
        assert p is not None and p.daemon == d and daemon_of_extents(a, p) == {d}
        placed.append(p)
    coded = a.allocate(3500, "r-1", 3, daemon="daemon-1")          # d+p chunks, distinct functions
    assert coded is not None and coded.kind == "blocks" and coded.daemon == "daemon-1"
    assert daemon_of_extents(a, coded) == {"daemon-1"}
    assert len({e.function for e in coded.extents}) == D + P
    a.validate()
    for p in [*placed, coded]:
        a.free(p)
    a.validate()
    assert not a.used and a.allocated_bytes == 0


def test_one_daemon_is_the_unscoped_path_and_names_none() -> None:
    a = Allocator(block_size=1000, data_chunks=D, parity_chunks=P)
    for i in range(D + P):
        a.register(f"sion-{i}", 8)
    assert a.daemons == {""}
    assert choose_daemon(a, "r-1/x", 500, "r-1", 0) is None
    p = a.allocate(500, "r-1", 0)
    assert p is not None and p.daemon == ""


def test_a_server_that_knows_one_of_several_daemons_still_names_it() -> None:
    """A metadata shard may hold the function groups of only one daemon of several: its
    placements still name that daemon, or the client would send them to its first daemon."""
    a = Allocator(block_size=1000, data_chunks=D, parity_chunks=P)
    for i in range(D + P):
        a.register(f"sion-d1-{i}", 8, "daemon-1")
    assert choose_daemon(a, "r-1/x", 500, "r-1", 0) == "daemon-1"
    p = a.allocate(500, "r-1", 0, daemon="daemon-1")
    assert p is not None and p.daemon == "daemon-1"


def test_the_choice_is_the_keys_rendezvous_daemon_then_the_next_with_room() -> None:
    a = two_daemons(blocks=1)
    keys = [f"r-1/o{i}" for i in range(30)]
    assert {choose_daemon(a, k, 500, "r-1", Solo(k)) for k in keys} == {"daemon-0", "daemon-1"}
    for k in keys:                      # while both have room: the hash's choice
        assert choose_daemon(a, k, 500, "r-1", Solo(k)) == routing.daemon_of(k, ["daemon-0", "daemon-1"])
    # fill daemon-0 (one block per function, one object per block)
    while a.placeable(900, "r-1", Solo("fill"), daemon="daemon-0"):
        assert a.allocate(900, "r-1", Solo(f"fill{len(a.used)}"), daemon="daemon-0") is not None
    for k in keys:                      # now every object goes to the daemon with room
        assert choose_daemon(a, k, 500, "r-1", Solo(k)) == "daemon-1"
    a.validate()


def test_the_core_names_the_daemon_and_places_each_object_on_one(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000, data_chunks=D, parity_chunks=P)
    key = d.register(fig9_path)
    for k in range(2):
        for i in range(2 * (D + P)):
            d.capacity(f"sion-d{k}-{i}", 16, f"daemon-{k}")
    run = d.start(key)
    seen = set()
    for i in range(30):
        size = 3500 if i % 5 == 0 else 120
        p = reply(d.begin(run, "", f"adhoc_{i}", size, adhoc=True), Placed).placement
        assert p.tier == "memory" and p.daemon in ("daemon-0", "daemon-1")
        assert {e.function.startswith(f"sion-d{p.daemon[-1]}-") for e in p.extents} == {True}
        assert p.daemon == routing.daemon_of(f"{run}/adhoc_{i}", ["daemon-0", "daemon-1"])
        seen.add(p.daemon)
        d.finish(run, "", f"adhoc_{i}")
    assert seen == {"daemon-0", "daemon-1"}
    d.state.validate_state()
    with pytest.raises(InvalidRequest, match="daemon 'daemon-0'.*daemon 'daemon-1'"):
        d.capacity("sion-d0-0", 16, "daemon-1")        # a function belongs to one daemon


def test_an_instruction_stays_pending_until_every_daemon_acknowledged(fig9_path: Path) -> None:
    d = CoreDriver(block_size=1000, data_chunks=D, parity_chunks=P)
    key = d.register(fig9_path)
    for k in range(2):
        for i in range(D + P):
            d.capacity(f"sion-d{k}-{i}", 16, f"daemon-{k}")
    run = d.start(key)
    d.put(run, "", "x", 100, adhoc=True)
    d.end(run)
    drops = [i for i in d.state.pending if isinstance(i, DropObject)]
    assert drops
    last = d.state.pending[-1].seq
    d.ack(last, "daemon-1")                  # one daemon carried everything out
    assert d.state.pending_instructions(0, 100)   # the other has not: nothing is discarded
    assert [i.seq for i in d.state.pending_instructions(0, 100)][-1] == last
    d.ack(last, "daemon-0")
    assert not d.state.pending
    d.state.validate_state()
