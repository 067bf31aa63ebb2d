"""When the write-behind uploads a buffered version (pure policy, no I/O, no clock
of its own): :class:`UploadPolicy` says when a version is due, :class:`UploadQueue`
hands out due versions in batches.

SION uploads every version at once; a version freed before its upload started is
never uploaded. Beyond SION, a version whose every stripe carries parity
(``p >= 1``) may wait ``parity_delay_s``: while it waits, function memory holds
it with the loss of up to ``p`` functions covered by the code, and the daemon's
buffer (memory, and a segment or file on its disk) holds it whole, so
read-after-write and recovery are served from the buffer. If it is freed within
the delay -- the common case for intermediate data read once by the next stage
-- its COS PUT (and the DELETE its free would need) never happen. A version one
of whose chunks is lost is expedited (uploaded at once): the code covers fewer
losses now. A predicted expiry (``expires_at``, on the daemon's clock) defers a
coded version's upload until just after it, at most ``max_defer_s`` from the
PUT. Versions without parity wait only ``delay_s`` (0: SION's behaviour);
``parity_delay_s = 0`` turns the parity policy off, expiry deferral included.

Not here: threads, COS, files (``_buffer``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Generic, Hashable, TypeVar

__all__ = ["UploadPolicy", "UploadQueue"]

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class UploadPolicy:
    """``delay_s``: every version waits this long; ``parity_delay_s``: a coded version
    (every stripe has parity) waits this long (the larger of the two wins);
    ``expiry_grace_s``: a predicted expiry defers a coded version's upload to this long
    after it; ``max_defer_s``: never later than this after the PUT."""

    delay_s: float = 0.0
    parity_delay_s: float = 2.0
    expiry_grace_s: float = 0.5
    max_defer_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("delay_s", "parity_delay_s", "expiry_grace_s", "max_defer_s"):
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"UploadPolicy.{name} must be >= 0, got {v!r}")

    def due(self, now: float, min_parity: int, expires_at: float | None = None) -> float:
        """When a version PUT at ``now`` is uploaded; ``min_parity``: the least parity
        chunks of its stripes (0: some stripe has none, or it has no stripes)."""
        wait = self.delay_s
        if self.coded(min_parity):
            wait = max(wait, self.parity_delay_s)
            if expires_at is not None:
                wait = max(wait, min(expires_at + self.expiry_grace_s - now, self.max_defer_s))
        return now + wait

    def coded(self, min_parity: int) -> bool:
        """Whether a version with ``min_parity`` is under the parity policy (waits for the
        parity delay and a predicted expiry); never with ``parity_delay_s == 0`` (SION)."""
        return min_parity >= 1 and self.parity_delay_s > 0


class UploadQueue(Generic[T]):
    """Items by due time. ``push`` (again: moves it), ``expedite`` (due now), ``drop``,
    ``pop_due(now, n)`` (up to ``n`` items due by ``now``, earliest first),
    ``next_due()``. Not thread-safe: the caller holds its lock."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._due: dict[T, float] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, item: object) -> bool:
        return item in self._due

    def push(self, item: T, due: float) -> None:
        self._due[item] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, item))

    def expedite(self, item: T, now: float) -> bool:
        """Make a queued ``item`` due at ``now``; True if that moved it (it was due later)."""
        due = self._due.get(item)
        if due is None or due <= now:
            return False
        self.push(item, now)
        return True

    def drop(self, item: T) -> bool:
        return self._due.pop(item, None) is not None

    def _clean(self) -> None:
        h = self._heap
        while h and self._due.get(h[0][2]) != h[0][0]:
            heapq.heappop(h)  # moved or dropped since

    def next_due(self) -> float | None:
        self._clean()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float, n: int) -> list[T]:
        out: list[T] = []
        while len(out) < n:
            self._clean()
            if not self._heap or self._heap[0][0] > now:
                break
            _, _, item = heapq.heappop(self._heap)
            del self._due[item]
            out.append(item)
        return out

    def pop_all(self, n: int) -> list[T]:
        """Up to ``n`` items whatever their due time (a closing buffer)."""
        return self.pop_due(float("inf"), n)
