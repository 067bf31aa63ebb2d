"""``sdk.offload_items``: hand a Map state a list too large for the state, as chunks.

Step Functions limits a state's JSON to 256 KiB, and a ``Map``'s ``ItemsPath`` list is part
of that state: a handler cannot return 50,000 items for an inline Map to iterate over, and
50,000 references of ~350 bytes (17 MB) do not fit either. A handler returns
``sdk.offload_items(items)`` where the list would go; ``@sdk.offload`` stores the items as
*chunks* (consecutive items, one object each) and puts a list of chunk references in the
state. The Map iterates over that list: each iteration gets one reference, which its
decorated handler reads as the chunk's list of items.

How many chunks (``chunks``, pure): the reference list may take at most the offload
threshold (``offload_threshold_bytes``, 64 KiB by default, which leaves the state room
under 256 KiB for the rest of it; about 185 references of ~350 bytes), and a chunk should hold at least
a threshold's worth of items (a smaller value would not be offloaded at all). So: one
item per reference when the items are that large and few enough, else chunks of
``ceil(n / count)`` items with ``count = min(refs that fit, total bytes / threshold)``.
``chunk_items`` fixes the items per chunk; a count whose references would not fit is
refused (``MapItemsTooLarge``, naming the limit and the fix). A list past what chunking
can carry (chunks too large for one iteration's memory) is a Distributed Map's
(``ItemReader`` over S3), which the planner does not follow (``sdk.asl_plan``).

Freeing: the plan (``sdk._offload_plan.map_items``) says when the list's only reader is the
Map's iteration, each item read once; the iteration's decorator then frees every chunk
it read when its handler has returned (a raising iteration frees nothing: its retry reads
the chunk again). Otherwise the chunks are kept until the execution ends.

Not here: storing and reading (``sdk._offload``), the reference format (``_offload_refs``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .exceptions import MapItemsTooLarge

__all__ = ["MapItems", "chunks", "offload_items"]

#: Step Functions' limit on a state's input and output (UTF-8 JSON), Standard and Express alike.
STATE_LIMIT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class MapItems:
    """What ``sdk.offload_items`` returns: a list for a Map, to be stored as chunks."""

    items: list[Any]
    chunk_items: int | None = None


def offload_items(items: Iterable[Any], *, chunk_items: int | None = None) -> MapItems:
    """Mark ``items`` (a list for a Map's ``ItemsPath``) to be handed over as chunk references
    by ``@sdk.offload``; ``chunk_items``: the items per chunk (default: chosen by size, see
    the module docstring). Each Map iteration then receives one chunk: a list of items."""
    if chunk_items is not None and (not isinstance(chunk_items, int) or chunk_items < 1):
        raise ValueError(f"sdk.offload_items: chunk_items must be a positive int, not {chunk_items!r}")
    return MapItems(list(items), chunk_items)


def chunks(n: int, total_bytes: int, ref_bytes: int, budget: int, *, chunk_items: int | None = None,
           state: str = "?") -> list[tuple[int, int]]:
    """The (start, stop) item ranges of ``n`` items (``total_bytes`` of JSON) whose references
    (``ref_bytes`` each, a comma more in the list) must fit in ``budget`` bytes."""
    if n == 0:
        return []
    fit = max(1, (budget - 2) // (ref_bytes + 1))
    if chunk_items is not None:
        per = chunk_items
        count = math.ceil(n / per)
        if count > fit:
            need = math.ceil(n / fit)
            raise MapItemsTooLarge(
                f"the {n:,} Map items of state {state} in chunks of {per:,} make {count:,} references of "
                f"~{ref_bytes} bytes ({count * (ref_bytes + 1) / 1024:,.0f} KiB), more than the "
                f"{budget / 1024:,.0f} KiB a reference list may take (offload_threshold_bytes: the Map's "
                f"ItemsPath list is part of the state, limited to {STATE_LIMIT_BYTES // 1024} KiB); pass "
                f"chunk_items={need:,} or more to sdk.offload_items, or leave it unset (funcsion chunks by size), "
                "or read a list past that from S3 with a Distributed Map's ItemReader")
    else:
        count = max(1, min(n, fit, math.ceil(total_bytes / max(1, budget))))
        per = math.ceil(n / count)
    return [(a, min(n, a + per)) for a in range(0, n, per)]
