"""The one-byte codes of a ``read_batch`` reply (``ReadBatch``), shared by the server and
its clients: per object asked, in order, its tier and its read flags.

- ``tiers``: ``TIER_MEMORY`` (function memory), ``TIER_COS`` (the COS tier),
  ``TIER_EMPTY`` (zero bytes, stored nowhere); ``TIER_NAMES`` maps them back.
- ``flags``: ``RECORDED`` (the read entered the commit buffer now),
  ``ALREADY_COMMITTED`` (the reader committed in an earlier attempt),
  ``FREED_BY_READ`` (this read freed the object: the reader frees its bytes),
  ``LAST_READ`` (this read was the object's last declared one: once the reader has the
  bytes it calls ``read_done``, which releases the object's function memory).

Imports nothing.
"""

from __future__ import annotations

__all__ = ["ALREADY_COMMITTED", "FREED_BY_READ", "LAST_READ", "RECORDED", "TIER_CODES", "TIER_COS", "TIER_EMPTY",
           "TIER_MEMORY", "TIER_NAMES"]

TIER_MEMORY, TIER_COS, TIER_EMPTY = ord("m"), ord("c"), ord("e")
TIER_CODES = {"memory": TIER_MEMORY, "cos": TIER_COS, "empty": TIER_EMPTY}
TIER_NAMES = {code: name for name, code in TIER_CODES.items()}
RECORDED, ALREADY_COMMITTED, FREED_BY_READ, LAST_READ = 1, 2, 4, 8
