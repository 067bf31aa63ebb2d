"""SION's GC buckets (Sec. 5.3.1) as candidate filters of the allocator: new data goes to the
newest bucket's functions and never to a degraded one. Pure: the daemon's report in, two
filters out; no clock, no I/O.

The daemon's GC window (``storage_functions.daemon._gc``) reports, with each
``fetch_instructions``, the storage functions that must not take new data: ``active`` (a
bucket older than the newest, its functions sealed at a GC round), ``degraded`` and
``released``; a function it does not name is in the newest bucket (or holds nothing yet).
The report replaces the last one whole.

- :attr:`GcBuckets.sealed` (strict): refuses ``degraded`` functions, for slices and chunks
  alike, however short of room the pool is (an object that finds no other room goes to the
  COS tier and a scale-out is asked); and ``released`` ones while the allocator still has
  blocks in use there (their bytes left function memory; a released function whose blocks
  are all free is as good as a new one, and joins the newest bucket with its next data).
- :attr:`GcBuckets.newest` (soft): refuses functions of older ``active`` buckets, so new
  data lands in the newest bucket; when the newest bucket has no room the allocator places
  as if it were not there (older active buckets take it rather than COS), and the state asks
  for a scale-out once per report (``want_scale_out``) so the next objects find room there.

Every change of the report is an event the journal keeps (``ReportBuckets``); ``changes``
says whether a report would change anything. :meth:`GcBuckets.on_degraded` says whether an
object's extents lie on a degraded function (a read of it moves it: ``MoveObject``). Not covered: the window itself and
compaction (the daemon), busy functions (``_busy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._allocator import Allocator
    from ._events import Extent

__all__ = ["GcBuckets", "BUCKET_STATES"]

#: What the daemon may say of a function (anything else in a report is refused).
BUCKET_STATES = ("active", "degraded", "released")


@dataclass(slots=True)
class _Sealed:
    """The strict filter: no new data on a degraded function, nor on a released one that
    still holds blocks."""

    buckets: GcBuckets

    def admits(self, function: str) -> bool:
        state = self.buckets.state.get(function)
        if state == "degraded":
            return False
        if state == "released":
            f = self.buckets.allocator.functions.get(function)
            return f is not None and f.used == 0
        return True


@dataclass(slots=True)
class _Newest:
    """The soft filter: new data on the newest bucket's functions."""

    buckets: GcBuckets

    def admits(self, function: str) -> bool:
        return self.buckets.state.get(function) != "active"


@dataclass(slots=True)
class GcBuckets:
    """The daemon's last bucket report (function name -> active | degraded | released)."""

    allocator: Allocator
    state: dict[str, str] = field(default_factory=dict)
    #: a scale-out was asked since the last report changed
    asked: bool = False
    sealed: _Sealed = field(init=False)
    newest: _Newest = field(init=False)

    def __post_init__(self) -> None:
        self.sealed = _Sealed(self)
        self.newest = _Newest(self)

    @staticmethod
    def check(report: Mapping[str, str]) -> dict[str, str]:
        """``report`` as a plain dict; ValueError naming the first unknown state."""
        bad = next(((fn, s) for fn, s in report.items() if s not in BUCKET_STATES), None)
        if bad is not None:
            raise ValueError(f"bucket report: function {bad[0][:64]!r} is {bad[1][:32]!r}; a function is one of "
                             f"{', '.join(BUCKET_STATES)} (or not named: the newest bucket)")
        return dict(report)

    def _merged(self, report: Mapping[str, str], daemon: str) -> dict[str, str]:
        """The bucket states after ``report``: the whole pool's with one daemon (``daemon`` ""),
        else what ``daemon`` says of its own functions beside what the others said of theirs."""
        if not daemon:
            return dict(report)
        mine = self.allocator.daemon_of
        return {**{fn: s for fn, s in self.state.items() if mine(fn) != daemon}, **report}

    def changes(self, report: Mapping[str, str], daemon: str = "") -> bool:
        return self._merged(report, daemon) != self.state

    def report(self, report: Mapping[str, str], daemon: str = "") -> None:
        self.state = self._merged(report, daemon)
        self.asked = False

    def on_degraded(self, extents: Iterable[Extent]) -> bool:
        """Whether any of ``extents`` lies on a function the last report calls degraded."""
        state = self.state
        return bool(state) and any(state.get(e.function) == "degraded" for e in extents)

    def want_scale_out(self, functions: set[str]) -> bool:
        """An object was just placed on ``functions``: whether to ask the storage layer for a
        new function group because some of them are not the newest bucket's (once per report)."""
        if self.asked or all(self.newest.admits(fn) for fn in functions):
            return False
        self.asked = True
        return True
