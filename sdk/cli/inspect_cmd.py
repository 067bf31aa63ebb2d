"""``funcsion inspect WDS``: validate a workflow and show its HDAG.

Prints stages, functions, objects with read counts, transfer patterns and
lifetime features; ``--json`` prints the document of ``HDAG.to_dict`` (docs/workflow.md,
"Inspecting a workflow"); ``--png`` (matplotlib: the ``plot`` extra) and ``--dot`` write
pictures.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import wds

from ._common import add_param_option, parse_params

if TYPE_CHECKING:
    import hdag

__all__ = ["add_parser", "run", "format_text"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "inspect", help="validate a WDS file and print its HDAG, read counts and lifetime features",
        description="Validate a workflow description and print its HDAG. Exit code 2 lists every error "
                    "(limits on size and expansion: the wds_max_* config fields).",
    )
    p.add_argument("wds", metavar="WDS", help="path of the workflow description (JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON document (see docs/workflow.md)")
    p.add_argument("--png", metavar="FILE", help="also draw the HDAG to this PNG file")
    p.add_argument("--dot", metavar="FILE", help="also write the HDAG as Graphviz DOT text")
    p.add_argument("--collapse-above", type=int, default=16, metavar="N",
                   help="in --png, draw a fan-out of more than N replicas as one node (default 16)")
    add_param_option(p)
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    import hdag  # networkx: the `local` extra, not needed for --help
    from sdk._config import Config

    params = parse_params(args.param, args._parser)
    workflow = wds.load(args.wds, params=params, limits=Config.load().wds_limits())
    graph = hdag.build(workflow)
    if args.png:
        hdag.render_png(graph, args.png, collapse_above=args.collapse_above)
    if args.dot:
        with open(args.dot, "w", encoding="utf-8") as fh:
            fh.write(hdag.to_dot(graph))
    if args.json:
        json.dump(graph.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(graph))
        for extra, path in (("PNG", args.png), ("DOT", args.dot)):
            if path:
                sys.stdout.write(f"\n{extra} written to {path}\n")
    return 0


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return ["  " + fmt.format(*header).rstrip()] + ["  " + fmt.format(*map(str, r)).rstrip() for r in rows]


def _names(items: tuple[str, ...] | list[str], limit: int = 4) -> str:
    if not items:
        return "-"
    shown = ", ".join(items[:limit])
    return shown + (f", +{len(items) - limit}" if len(items) > limit else "")


def format_text(h: hdag.HDAG) -> str:
    from hdag import NAMES

    wf = h.workflow
    out = [f"{wf.app} (workflow {wf.workflow_id}, category {wf.category}) from {wf.source}"]
    if wf.params:
        out.append("params: " + " ".join(f"{k}={v}" for k, v in wf.params.items()))
    out.append(f"{len(h.functions)} functions, {len(h.objects)} objects "
               f"({len(h.inputs)} inputs, {len(h.intermediates)} intermediate, {len(h.outputs)} outputs)")
    out.append("\nStages")
    out += _table([[str(sid), name, str(len(fs)), _names(fs, 6)] for sid, name, fs in h.stages()],
                  ["id", "stage", "n", "functions"])
    out.append("\nFunctions")
    out += _table([[f.name, str(f.stage), "yes" if f.start else "", _names(f.inputs), _names(f.outputs),
                    f.last_output or "- (commits explicitly)"] for f in h.functions.values()],
                  ["function", "stage", "start", "inputs", "outputs", "last output"])
    out.append("\nObjects")
    rows = []
    for o in h.objects.values():
        feats = o.features.vector() if o.features else None
        kind = "input" if o.is_input else "output" if o.is_output else "intermediate"
        rows.append([o.name, kind, o.producer or "(client)", _names(o.readers, 3), str(o.read_count),
                     "+".join(o.pattern)] + ([f"{v:g}" for v in feats] if feats else ["-"] * len(NAMES)))
    out += _table(rows, ["object", "kind", "producer", "readers", "reads", "pattern", *NAMES])
    if wf.warnings:
        out.append(f"\nWarnings ({len(wf.warnings)})")
        out += [f"  - {w}" for w in wf.warnings[:10]]
        if len(wf.warnings) > 10:
            out.append(f"  ... and {len(wf.warnings) - 10} more (see --json)")
    return "\n".join(out) + "\n"
