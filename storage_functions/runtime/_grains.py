"""Grains held by entries in one function's memory, counted in constant time per entry:
shared by the storage-function runtime (which backs and releases the grains' pages) and the
daemon's ledger (which accounts for them). Pure; no I/O.

An entry is one run of bytes over the function's blocks end to end (it continues at offset
0 of the next block). Entries never overlap, so the grains strictly inside an entry's run
are its own, and only its first and last grain can be shared with a neighbour: those are
reference-counted (``edges``), the inner ones just counted (``interior``).
"""

from __future__ import annotations

__all__ = ["GrainSet"]


class GrainSet:
    """``add``/``remove`` a run of bytes; each answers the grains that became held or free,
    as ranges of grain numbers (grain ``u`` is bytes ``[u * grain, (u + 1) * grain)``)."""

    __slots__ = ("grain", "edges", "interior")

    def __init__(self, grain: int) -> None:
        if grain <= 0:
            raise ValueError(f"grain must be positive, got {grain}")
        self.grain = grain
        self.edges: dict[int, int] = {}  # first/last grain of an entry -> entries with it as an edge
        self.interior = 0  # grains strictly inside some entry

    def __len__(self) -> int:
        """Grains held."""
        return self.interior + len(self.edges)

    def bytes(self) -> int:
        return len(self) * self.grain

    def add(self, start: int, length: int) -> list[range]:
        if length <= 0:
            return []
        g, edges = self.grain, self.edges
        a, b = start // g, (start + length - 1) // g
        na = edges.get(a, 0)
        edges[a] = na + 1
        if a == b:
            return [range(a, a + 1)] if not na else []
        nb = edges.get(b, 0)
        edges[b] = nb + 1
        self.interior += b - a - 1
        lo, hi = (a if not na else a + 1), (b if not nb else b - 1)
        return [range(lo, hi + 1)] if hi >= lo else []

    def remove(self, start: int, length: int) -> list[range]:
        if length <= 0:
            return []
        g = self.grain
        a, b = start // g, (start + length - 1) // g
        na = self._drop(a)
        if a == b:
            return [range(a, a + 1)] if not na else []
        nb = self._drop(b)
        self.interior -= b - a - 1
        lo, hi = (a if not na else a + 1), (b if not nb else b - 1)
        return [range(lo, hi + 1)] if hi >= lo else []

    def _drop(self, unit: int) -> int:
        left = self.edges[unit] - 1
        if left:
            self.edges[unit] = left
        else:
            del self.edges[unit]
        return left
