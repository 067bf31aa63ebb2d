"""``funcsion report RUN [--png FILE] [--json]``: a saved run report
(``<state_dir>/runs/<run_id>.json``; RUN may also be ``last`` or a report
file): the summary ``funcsion run`` printed, a line per stage, what failed
with its traceback and log, and with ``--png`` a picture of memory over time
and the task timeline per stage (``sdk.local._report_plot``; the ``plot``
extra)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._summary import failure_details, format_report, stage_table

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "report", help="show a saved run report; --png draws memory over time and the task timeline",
        description="Show the saved report of a run (see `funcsion runs`).")
    p.add_argument("run_id", metavar="RUN", help="a run id (r-3), 'last', or the path of a report file")
    p.add_argument("--png", metavar="FILE", help="draw memory over time and the task timeline per stage "
                                                 "(needs the plot extra)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--state-dir", default=None, help="the state directory the run used (.funcsion)")
    p.set_defaults(run=run, _parser=p)


def _stage_groups(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    groups: dict[int, tuple[str, list[str]]] = {}
    for name, t in doc.get("tasks", {}).items():
        sid = int(t.get("stage", 0))
        groups.setdefault(sid, (str(t.get("stage_name", f"stage {sid}")), []))[1].append(name)
    return [groups[k] for k in sorted(groups)]


def _offload_cost(cost: dict[str, Any]) -> list[str]:
    lines = cost.get("lines") or {}
    if not lines:
        return []
    cos = lines.get("cos_requests") or {}
    return [f"  cost: ${cost.get('total_usd', 0):.6f} (task Lambdas ${lines['tasks']['usd']:.6f}, storage "
            f"functions ${lines['storage_io']['usd']:.6f} in {lines['storage_io']['invocations']} invocations, "
            f"COS {cos.get('puts', 0)} PUTs / {cos.get('gets', 0)} GETs ${cos.get('usd', 0):.6f})"]


def format_offload_report(doc: dict[str, Any]) -> str:
    """An execution's report: its status, what was offloaded and what the cleanup ended."""
    from .offload_run import format_objects

    off, mem = doc.get("offload") or {}, doc.get("memory") or {}
    left = mem.get("left_after_cleanup") or {}
    lines = [f"execution {doc['run_id']} of {doc.get('workflow')}: {doc.get('status')} in {doc.get('wall_s')} s",
             f"  offloaded: {off.get('objects', 0)} object(s), {off.get('bytes', 0):,} bytes; "
             f"{len(off.get('freed_by_readers') or [])} freed at their last reader's commit, "
             f"{len(off.get('kept_until_end') or [])} kept until the end",
             f"  memory: {mem.get('mb_s') or 0:.3f} MB*s allocated, peak {mem.get('peak_bytes') or 0:,} bytes; "
             f"after cleanup {left.get('live_bytes')} live, {left.get('allocated_bytes')} allocated bytes",
             *_offload_cost(doc.get("cost") or {}), "",
             format_objects(doc).rstrip()]
    kept = [(n, o) for n, o in (doc.get("objects") or {}).items() if o.get("kept_until_end") and not o.get("marker")]
    if kept:
        lines += ["", "  kept until the end:"] + [f"    {n}: {o['why']}" for n, o in kept]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._report_store import load_report

    cfg = Config.load(state_dir=args.state_dir)
    doc = load_report(cfg.state_dir, args.run_id)
    doc.pop("_path", None)
    if args.png:
        from sdk.local._report_plot import render_report_png

        render_report_png(doc, args.png)
    if args.json:
        print(json.dumps(doc))
        return 0
    if doc.get("kind") == "offload":   # an execution of a state machine (funcsion offload run)
        print(format_offload_report(doc))
        return 0
    lines = [format_report(doc), "", *stage_table(doc, _stage_groups(doc))]
    details = failure_details(doc)
    if details:
        lines += ["", *details]
    if args.png:
        lines += ["", f"  picture: {args.png}"]
    print("\n".join(lines))
    return 0
