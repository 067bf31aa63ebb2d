"""``funcsion offload run ASL.json``: run a state machine whose handlers use ``@sdk.offload``
locally, once, on the embedded stack under moto's Step Functions interpreter.

The Lambda ``<prefix>-<name>`` of each Task runs ``<name>`` (``-`` read as ``_``) of
``handlers.py`` next to the definition (``--handlers`` names another file). The
execution's input is ``--input`` (JSON text, or ``@file``). When the execution ends, the
cleanup handler gets the status-change event AWS's EventBridge would send, and the run's
report is saved (``funcsion runs``, ``funcsion report RUN``). Prints one line per offloaded
object (who wrote it, its bytes, when and by whom it was freed); ``--json`` prints the
report. Exits 1 when the execution did not succeed, or left bytes behind after cleanup.
Not here: the AWS path (``funcsion deploy``) and the plan alone (``funcsion offload plan``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["HELP", "add_arguments", "run", "format_objects"]

HELP = "run a state machine with @sdk.offload handlers locally (embedded stack, moto's Step Functions)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("asl", metavar="ASL", help="path of the state machine definition (Amazon States Language, JSON)")
    p.add_argument("--handlers", metavar="FILE", default=None,
                   help="the handlers' module (default: handlers.py next to ASL)")
    p.add_argument("--input", default="{}", metavar="JSON", help="the execution's input: JSON text or @FILE")
    p.add_argument("--threshold", type=int, default=None, metavar="BYTES",
                   help="offload values larger than this (default: config offload_threshold_bytes, 64 KiB)")
    p.add_argument("--state-dir", default=None, help="where the stack keeps its state and the run's report")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="stop the execution after S seconds")
    p.add_argument("--json", action="store_true", help="print the run's report as JSON")


def _input(text: str) -> dict[str, Any]:
    from sdk.exceptions import ConfigError

    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"--input is not JSON ({exc}); write e.g. --input '{{\"size_mb\": 5}}'") from None
    if not isinstance(doc, dict):
        raise ConfigError("--input must be a JSON object (the execution's input)")
    return doc


def run(args: argparse.Namespace) -> int:
    from sdk import asl_plan
    from sdk._config import Config
    from sdk.deploy.offload_local import run_local
    from sdk.local._stack import Stack

    import logging

    # moto's interpreter logs a failing execution's internals at ERROR; the summary below says it
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    asl = Path(args.asl)
    asl_plan.load(asl)  # a definition the planner cannot read fails here, with its JSON path
    handlers = Path(args.handlers) if args.handlers else asl.parent / "handlers.py"
    if not handlers.is_file():
        raise asl_plan.AslError(str(handlers), "no such handlers file",
                                "pass --handlers FILE (a module defining one function per Lambda)")
    cfg = Config.load(state_dir=args.state_dir) if args.state_dir else Config.load()
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        out = run_local(asl, stack, code_dir=handlers.parent, module=handlers.stem,
                        execution_input_doc=_input(args.input), timeout_s=args.timeout,
                        threshold_bytes=args.threshold)
    left = out.report["memory"]["left_after_cleanup"]
    if args.json:
        json.dump(out.report, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(f"execution {out.run_id}: {out.status}\n")
        sys.stdout.write(format_objects(out.report))
        sys.stdout.write(f"after cleanup: {left['live_bytes']} live bytes, {left['allocated_bytes']} allocated; "
                         f"report saved to {out.saved_to}\n")
    return 0 if out.status == "SUCCEEDED" and not left["live_bytes"] and not left["allocated_bytes"] else 1


def format_objects(report: dict[str, Any]) -> str:
    """One line per offloaded object (commit markers left out)."""
    rows = [("object", "state", "bytes", "freed at s", "freed by")]
    for name, o in report["objects"].items():
        if o.get("marker"):
            continue
        rows.append((name, o["state"], f"{o['bytes']:,}",
                     f"{o['freed_at']:.3f}" if o.get("freed_at") is not None else "end", o["freed_by"]))
    if len(rows) == 1:
        return "nothing was offloaded\n"
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    return "".join("  ".join(r[k].ljust(widths[k]) for k in range(4)) + "  " + r[4] + "\n" for r in rows)
