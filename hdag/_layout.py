"""Where each node of an HDAG picture goes: pure geometry, no matplotlib.

The picture reads left to right. Column 0 holds the workflow's inputs; then
each stage has two columns, its functions and the pipes they write (a pipe is
the set of objects one function writes, drawn on its producer's row so the
write is a short horizontal edge). Functions keep their workflow order, so
replicas appear in index order. A templated entry with more than
``collapse_above`` replicas becomes one node (``mapper ×64``) and their pipes
one pipe node; edges between two nodes merge, counting the (object, reader)
flows they stand for. Each edge carries the transfer pattern of its objects
(FuncStore Fig. 3), which picks its colour.

Not here: drawing (``_render``), or the DOT text.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from ._graph import HDAG

__all__ = ["Layout", "LayoutNode", "LayoutEdge", "Column", "layout", "name_range", "pattern_key", "PATTERNS"]

#: pattern key -> (legend text, colour); keys are ``"+".join(ObjectInfo.pattern)``
PATTERNS: dict[str, tuple[str, str]] = {
    "pass": ("pass: one reader", "#4c72b0"),
    "broadcast": ("broadcast: one object, several readers", "#dd8452"),
    "scatter": ("scatter: one reader per object", "#55a868"),
    "aggregate": ("aggregate: a reader gathers several producers", "#c44e52"),
    "scatter+aggregate": ("scatter + aggregate (shuffle)", "#8172b3"),
    "pass+aggregate": ("pass + aggregate: into a gatherer", "#da8bc3"),
    "broadcast+aggregate": ("broadcast + aggregate", "#937860"),
    "output": ("output: no reader (kept)", "#8c8c8c"),
}
_OTHER = "#333333"


def pattern_key(pattern: tuple[str, ...]) -> str:
    return "+".join(pattern)


@dataclass(frozen=True, slots=True)
class LayoutNode:
    id: str
    kind: Literal["function", "pipe"]
    label: str
    column: int
    row: float
    members: int = 1  # functions a function node stands for (>1: a collapsed fan-out)
    pattern: str = ""  # pipes: the pattern key of most of their objects

    @property
    def colour(self) -> str:
        return PATTERNS.get(self.pattern, ("", _OTHER))[1]


@dataclass(frozen=True, slots=True)
class LayoutEdge:
    src: str
    dst: str
    kind: Literal["writes", "reads"]
    pattern: str = ""
    flows: int = 1  # (object, reader) pairs this edge stands for
    lane: float = 0.0  # offset among the edges of one (src, dst) pair, -0.5..0.5

    @property
    def colour(self) -> str:
        return PATTERNS.get(self.pattern, ("", _OTHER))[1] if self.kind == "reads" else "#555555"


@dataclass(frozen=True, slots=True)
class Column:
    index: int
    kind: Literal["inputs", "functions", "pipes"]
    stage_id: int | None = None
    stage_name: str = ""


@dataclass
class Layout:
    columns: list[Column]
    nodes: dict[str, LayoutNode]
    edges: list[LayoutEdge]
    rows: int  # rows of the tallest column
    patterns: list[str] = field(default_factory=list)  # keys in use, in legend order

    def column_nodes(self, index: int) -> list[LayoutNode]:
        return sorted((n for n in self.nodes.values() if n.column == index), key=lambda n: n.row)


def name_range(names: list[str], *, kinds: int = 3) -> str:
    """A short label for many object names: names that differ only in numbers become one
    range, ``counts_[00-63]_[00-05]`` (inclusive); up to ``kinds`` such groups are listed,
    in order (``headers, src_[00-07], runtime_src``), then ``...``."""
    groups: dict[tuple[str, ...], list[list[str]]] = {}
    for n in names:
        parts = re.split(r"(\d+)", n)
        groups.setdefault(tuple(parts[0::2]), []).append(parts)
    out = []
    for members in groups.values():
        text = []
        for k, piece in enumerate(members[0]):
            if k % 2 == 0:
                text.append(piece)
                continue
            values = sorted({p[k] for p in members}, key=lambda v: (int(v), v))
            text.append(values[0] if len(values) == 1 else f"[{values[0]}-{values[-1]}]")
        out.append("".join(text))
    return ", ".join(out[:kinds]) + (", ..." if len(out) > kinds else "")


def _base(template: str) -> str:
    """``mapper_{i:02d}`` -> ``mapper``."""
    return re.sub(r"\{[^{}]*\}", "", template).strip("_-. ") or template


def _pipe_label(h: HDAG, objects: list[str]) -> str:
    label = name_range(objects)
    if len(objects) > 1:
        label += f" ×{len(objects)}"
    counts = sorted({h.objects[o].read_count for o in objects})
    if counts == [0]:
        return label + ", output"
    reads = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    each = " each" if len(objects) > 1 else ""
    return label + f", {reads} read{'s' if counts[-1] != 1 else ''}{each}"


def layout(h: HDAG, *, collapse_above: int = 16) -> Layout:
    """Place the nodes of ``h`` (see the module docstring)."""
    group_size = Counter(f.template for f in h.functions.values() if f.template is not None)
    display: dict[str, str] = {}  # function name -> its node id
    members: dict[str, list[str]] = {}  # node id -> functions, in workflow order
    for _, _, fns in h.stages():
        for name in fns:
            t = h.functions[name].template
            nid = f"g:{t}" if t is not None and group_size[t] > collapse_above else f"f:{name}"
            display[name] = nid
            members.setdefault(nid, []).append(name)

    columns = [Column(0, "inputs")]
    nodes: dict[str, LayoutNode] = {}
    stage_rows: list[list[str]] = []
    for k, (sid, sname, fns) in enumerate(h.stages()):
        columns += [Column(2 * k + 1, "functions", sid, sname), Column(2 * k + 2, "pipes", sid, sname)]
        stage_rows.append(list(dict.fromkeys(display[f] for f in fns)))
    tallest = max([len(r) for r in stage_rows] + [1])

    pipe_of: dict[str | None, str] = {}  # producer function (None: inputs) -> pipe node id
    for k, ids in enumerate(stage_rows):
        top = (tallest - len(ids)) / 2
        for j, nid in enumerate(ids):
            fns = members[nid]
            label = f"{_base(h.functions[fns[0]].template or fns[0])} ×{len(fns)}" if nid.startswith("g:") else fns[0]
            nodes[nid] = LayoutNode(nid, "function", label, 2 * k + 1, top + j, members=len(fns))
            objects = [o for f in fns for o in h.functions[f].outputs]
            if objects:
                pid = "p:" + nid
                key = Counter(pattern_key(h.objects[o].pattern) for o in objects).most_common(1)[0][0]
                nodes[pid] = LayoutNode(pid, "pipe", _pipe_label(h, objects), 2 * k + 2, top + j, pattern=key)
                for f in fns:
                    pipe_of[f] = pid

    if h.inputs:
        readers = {display[r] for o in h.inputs for r in h.objects[o].readers}
        rows = [nodes[r].row for r in readers] or [(tallest - 1) / 2]
        key = Counter(pattern_key(h.objects[o].pattern) for o in h.inputs).most_common(1)[0][0]
        nodes["p:$inputs"] = LayoutNode("p:$inputs", "pipe", _pipe_label(h, list(h.inputs)), 0,
                                        (min(rows) + max(rows)) / 2, pattern=key)
        pipe_of[None] = "p:$inputs"

    flows: Counter[tuple[str, str, str]] = Counter()
    for info in h.objects.values():
        for r in info.readers:
            flows[(pipe_of[info.producer], display[r], pattern_key(info.pattern))] += 1
    edges = [LayoutEdge(nid, "p:" + nid, "writes") for nid in members if "p:" + nid in nodes]
    by_pair: dict[tuple[str, str], list[str]] = {}
    for (src, dst, key) in flows:
        by_pair.setdefault((src, dst), []).append(key)
    for (src, dst), keys in by_pair.items():
        keys.sort(key=lambda k: list(PATTERNS).index(k) if k in PATTERNS else len(PATTERNS))
        for i, key in enumerate(keys):
            lane = 0.0 if len(keys) == 1 else i / (len(keys) - 1) - 0.5
            edges.append(LayoutEdge(src, dst, "reads", key, flows[(src, dst, key)], lane))
    used = {e.pattern for e in edges if e.kind == "reads"} | {n.pattern for n in nodes.values() if n.kind == "pipe"}
    order = [k for k in PATTERNS if k in used] + sorted(used - set(PATTERNS))
    return Layout(columns, nodes, edges, tallest, order)
