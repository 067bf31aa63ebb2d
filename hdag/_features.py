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

Alg. 2 enumerates every path depth-first, which is exponential on wide
graphs; the longest one is all Alg. 1 keeps, so ``_Longest`` memoizes the
longest chain per (function, writer stage) and does the same search in
O(V + E) per stage. Pure: takes the per-function stage and producer sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Features", "extract_features"]


@dataclass(frozen=True, slots=True)
class Features:
    F_stage: int
    T_read: int
    N_functions: int
    D_stage: int
    M_path: int

    def to_dict(self) -> dict[str, int]:
        return {"F_stage": self.F_stage, "T_read": self.T_read, "N_functions": self.N_functions,
                "D_stage": self.D_stage, "M_path": self.M_path}

    def vector(self) -> tuple[int, int, int, int, int]:
        return (self.F_stage, self.T_read, self.N_functions, self.D_stage, self.M_path)


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
) -> dict[str, Features]:
    """Features for every object that has a producer and at least one reader.

    ``parents[f]`` is the set of functions whose outputs ``f`` reads (its parent
    pipe nodes' functions); ``n_inputs[f]`` the number of objects ``f`` reads.
    """
    longest = _Longest(stage, parents)
    out: dict[str, Features] = {}
    for obj, writer in producer.items():
        rs = readers.get(obj, ())
        if writer is None or not rs:
            continue
        f_stage = stage[writer]
        n_functions = d_stage = m_path = 0
        for r in rs:
            n_functions += n_inputs[r]
            d_stage = max(d_stage, stage[r] - f_stage)
            chain = longest(r, f_stage)
            if chain:
                m_path = max(m_path, chain + 1)
        out[obj] = Features(f_stage, len(rs), n_functions, d_stage, m_path)
    return out
