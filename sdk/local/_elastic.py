"""The elasticity benchmark's pure parts: the replayed workload (phases whose working sets
shift: each phase writes its own objects, reads them, and frees them before the next), the
pool-size statistics of a sampled step series, and the memory hit ratio from the daemon's
counters. The replay itself is ``sdk.cli.bench_elasticity``; nothing here does I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Phase", "SERVED", "shifting_phases", "step_stats", "hit_ratio", "served_reads", "p99", "DEFAULT_SHAPE"]

#: working-set size per phase, in objects: up past one function group's memory and back
DEFAULT_SHAPE = (4, 12, 32, 12, 4)


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of the replay: the objects it writes (its working set), each read ``reads`` times."""

    index: int
    names: tuple[str, ...]
    object_bytes: int
    reads: int

    @property
    def bytes(self) -> int:
        return len(self.names) * self.object_bytes


def shifting_phases(shape: Sequence[int], object_bytes: int, reads: int = 2) -> list[Phase]:
    """One phase per entry of ``shape`` (objects in its working set); no object is in two
    phases, so the working set moves as well as changes size."""
    if not shape or min(shape) < 1:
        raise ValueError(f"the shape must list at least one phase of at least one object, got {list(shape)}")
    if object_bytes < 1 or reads < 1:
        raise ValueError(f"objects need at least 1 byte and 1 read, got {object_bytes} bytes, {reads} reads")
    return [Phase(k, tuple(f"p{k}_o{i:03d}" for i in range(n)), object_bytes, reads) for k, n in enumerate(shape)]


def step_stats(samples: Sequence[tuple[float, int]], t_end: float) -> tuple[int, float]:
    """(peak, time-weighted mean) of a step series ``(t, value)`` sorted by time, each value
    holding until the next sample and the last until ``t_end``."""
    if not samples:
        return 0, 0.0
    peak = max(v for _, v in samples)
    span = t_end - samples[0][0]
    if span <= 0:
        return peak, float(samples[-1][1])
    area = 0.0
    for (t, v), nxt in zip(samples, [*samples[1:], (t_end, 0)]):
        area += v * max(0.0, min(nxt[0], t_end) - t)
    return peak, area / span


#: where the daemon served a GET from (its ``gets_from_<where>`` counters, one per GET)
SERVED = ("functions", "cache", "buffer", "cos")


def served_reads(before: Mapping[str, int], after: Mapping[str, int], reads: int) -> dict[str, Any]:
    """Where ``reads`` (all the reads issued) were served, from the daemon's counters before and
    after: ``served`` the GETs from function memory (every chunk from the function holding it),
    from cache functions, from the daemon's persistent buffer (read-after-write while the
    upload waits, or a stripe the functions could not give) and from COS, each GET counted once
    (``storage_functions.daemon._collect.SERVED_FROM``); reads that never reached the daemon's
    GET path (objects in the COS tier) count as COS reads. ``hit_ratio`` is SION's memory-level
    hit ratio (Table 2): function memory plus cache functions only, over all reads;
    ``buffer_hit_ratio`` the buffer's share beside it, not a hit."""
    got = {w: max(0, int(after.get(f"gets_from_{w}", 0)) - int(before.get(f"gets_from_{w}", 0))) for w in SERVED}
    got["cos"] += max(0, reads - sum(got.values()))

    def ratio(n: int) -> float:
        return round(min(1.0, n / reads), 4) if reads > 0 else 0.0

    return {"served": got, "hit_ratio": ratio(got["functions"] + got["cache"]),
            "function_read_ratio": ratio(got["functions"]), "cache_read_ratio": ratio(got["cache"]),
            "buffer_hit_ratio": ratio(got["buffer"]), "cos_read_ratio": ratio(got["cos"])}


def hit_ratio(before: Mapping[str, int], after: Mapping[str, int], reads: int) -> float:
    """SION's memory-level read hit ratio over all ``reads`` issued: GETs served from function
    memory or cache functions (``served_reads``); the daemon's buffer and COS are not hits."""
    return float(served_reads(before, after, reads)["hit_ratio"])


def p99(samples: Sequence[float]) -> float:
    """Nearest-rank 99th percentile (of 64 samples: the largest); 0 for none."""
    if not samples:
        return 0.0
    xs = sorted(samples)
    return xs[max(0, math.ceil(0.99 * len(xs)) - 1)]
