"""Which storage daemon an object goes to, in a deployment of several (issue 31 item 1).

Each daemon owns a disjoint set of storage functions (registered with its id:
``RegisterCapacity.daemon``), whole erasure-code groups of them, and every chunk
of one object goes to ONE daemon's functions, so a reader asks one daemon and a
daemon can refuse what it does not own. The choice is a rendezvous hash of the
object's store key (``<run_id>/<object>``) over the daemons whose functions
have room for it (``funcsion_rpc.routing.daemon_order``, then
``Allocator.placeable``), falling down the rendezvous order when the first is
full; when none has room the first is returned and the allocation fails there
as it always did (a scale-out is asked, the object goes to the COS tier).

Why a hash and not the least loaded daemon: the hash spreads a run's objects
over the daemons evenly enough (word count: see ``funcsion bench``'s notes in
the report of issue 31), needs no load figure the daemons would have to ship,
and adding a daemon moves about 1/N of the keys' homes, none between the
others. Load only breaks ties that capacity forces (the fall-back).

Pure: the allocator's state in, a daemon id out; no I/O. With the only daemon
(id ``""``) it answers None: the allocator's unscoped path, exactly as before
several daemons existed; one named daemon (a shard that holds groups of one
daemon of several) is still named. Not covered: the placement inside the
chosen daemon's functions (``_allocator``).
"""

from __future__ import annotations

from typing import Hashable

from funcsion_rpc import routing

from ._allocator import Allocator

__all__ = ["choose_daemon"]


def choose_daemon(allocator: Allocator, store_key: str, size: int, owner: Hashable, key: Hashable,
                  chunk_bytes: int = 0, holes: bool = True) -> str | None:
    """The daemon whose functions object ``store_key`` (``size`` bytes, owner ``owner``, pool
    ``key``) goes to: the first in its rendezvous order that has room, else the first; None
    with one daemon that has no id (no scoping). A named daemon is named even when it is the
    only one this server knows (a metadata shard may hold the function groups of one daemon of
    several): the client must send the object there, not to its first daemon."""
    daemons = allocator.daemons
    if size <= 0:
        return None
    if len(daemons) == 1:
        return next(iter(daemons)) or None
    order = routing.daemon_order(store_key, daemons)
    for d in order:
        if allocator.placeable(size, owner, key, chunk_bytes, holes, daemon=d):
            return d
    return order[0]
