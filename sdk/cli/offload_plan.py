"""``funcsion offload plan ASL.json``: the read count of every Task state's result.

Reads a Step Functions state machine definition (Amazon States Language, JSON) and
prints, for every Task state, how many Task states will receive its result, which ones,
whether it is kept until the execution ends, and why (the rules: ``sdk.asl_plan``).
``--json`` prints ``{"states": {"<state>": {"read_count": N or null, "readers": [...],
"kept_until_end": true|false, "why": "..."}}}``; ``--picture FILE`` draws the plan
(``.png`` or ``.svg``: matplotlib, the ``plot`` extra; ``.dot``: Graphviz text). A
definition the planner cannot read exits 2 with the JSON path of the problem and the fix.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from sdk import asl_plan

__all__ = ["HELP", "add_arguments", "run", "format_table"]

HELP = "read counts of a Step Functions state machine's Task results (which states read each, and when it is freed)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("asl", metavar="ASL", help="path of the state machine definition (Amazon States Language, JSON)")
    p.add_argument("--json", action="store_true",
                   help='print {"states": {"<state>": {"read_count", "readers", "kept_until_end", "why"}}}')
    p.add_argument("--picture", metavar="FILE",
                   help="also draw the plan: FILE.png or FILE.svg (matplotlib, the `plot` extra) or FILE.dot")


def run(args: argparse.Namespace) -> int:
    if args.picture and not args.picture.lower().endswith(asl_plan.PICTURE_FORMATS):
        raise asl_plan.AslError(args.picture, "cannot draw that kind of file",
                                f"name the picture with one of {', '.join(asl_plan.PICTURE_FORMATS)}")
    plan = asl_plan.load(args.asl)
    if args.picture:
        asl_plan.render(plan, args.picture)
    if args.json:
        json.dump(plan.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(plan))
        if args.picture:
            sys.stdout.write(f"\npicture written to {args.picture}\n")
    return 0


def format_table(plan: asl_plan.Plan, *, why_width: int = 72) -> str:
    """One row per Task state: state, read count, readers, kept until end, why (wrapped)."""
    header = ["state", "reads", "readers", "kept until end", "why"]
    rows = [[name, "-" if p.read_count is None else str(p.read_count), ", ".join(p.readers) or "-",
             "yes" if p.kept_until_end else "no", p.why] for name, p in plan.states.items()]
    if not rows:
        return "no Task states: nothing to offload\n"
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(4)]
    out = []
    for r in [header, *rows]:
        lead = "  ".join(r[k].ljust(widths[k]) for k in range(4))
        lines = textwrap.wrap(r[4], why_width) or [""]
        out.append(f"{lead}  {lines[0]}".rstrip())
        out += [" " * (len(lead) + 2) + more for more in lines[1:]]
    return "\n".join(out) + "\n"
