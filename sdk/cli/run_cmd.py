"""``funcsion run WDS``: run a workflow end to end on the local stack.

Uses the stack ``funcsion up`` started when one is alive (``<state_dir>/stack.json``),
else starts an embedded one for this run. Prints the outputs and the run
report (``--json``: the report as one JSON object on the last line); exits 1
naming the failing task and its error when the run fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._common import add_param_option, parse_params, parse_size, stack_endpoints

__all__ = ["add_parser", "run", "format_report"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "run", help="run a workflow end to end on the local stack and print its report",
        description="Run a workflow locally: start (or reuse) the stack, run every task, print outputs and report.")
    p.add_argument("wds", metavar="WDS", help="path of the workflow description; handlers live beside it")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=PATH",
                   help="a workflow input from a file (repeatable); defaults come from inputs.py beside the WDS")
    p.add_argument("--policy", help="release policy: funcstore (default), pocket, oracle, jiffy:<lease_ms>")
    p.add_argument("--json", action="store_true", help="print the run report as one JSON object on the last line")
    p.add_argument("--crash-rate", type=float, default=None, metavar="P",
                   help="crash each task attempt with probability P at a random point (fault injection)")
    p.add_argument("--crash", action="append", default=[], metavar="FUNCTION[:POINT]",
                   help="crash this task's first attempt at POINT (start, after_commit, end)")
    p.add_argument("--kill-rate", type=float, default=None, metavar="P",
                   help="SIGKILL task workers at random with probability P per invocation")
    p.add_argument("--seed", type=int, default=None, help="seed for fault injection")
    p.add_argument("--state-dir", default=None, help="where the stack keeps COS, journal and logs (.funcsion)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    hints = p.add_argument_group("run-start hints (Pocket's register_job hints; all optional)")
    hints.add_argument("--max-concurrency", type=int, default=0, metavar="N",
                       help="most tasks running at once (default: the widest stage of the workflow)")
    hints.add_argument("--capacity", type=parse_size, default=0, metavar="SIZE",
                       help="most bytes the run holds in memory, e.g. 512MiB: reserved up front, "
                            "more spills to COS")
    hints.add_argument("--latency-insensitive", action="store_true",
                       help="keep this run's data in COS only (cheapest; no function memory)")
    add_param_option(p)
    p.set_defaults(run=run, _parser=p)


def _pairs(items: list[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"--input {item!r}: write NAME=PATH, e.g. --input raw_text=book.txt")
        out[name] = path
    return out


def run(args: argparse.Namespace) -> int:
    import wds
    from sdk._client import Client
    from sdk._config import Config
    from sdk.local._executor import ExecutorOptions, parse_crash_specs
    from sdk.local._run import RunHints, run_workflow
    from sdk.local._stack import Stack, read_stack_file

    params = parse_params(args.param, args._parser)
    inputs = _pairs(args.input, args._parser)
    try:
        crash = parse_crash_specs(args.crash)
    except ValueError as exc:
        args._parser.error(str(exc))
    cfg = Config.load(state_dir=args.state_dir, policy=args.policy, crash_rate=args.crash_rate,
                      kill_rate=args.kill_rate)
    wds.load(args.wds, params=params, limits=cfg.wds_limits())  # bad input exits 2 before any stack starts
    opts = ExecutorOptions(max_attempts=cfg.max_attempts, task_memory_mb=cfg.task_memory_mb,
                           task_timeout_s=cfg.task_timeout_s, concurrency=cfg.task_concurrency,
                           crash_rate=cfg.crash_rate, crash=crash, kill_rate=cfg.kill_rate, seed=args.seed,
                           progress=False if (args.no_progress or args.json) else None)
    if args.max_concurrency < 0:
        args._parser.error(f"--max-concurrency {args.max_concurrency}: give a number of tasks >= 1")
    hints = RunHints(args.max_concurrency, args.capacity, not args.latency_insensitive)
    running = read_stack_file(cfg.state_dir)
    if running is not None:
        with Client(stack_endpoints(running)) as client:
            report = run_workflow(args.wds, config=cfg, client=client, inputs=inputs, params=params, options=opts,
                                  hints=hints)
    else:
        with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
            report = run_workflow(args.wds, config=cfg, stack=stack, inputs=inputs, params=params, options=opts,
                                  hints=hints)
    doc = report.to_dict()
    print(format_report(doc))
    if args.json:
        print(json.dumps(doc))
    if report.status != "succeeded":
        print(f"funcsion run: task {report.failed_task} failed: {report.error}", file=sys.stderr)
        return 1
    return 0


def format_report(d: dict[str, Any]) -> str:
    lines = [f"run {d['run_id']} of {d['workflow']}: {d['status']} in {d['wall_s']:.2f} s (policy {d['policy']})"]
    for name, where in d["outputs"].items():
        lines.append(f"  output {name}: {where}")
    for name, where in d.get("persisted", {}).items():
        lines.append(f"  persisted {name}: {where} (kept until deleted)")
    retried = {n: t["attempts"] for n, t in d["tasks"].items() if t["attempts"] > 1}
    lines.append(f"  tasks: {len(d['tasks'])}, retried: "
                 + (", ".join(f"{n} x{a}" for n, a in retried.items()) if retried else "none"))
    objs = d["objects"]
    freed = sum(1 for o in objs.values() if o["state"] == "freed")
    lines.append(f"  objects: {len(objs)}, freed during the run: {freed}")
    m = d["memory"]
    lines.append(f"  memory: peak {m['peak_bytes'] / 2**20:.2f} MiB allocated ({m['peak_live_bytes'] / 2**20:.2f} "
                 f"MiB live), {m['mb_s']:.3f} MB*s allocated, leaked {m['leaked_bytes']} bytes")
    cost = d.get("billing", {}).get("cost_usd")
    if cost is not None:
        lines.append(f"  task Lambda cost at AWS prices: ${cost:.8f}")
    if d["status"] != "succeeded":
        lines.append(f"  failed task: {d['failed_task']}: {d['error']}")
    return "\n".join(lines)
