"""The generalisation split: runs grouped by their shape, some shapes held out from
training. Pure Python.

A run's shape comes from its own rows, so datasets recorded before this split existed
have one too: its fan-out is the number of objects its first stage writes (the lowest
``F_stage`` among its rows: word count's chunks, one per mapper) and its input size
the bytes of those objects (the text the splitter cut up). Input sizes are compared as
multiples of the dataset's smallest (``size_class``, one decimal: runs of one input at
different fan-outs land in one class), so a split names them without knowing the bytes
of an example's input.

A ``Split`` holds out fan-outs and size classes: a run is unseen when its fan-out or its
size class is held out; training uses only runs where neither is. Not covered: scoring
(``_compare``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._dataset import Row
from .exceptions import DatasetError

__all__ = ["Shape", "Split", "run_shapes", "split_rows", "DEFAULT_SPLIT"]


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    fan_out: int
    size_class: float          # input bytes / the dataset's smallest run input
    input_bytes: int


def run_shapes(rows: Sequence[Row]) -> dict[str, Shape]:
    """run -> its ``Shape``."""
    first: dict[str, float] = {}
    for r in rows:
        first[r.run] = min(first.get(r.run, r.features[0]), r.features[0])
    fan: dict[str, int] = {}
    size: dict[str, int] = {}
    for r in rows:
        if r.features[0] == first[r.run]:
            fan[r.run] = fan.get(r.run, 0) + 1
            size[r.run] = size.get(r.run, 0) + r.size
    smallest = min((s for s in size.values() if s > 0), default=1)
    return {run: Shape(fan[run], round(size[run] / smallest, 1), size[run]) for run in fan}


@dataclass(frozen=True, slots=True)
class Split:
    """Fan-outs and input size classes held out of training."""

    unseen_fan_outs: frozenset[int]
    unseen_sizes: frozenset[float]

    def unseen(self, shape: Shape) -> bool:
        return shape.fan_out in self.unseen_fan_outs or shape.size_class in self.unseen_sizes

    def describe(self, rows: Sequence[Row], shapes: Mapping[str, Shape]) -> dict[str, Any]:
        """What was trained on and what held out, as the dataset has them."""
        used = {shapes[r.run] for r in rows}
        seen = [s for s in used if not self.unseen(s)]
        return {"fan_outs_seen": sorted({s.fan_out for s in seen}),
                "fan_outs_unseen": sorted({s.fan_out for s in used} - {s.fan_out for s in seen}),
                "sizes_seen": sorted({s.size_class for s in seen}),
                "sizes_unseen": sorted({s.size_class for s in used} - {s.size_class for s in seen}),
                "runs_seen": len({r.run for r in rows if not self.unseen(shapes[r.run])}),
                "runs_unseen": len({r.run for r in rows if self.unseen(shapes[r.run])})}


#: Train word count on mappers 2-8 and 16 at 1, 2, 4 and 8 times its smallest input (the
#: shares 0.5, 1, 2 and 4 of its text of ``funcsion collect --text-share``); hold out 12
#: and 32 mappers and 6 and 16 times (shares 3 and 8).
DEFAULT_SPLIT = Split(frozenset({12, 32}), frozenset({6.0, 16.0}))


def split_rows(rows: Sequence[Row], split: Split,
               shapes: Mapping[str, Shape] | None = None) -> tuple[list[Row], list[Row]]:
    """(rows of seen runs, rows of unseen runs); ``DatasetError`` when either is empty."""
    shapes = shapes if shapes is not None else run_shapes(rows)
    seen: list[Row] = []
    unseen: list[Row] = []
    for r in rows:
        (unseen if split.unseen(shapes[r.run]) else seen).append(r)
    if not seen or not unseen:
        have = sorted({(s.fan_out, s.size_class) for s in shapes.values()})
        raise DatasetError(f"the split holding out fan-outs {sorted(split.unseen_fan_outs)} and input sizes "
                           f"{sorted(split.unseen_sizes)} (times the smallest) leaves "
                           f"{'no training runs' if not seen else 'no unseen runs'}; the dataset's runs have "
                           f"(fan-out, size) {have}: record runs at other fan-outs and sizes with "
                           "`funcsion collect --param ... --text-share ...`")
    return seen, unseen
