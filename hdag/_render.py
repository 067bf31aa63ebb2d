"""Pictures of an HDAG: DOT text (for Graphviz) and a PNG drawn with matplotlib.

Function nodes are boxes, pipe nodes ellipses holding one SendBox line per
object with its read count; edges run function -> pipe -> reading function.
The PNG needs no Graphviz binary: stages become columns (functions, then the
pipes they write), laid out with networkx's multipartite layout.
"""

from __future__ import annotations

import json
from pathlib import Path

from ._graph import HDAG

__all__ = ["to_dot", "render_png"]


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


def render_png(h: HDAG, path: str | Path, *, max_labels: int = 400) -> Path:
    """Draw the HDAG to ``path`` (PNG). Labels are dropped past ``max_labels`` nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = nx.DiGraph()
    order = {sid: k for k, (sid, _, _) in enumerate(h.stages())}
    for f in h.functions.values():
        g.add_node(("f", f.name), layer=2 * order[f.stage] + 1)
    for p, pipe in h.pipes.items():
        layer = 0 if p is None else 2 * order[h.functions[p].stage] + 2
        g.add_node(("p", p), layer=layer)
        if p is not None:
            g.add_edge(("f", p), ("p", p))
        for r in pipe.readers:
            g.add_edge(("p", p), ("f", r))
    pos = nx.multipartite_layout(g, subset_key="layer")
    n_layers = max(d["layer"] for _, d in g.nodes(data=True)) + 1
    tallest = max(sum(1 for _, d in g.nodes(data=True) if d["layer"] == k) for k in range(n_layers))
    fig, ax = plt.subplots(figsize=(max(8.0, 2.4 * n_layers), max(5.0, min(60.0, 0.55 * tallest + 2))))
    fns = [n for n in g if n[0] == "f"]
    pipes = [n for n in g if n[0] == "p"]
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowsize=8, edge_color="#888888", width=0.8)
    nx.draw_networkx_nodes(g, pos, nodelist=fns, node_shape="s", node_color="#9ecae1", node_size=500, ax=ax)
    nx.draw_networkx_nodes(g, pos, nodelist=pipes, node_shape="o", node_color="#fdd0a2", node_size=350, ax=ax)
    if len(g) <= max_labels:
        labels = {n: n[1] for n in fns}
        for n in pipes:
            objs = h.pipes[n[1]].objects
            shown = [f"{o} x{h.objects[o].read_count}" for o in objs[:4]]
            if len(objs) > 4:
                shown.append(f"+{len(objs) - 4} more")
            labels[n] = "\n".join(shown)
        nx.draw_networkx_labels(g, pos, labels=labels, font_size=7, ax=ax)
    ax.set_title(f"HDAG of {h.key}: boxes are functions, circles are pipes (object x read count)")
    ax.axis("off")
    out = Path(path)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out
