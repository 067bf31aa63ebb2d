"""Pictures of an HDAG: DOT text (for Graphviz) and a PNG drawn with matplotlib.

DOT: function nodes are boxes, pipe nodes records holding one SendBox line
per object with its read count; edges run function -> pipe -> reading function.

PNG (no Graphviz needed; matplotlib is imported here only, when drawing):
``_layout`` places the nodes, stages as labelled columns, replicas in order,
large fan-outs collapsed into one node. Here each label goes beside its node
in the gap between a function and its pipe (the function's name above the
write edge, the pipe's objects below it), so labels never sit on nodes or
each other; read edges are coloured by transfer pattern, with a legend.
Geometry is in inches, so the picture grows with the workflow instead of
squeezing it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ._graph import HDAG
from ._layout import PATTERNS, Layout, layout

__all__ = ["to_dot", "render_png", "figure"]


def _q(text: str) -> str:
    return json.dumps(text)


def _pipe_id(p: str | None) -> str:
    return "pipe:$inputs" if p is None else f"pipe:{p}"


def to_dot(h: HDAG) -> str:
    lines = [f"digraph {_q(h.key)} {{", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for sid, name, fns in h.stages():
        lines.append(f"  subgraph {_q('cluster_' + name)} {{")
        lines.append(f"    label={_q(f'{name} (stage {sid})')}; style=dashed;")
        for fn in fns:
            lines.append(f"    {_q('fn:' + fn)} [label={_q(fn)}, shape=box, style=filled, fillcolor=\"#dbe9f6\"];")
        lines.append("  }")
    for p, pipe in h.pipes.items():
        rows = "|".join(f"<{i}> {o} (reads: {h.objects[o].read_count})".replace('"', "'")
                        for i, o in enumerate(pipe.objects))
        label = f"{{{'inputs' if p is None else 'pipe ' + p}|{rows}}}"
        lines.append(f"  {_q(_pipe_id(p))} [shape=record, style=rounded, label={_q(label)}];")
        if p is not None:
            lines.append(f"  {_q('fn:' + p)} -> {_q(_pipe_id(p))};")
        for i, o in enumerate(pipe.objects):
            for r in h.objects[o].readers:
                lines.append(f"  {_q(_pipe_id(p))}:{i} -> {_q('fn:' + r)} [label={_q(o)}, fontsize=8];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# sizes in inches (the axes' data units); text at 8 pt is about 0.065 in per character
_CHAR = 0.066
_ROW = 0.42
_FAN = 1.6  # from a pipe column to the next stage's functions
_HEAD = 1.0
_MARGIN = 0.35


def _text_width(labels: list[str]) -> float:
    return max((len(t) for t in labels), default=0) * _CHAR


def _x_positions(lay: Layout) -> dict[int, float]:
    """The x of each column: the gap after a function column fits its labels."""
    xs: dict[int, float] = {}
    inputs = [n.label for n in lay.column_nodes(0)]
    x = _MARGIN + _text_width(inputs) + 0.2
    xs[0] = x
    for col in lay.columns[1:]:
        if col.kind == "functions":
            x += _FAN if inputs or col.index > 1 else 0.3
        else:
            labels = [n.label for n in lay.column_nodes(col.index)]
            fn_labels = [n.label for n in lay.column_nodes(col.index - 1)]
            x += max(_text_width(labels), _text_width(fn_labels)) + 0.45 if labels else _text_width(fn_labels) + 0.3
        xs[col.index] = x
    return xs


def render_png(h: HDAG, path: str | Path, *, collapse_above: int = 16, dpi: int = 130) -> Path:
    """Draw the HDAG to ``path`` (PNG); a templated entry with more than ``collapse_above``
    replicas is drawn as one node (``mapper ×64``)."""
    import matplotlib.pyplot as plt

    fig = figure(h, collapse_above=collapse_above)
    out = Path(path)
    try:
        fig.savefig(out, dpi=dpi)
    finally:
        plt.close(fig)
    return out


def figure(h: HDAG, *, collapse_above: int = 16) -> Any:
    """The matplotlib Figure ``render_png`` saves (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Rectangle

    lay = layout(h, collapse_above=collapse_above)
    xs = _x_positions(lay)
    collapsed = any(n.members > 1 for n in lay.nodes.values())
    legend_rows = -(-(len(lay.patterns) + 3 + collapsed) // 3)
    rows = max(lay.rows, 3)  # a flat workflow still gets room to breathe
    pad = (rows - lay.rows) / 2
    width = max(7.0, xs[lay.columns[-1].index] + _MARGIN + 0.3)
    height = _HEAD + rows * _ROW + 0.35 + 0.22 * legend_rows

    def y(row: float) -> float:
        return _HEAD + (row + pad + 0.5) * _ROW

    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    bottom = _HEAD + rows * _ROW + 0.1
    box = {"boxstyle": "square,pad=0.08", "fc": "white", "ec": "none", "alpha": 0.7}

    # stages as labelled columns
    stage_cols = [c for c in lay.columns if c.kind == "functions"]
    for k, col in enumerate(stage_cols):
        left = xs[col.index] - 0.3
        right = xs[col.index + 1] + 0.3 if col.index + 1 in xs else xs[col.index] + 1.0
        ax.add_patch(Rectangle((left, _HEAD - 0.42), right - left, bottom - _HEAD + 0.42,
                               facecolor="#eef2f7" if k % 2 == 0 else "#f6f6f2", edgecolor="none", zorder=0))
        n = sum(lay.nodes[i].members for i in lay.nodes if lay.nodes[i].column == col.index)
        ax.text((left + right) / 2, _HEAD - 0.28, col.stage_name, ha="center", va="bottom", fontsize=9,
                fontweight="bold", zorder=4)
        ax.text((left + right) / 2, _HEAD - 0.26, f"stage {col.stage_id} · {n} function{'s' if n != 1 else ''}",
                ha="center", va="top", fontsize=7, color="#555555", zorder=4)
    if lay.column_nodes(0):
        ax.text(xs[0], _HEAD - 0.28, "inputs", ha="center", va="bottom", fontsize=9, fontweight="bold")
    n_fn, n_obj = len(h.functions), len(h.objects)
    params = ", ".join(f"{k}={v}" for k, v in h.workflow.params.items())
    ax.text(_MARGIN, 0.22, f"HDAG of {h.key}" + (f" ({params})" if params else "")
            + f": {n_fn} functions, {n_obj} objects; data flows left to right",
            ha="left", va="center", fontsize=10)

    # edges: writes (function -> its pipe) short and grey, reads coloured by pattern
    many = sum(1 for e in lay.edges if e.kind == "reads") > 40
    for e in lay.edges:
        a, b = lay.nodes[e.src], lay.nodes[e.dst]
        x0, y0, x1, y1 = xs[a.column], y(a.row), xs[b.column], y(b.row)
        if e.kind == "writes":
            ax.plot([x0 + 0.08, x1 - 0.08], [y0, y0], color=e.colour, lw=0.9, zorder=1, solid_capstyle="butt")
            continue
        off = e.lane * 0.1
        lw = min(3.5, 0.8 + 0.45 * math.log2(e.flows))
        skip = b.column - a.column
        rad = 0.0 if skip == 1 else (0.15 if skip > 1 else -0.5)  # past other columns, or back into its stage
        ax.add_patch(FancyArrowPatch((x0 + 0.08, y0 + off), (x1 - 0.08, y1 + off), arrowstyle="-",
                                     connectionstyle=f"arc3,rad={rad}", color=e.colour, lw=lw,
                                     linestyle="-" if skip == 1 else (0, (4, 2)),
                                     alpha=0.55 if many else 0.85, zorder=1, shrinkA=0, shrinkB=0))
        if e.flows > 1:
            tx, ty = (x0 + x1) / 2, (y0 + y1) / 2 + off
            ax.text(tx, ty, f"×{e.flows}", fontsize=6.5, color=e.colour, ha="center", va="center", zorder=5,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85})

    # nodes and their labels
    for node in lay.nodes.values():
        x, yy = xs[node.column], y(node.row)
        if node.kind == "function":
            if node.members > 1:  # a collapsed fan-out: a small stack of boxes
                for d in (0.06, 0.03):
                    ax.plot([x + d], [yy - d], marker="s", ms=9, mfc="#c6dbef", mec="#3182bd", mew=0.8, zorder=3)
            ax.plot([x], [yy], marker="s", ms=9, mfc="#9ecae1", mec="#3182bd", mew=0.8, zorder=3)
            ax.text(x + (0.2 if node.members > 1 else 0.13), yy - 0.05, node.label, ha="left", va="bottom", fontsize=8,
                    zorder=4, fontweight="bold" if node.members > 1 else "normal", bbox=box)
        else:
            ax.plot([x], [yy], marker="o", ms=8, mfc=node.colour, mec="white", mew=0.8, zorder=3)
            if node.column == 0:
                ax.text(x - 0.13, yy, node.label, ha="right", va="center", fontsize=7, color="#333333", zorder=4,
                        bbox=box)
            else:
                ax.text(x - 0.13, yy + 0.05, node.label, ha="right", va="top", fontsize=7, color="#333333", zorder=4,
                        bbox=box)

    handles = [Line2D([], [], ls="", marker="s", ms=7, mfc="#9ecae1", mec="#3182bd", label="function")]
    if collapsed:
        handles.append(Line2D([], [], ls="", marker="s", ms=7, mfc="#c6dbef", mec="#3182bd",
                              label=f"×N: a fan-out of more than {collapse_above} replicas, drawn once"))
    handles.append(Line2D([], [], ls="", marker="o", ms=7, mfc="#bbbbbb", mec="white",
                          label="pipe: the objects a function writes (names, count, reads)"))
    if any(e.kind == "reads" and lay.nodes[e.dst].column - lay.nodes[e.src].column != 1 for e in lay.edges):
        handles.append(Line2D([], [], color="#555555", lw=1.2, ls=(0, (4, 2)),
                              label="dashed: a read that passes over other columns"))
    handles += [Line2D([], [], color=PATTERNS[k][1] if k in PATTERNS else "#333333", lw=2.5,
                label=PATTERNS[k][0] if k in PATTERNS else k) for k in lay.patterns]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(_MARGIN / width, 1 - (bottom + 0.1) / height),
              ncol=3, fontsize=7.5, frameon=False, handlelength=2.2, columnspacing=1.6)
    return fig
