"""Who owns what in a scaled-out deployment: rendezvous (highest random weight) hashing.

Every client, server and daemon computes the same answer from the same ordered
member list, with no coordination and no table to ship:

- ``shard_of_run(run_id, n)``: the metadata shard that owns a run (every call
  of the run goes there; the shard mints only run ids it owns, so ids never
  collide across shards);
- ``shard_of_group(prefix, group, n)`` / ``shard_of_function(name, n, group_size)``:
  the metadata shard a storage function's capacity is registered with (each
  function with exactly one shard, so no two shards hand out the same block).
  Functions go by erasure-code group, not one by one: a daemon names its
  functions ``PREFIX-I`` and group g holds I in ``g*size .. g*size+size-1``; a
  shard needs a whole group (d+p distinct functions) to place a coded object;
- ``owner(key, n)``: the general form (a member index in ``range(n)``);
- ``daemon_order(key, daemons)`` / ``daemon_of(key, daemons)``: the storage daemons (named by
  their ids, in any order) by rendezvous weight for an object key, highest first: the
  allocator places an object on the first that has room (``metadata_server._daemons``), so one
  daemon owns every chunk of it, and the SDK sends what names no daemon (its COS-tier objects)
  to the first. By id, not by position, so a daemon joining or leaving the set moves only
  the keys it wins or held.

Rendezvous hashing moves, when a member is added, only the keys whose new
highest weight is the new member's: about 1/(n+1) of them, and none between
old members (Thaler and Ravishankar, 1998). The weight is blake2b over
``member || key``, so it is the same in every process and Python version (no
``hash()`` randomisation).

What this does not do: decide the member lists (``Endpoints`` carries the shard
addresses in order; a deployment keeps its list for the life of its runs) or
send anything (``sdk`` routes, the metadata server refuses what it does not own).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["daemon_of", "daemon_order", "owner", "shard_of_function", "shard_of_group", "shard_of_run", "weight"]


def weight(member: int, key: str) -> int:
    """The rendezvous weight of ``key`` at member ``member`` (a 64-bit integer)."""
    h = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, key=member.to_bytes(8, "big"))
    return int.from_bytes(h.digest(), "big")


def owner(key: str, n: int) -> int:
    """The member of ``range(n)`` that owns ``key``: the one with the highest weight (ties,
    vanishingly rare, go to the lowest index). One member owns everything."""
    if n < 1:
        raise ValueError(f"a deployment has at least one member to route {key!r} to, got {n}")
    if n == 1:
        return 0
    return max(range(n), key=lambda m: (weight(m, key), -m))


def shard_of_run(run_id: str, shards: int) -> int:
    """The metadata shard (an index into the ordered shard list) that owns ``run_id``."""
    return owner("run:" + run_id, shards)


def shard_of_group(prefix: str, group: int, shards: int) -> int:
    """The metadata shard that owns function group ``group`` of the daemon whose functions are
    named ``prefix-I`` (function prefixes are unique across a deployment)."""
    return owner(f"group:{prefix}/{group}", shards)


def shard_of_function(function_name: str, shards: int, group_size: int = 1) -> int:
    """The metadata shard a storage function's capacity is registered with: its group's
    (``shard_of_group``) when it is named ``PREFIX-I``, else by its whole name."""
    prefix, sep, index = function_name.rpartition("-")
    if sep and prefix and index.isdigit() and group_size >= 1:
        return shard_of_group(prefix, int(index) // group_size, shards)
    return owner("function:" + function_name, shards)


def _named_weight(member: str, key: str) -> int:
    h = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8,
                        key=member.encode("utf-8", "surrogatepass")[:64])
    return int.from_bytes(h.digest(), "big")


def daemon_order(key: str, daemons: Iterable[str]) -> list[str]:
    """The daemon ids ``daemons`` by rendezvous weight for object key ``key``, highest first
    (ties, vanishingly rare, by id). Where the key's object goes: the first with room."""
    return sorted(set(daemons), key=lambda d: (-_named_weight(d, "object:" + key), d))


def daemon_of(key: str, daemons: Iterable[str]) -> str:
    """The daemon (one of ``daemons``, by id) that owns ``key`` while every daemon has room."""
    order = daemon_order(key, daemons)
    if not order:
        raise ValueError(f"a deployment has at least one daemon to route {key!r} to, got none")
    return order[0]
