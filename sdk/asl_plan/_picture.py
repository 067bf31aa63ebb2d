"""Pictures of a plan: DOT text, and PNG or SVG drawn with matplotlib (as ``hdag`` draws an HDAG).

The state machine reads left to right: each state sits in the column of its longest
distance from ``StartAt`` along ``Next``, ``Choice`` and ``Catch`` transitions (a
Parallel's or Map's inner states follow it, and the states after it follow them; loops
are cut where they turn back). Task states are boxes labelled with their read count;
the other states are small grey dots. Thin grey lines are the transitions (dotted: a
``Catch``); coloured
arcs go from a Task to each Task that receives its result, blue where the count is
static and freed at the last read, orange and dashed where it is kept until the
execution ends.

Not here: the plan itself (``_plan``). matplotlib is imported only by ``figure`` and
``render`` (the ``plot`` extra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._definition import Definition, Machine, State
from ._plan import Plan
from .exceptions import AslError

__all__ = ["columns", "figure", "render", "to_dot", "FORMATS"]

#: What ``render`` writes, by the file's suffix.
FORMATS = (".png", ".svg", ".dot")
_STATIC, _KEPT, _FLOW = "#4c72b0", "#dd8452", "#b0b0b0"


def _exits(d: Definition, m: Machine) -> list[str]:
    """The states where machine ``m`` can end."""
    return [s.name for s in m.states.values() if s.end or s.type in ("Succeed", "Fail")]


def _edges(d: Definition, *, catches: bool = False) -> list[tuple[str, str]]:
    """Control flow between states (into and out of Parallel branches and Map processors);
    ``catches``: only the transitions of ``Catch`` (to a catcher's ``Next``)."""
    out: list[tuple[str, str]] = []
    for st in d.states():
        caught = [c.next for c in st.catchers]
        if catches:
            out += [(st.name, t) for t in caught]
            continue
        targets = ([st.next] if st.next else []) + [t for t, _ in st.choices] + caught
        inner = [d.machines[b] for b in st.branches] + ([d.machines[st.processor]] if st.processor is not None else [])
        if inner:
            for m in inner:
                out.append((st.name, m.start))
                out += [(e, t) for e in _exits(d, m) for t in targets if t not in caught]
            out += [(st.name, t) for t in caught]
        else:
            out += [(st.name, t) for t in targets]
    return out


def columns(d: Definition) -> dict[str, int]:
    """Each state's column: its longest distance from the top ``StartAt``, loops cut."""
    succ: dict[str, list[str]] = {}
    for a, b in _edges(d):
        succ.setdefault(a, []).append(b)
    order: list[str] = []  # reverse postorder of a DFS: a topological order once back edges are cut
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    stack: list[tuple[str, int]] = [(d.top.start, 0)]
    while stack:
        node, i = stack.pop()
        if i == 0:
            state[node] = 1
        kids = succ.get(node, [])
        if i < len(kids):
            stack.append((node, i + 1))
            k = kids[i]
            if state.get(k) == 1:
                back.add((node, k))
            elif k not in state:
                stack.append((k, 0))
        else:
            state[node] = 2
            order.append(node)
    col = {n: 0 for n in order}
    for n in reversed(order):
        for k in succ.get(n, []):
            if (n, k) not in back:
                col[k] = max(col[k], col[n] + 1)
    return col


def _label(p: Plan, st: State) -> str:
    sp = p.states.get(st.name)
    if sp is None:
        return st.name
    count = "?" if sp.read_count is None else str(sp.read_count)
    return f"{st.name}\nreads: {count}" + (", kept to end" if sp.kept_until_end else "")


def to_dot(p: Plan) -> str:
    """The plan as Graphviz DOT text."""
    q = json.dumps
    lines = ["digraph plan {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for st in p.definition.states():
        if st.type == "Task":
            lines.append(f"  {q(st.name)} [shape=box, style=filled, fillcolor=\"#dbe9f6\", label={q(_label(p, st))}];")
        else:
            lines.append(f"  {q(st.name)} [shape=ellipse, color=\"#999999\", fontcolor=\"#666666\", "
                         f"label={q(st.name + ' (' + st.type + ')')}];")
    caught = set(_edges(p.definition, catches=True))
    for a, b in _edges(p.definition):
        style = ", style=dotted, label=\"Catch\", fontsize=8" if (a, b) in caught else ""
        lines.append(f"  {q(a)} -> {q(b)} [color={q(_FLOW)}{style}];")
    for name, sp in p.states.items():
        colour, style = (_KEPT, "dashed") if sp.kept_until_end else (_STATIC, "solid")
        for r in sp.readers:
            lines.append(f"  {q(name)} -> {q(r)} [color={q(colour)}, style={style}, constraint=false, "
                         f"label=\"reads\", fontsize=8];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def figure(p: Plan) -> Any:
    """The matplotlib Figure ``render`` saves (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    d = p.definition
    col = columns(d)
    rows: dict[int, list[str]] = {}
    for st in d.states():
        rows.setdefault(col.get(st.name, 0), []).append(st.name)
    tallest = max(len(v) for v in rows.values())
    width = max(6.0, 1.0 + 1.9 * (max(rows) + 1))
    height = 1.4 + 0.75 * tallest
    pos = {n: (0.8 + 1.9 * c, 1.0 + 0.75 * (j + (tallest - len(names)) / 2))
           for c, names in rows.items() for j, n in enumerate(names)}
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    ax.text(0.3, 0.3, f"Read counts of {len(p.states)} Task states; execution flows left to right",
            fontsize=10, va="center")
    caught = set(_edges(d, catches=True))
    for a, b in _edges(d):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=7, color=_FLOW, lw=0.8,
                                     shrinkA=9, shrinkB=9, zorder=1, linestyle=":" if (a, b) in caught else "-",
                                     connectionstyle="arc3,rad=0" if x1 > x0 else "arc3,rad=-0.4"))
    for name, sp in p.states.items():
        colour, style = (_KEPT, (0, (4, 2))) if sp.kept_until_end else (_STATIC, "-")
        for r in sp.readers:
            (x0, y0), (x1, y1) = pos[name], pos[r]
            ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=9, color=colour,
                                         lw=1.6, linestyle=style, shrinkA=12, shrinkB=12, zorder=2,
                                         connectionstyle="arc3,rad=0.35"))
    box = {"boxstyle": "round,pad=0.25", "fc": "#dbe9f6", "ec": "#3182bd", "lw": 0.8}
    for st in d.states():
        x, y = pos[st.name]
        if st.type == "Task":
            ax.text(x, y, _label(p, st), ha="center", va="center", fontsize=7.5, bbox=box, zorder=4)
        else:
            ax.plot([x], [y], marker="o", ms=6, mfc="#cccccc", mec="white", zorder=3)
            ax.text(x, y + 0.13, f"{st.name} ({st.type})", ha="center", va="top", fontsize=6.5, color="#666666",
                    zorder=4)
    handles = [Line2D([], [], color=_STATIC, lw=2, label="receives its result: freed at the last read"),
               Line2D([], [], color=_KEPT, lw=2, ls=(0, (4, 2)), label="receives it: kept until the execution ends"),
               Line2D([], [], color=_FLOW, lw=1, label="transition"),
               Line2D([], [], color=_FLOW, lw=1, ls=":", label="Catch")]
    ax.legend(handles=handles, loc="lower left", ncol=4, fontsize=7, frameon=False)
    return fig


def render(p: Plan, path: str | Path) -> Path:
    """Draw ``p`` to ``path``: PNG or SVG (matplotlib), or DOT text, by its suffix."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix == ".dot":
        out.write_text(to_dot(p), encoding="utf-8")
        return out
    if suffix not in FORMATS:
        raise AslError(str(path), f"cannot draw a {suffix or 'suffix-less'} file",
                       f"name the picture with one of {', '.join(FORMATS)}")
    import matplotlib.pyplot as plt

    fig = figure(p)
    try:
        fig.savefig(out, dpi=130)
    finally:
        plt.close(fig)
    return out
