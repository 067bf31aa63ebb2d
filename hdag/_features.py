"""Lifetime features of intermediate objects (FuncStore Alg. 1 and 2).

For an object written by a function in stage ``F_stage`` and read by
functions ``R``:

- ``T_read``: how many functions read it (its RecvBoxes);
- ``N_functions``: the sum over readers of how many objects each reads;
- ``D_stage``: the largest reader stage minus ``F_stage``;
- ``M_path``: the most functions on a *potential impact path*, a chain of
  producer links from a reader back to any function in the writer's stage,
  counting the reader itself (the paper's Fig. 9 text gives <F2, F4, F5, F6>
  length 4).

Beyond FuncStore, two features tell apart the objects of one stage that run in
different waves (with ``c`` tasks running at once, a stage's tasks start in
their WDS order, ``c`` at a time, so the ``k``-th task of a stage runs in wave
``k // c`` on the ``k % c``-th worker):

- ``W_write``: the writer's place in its stage in waves, ``k / c`` for the
  writer's index ``k`` among its stage's functions: the integer part is its
  wave, the fraction the slot within the wave;
- ``W_read``: the same for the reader that comes last in its stage (the largest
  ``k / c`` over the readers).

``c`` is the run's concurrency (``concurrency``, the run's ``max_concurrency``
hint); unknown (0), it is the widest stage's width (every stage one wave).
Values are rounded to 1/1000 so they survive a CSV round trip unchanged.

Alg. 2 enumerates every path depth-first, which is exponential on wide
graphs; the longest one is all Alg. 1 keeps, so ``_Longest`` memoizes the
longest chain per (function, writer stage) and does the same search in
O(V + E) per stage. Pure: takes the per-function stage and producer sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["NAMES", "Features", "extract_features", "waves"]


#: The features' names, in ``Features.vector`` order.
NAMES = ("F_stage", "T_read", "N_functions", "D_stage", "M_path", "W_write", "W_read")


@dataclass(frozen=True, slots=True)
class Features:
    F_stage: int
    T_read: int
    N_functions: int
    D_stage: int
    M_path: int
    W_write: float = 0.0
    W_read: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return dict(zip(NAMES, self.vector()))

    def vector(self) -> tuple[float, ...]:
        return (self.F_stage, self.T_read, self.N_functions, self.D_stage, self.M_path, self.W_write, self.W_read)


def waves(position: int, concurrency: int) -> float:
    """``position / concurrency`` rounded to 1/1000: wave (integer part) and slot (fraction)."""
    return round(position / max(concurrency, 1), 3)


class _Longest:
    """Longest parent chain from a function back to a given stage (Alg. 2, memoized)."""

    def __init__(self, stage: Mapping[str, int], parents: Mapping[str, frozenset[str]]) -> None:
        self.stage = stage
        self.parents = parents
        self.memo: dict[tuple[str, int], int] = {}

    def __call__(self, fn: str, target: int) -> int:
        """Functions on the longest chain fn <- ... <- (a function in ``target``), fn excluded; 0 if none."""
        key = (fn, target)
        if key in self.memo:
            return self.memo[key]
        # Iterative post-order so deep chains do not hit the recursion limit.
        stack: list[tuple[str, bool]] = [(fn, False)]
        while stack:
            node, expanded = stack.pop()
            if (node, target) in self.memo:
                continue
            pending = [p for p in self.parents[node]
                       if self.stage[p] > target and (p, target) not in self.memo]
            if pending and not expanded:
                stack.append((node, True))
                stack.extend((p, False) for p in pending)
                continue
            best = 0
            for p in self.parents[node]:
                ps = self.stage[p]
                if ps == target:
                    best = max(best, 1)
                elif ps > target:
                    sub = self.memo[(p, target)]
                    if sub:
                        best = max(best, 1 + sub)
            self.memo[(node, target)] = best
        return self.memo[key]


def extract_features(
    *,
    producer: Mapping[str, str | None],
    readers: Mapping[str, tuple[str, ...]],
    stage: Mapping[str, int],
    n_inputs: Mapping[str, int],
    parents: Mapping[str, frozenset[str]],
    position: Mapping[str, int] | None = None,
    concurrency: int = 0,
) -> dict[str, Features]:
    """Features for every object that has a producer and at least one reader.

    ``parents[f]`` is the set of functions whose outputs ``f`` reads (its parent
    pipe nodes' functions); ``n_inputs[f]`` the number of objects ``f`` reads;
    ``position[f]`` its index among its stage's functions (default: all 0) and
    ``concurrency`` the run's (0: unknown, the widest stage's width).
    """
    longest = _Longest(stage, parents)
    pos = position or {}
    if concurrency <= 0:
        widths: dict[int, int] = {}
        for s in stage.values():
            widths[s] = widths.get(s, 0) + 1
        concurrency = max(widths.values(), default=1)
    out: dict[str, Features] = {}
    for obj, writer in producer.items():
        rs = readers.get(obj, ())
        if writer is None or not rs:
            continue
        f_stage = stage[writer]
        n_functions = d_stage = m_path = last = 0
        for r in rs:
            last = max(last, pos.get(r, 0))
            n_functions += n_inputs[r]
            d_stage = max(d_stage, stage[r] - f_stage)
            chain = longest(r, f_stage)
            if chain:
                m_path = max(m_path, chain + 1)
        out[obj] = Features(f_stage, len(rs), n_functions, d_stage, m_path,
                            waves(pos.get(writer, 0), concurrency), waves(last, concurrency))
    return out
