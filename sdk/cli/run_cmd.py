"""``funcsion run WDS``: run a workflow end to end on the local stack.

Uses ``--stack`` when given (a stack.json, or ``metadata=HOST:PORT,daemon=HOST:PORT``
of a split deployment with the tokens from FUNCSION_ADMIN_TOKEN and
FUNCSION_STORE_TOKEN), else the stack ``funcsion up`` started when one is alive
(``<state_dir>/stack.json``), else starts an embedded one for this run (refused
at once when another embedded stack holds the state directory). Bad input (the WDS, ``--input``
files, ``--crash`` names) is checked before any stack starts: exit 2. Once
a run started, every way it stops ends it and prints the report (``--json``:
one JSON object on the last line): exit 0 when it succeeded, 1 when it
failed (naming the task, or the driver's error; for a failed task also the
handler's traceback and the log file with the attempt's request id) or was
aborted. The report is saved as ``<state_dir>/runs/<run_id>.json`` (``funcsion
runs``, ``funcsion report``, ``funcsion get``). SIGINT
(Ctrl-C) or SIGTERM aborts the run: its tasks are stopped, the run is ended
and reported; a second signal exits at once (the run's TTL ends it later).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import run_aws
from ._common import add_param_option, parse_params, parse_size, stack_endpoints, stack_option
from ._summary import failure_details, failure_line, format_report

__all__ = ["add_parser", "run", "format_report"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "run", help="run a workflow end to end on the local stack and print its report",
        description="Run a workflow locally: start (or reuse) the stack, run every task, print outputs and report.")
    p.add_argument("wds", metavar="WDS", nargs="+", help="path of the workflow description; handlers live beside it "
                   "(several: concurrent jobs on one stack, each its own run; see sdk.cli.run_jobs)")
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
    p.add_argument("--kill-storage-rate", type=float, default=None, metavar="P",
                   help="SIGKILL storage-function instances at random with probability P per invocation (an "
                        "embedded stack; their chunks are recovered, see the report's recovery)")
    p.add_argument("--restart-daemon-after", type=float, default=None, metavar="S",
                   help="kill -9 the daemon S seconds into the run and start it again (an embedded stack, whose "
                        "daemon then runs in a child process; see the report's recovery.daemon_restarts)")
    p.add_argument("--seed", type=int, default=None, help="seed for fault injection")
    p.add_argument("--state-dir", default=None, help="where the stack keeps COS, journal and logs (.funcsion)")
    p.add_argument("--stack", metavar="STACK", default=None,
                   help="run on this stack: a stack.json (as `funcsion up` writes) or "
                        "metadata=HOST:PORT,daemon=HOST:PORT[,cos=URL] of `funcsion serve metadata` and "
                        "`funcsion serve daemon --metadata`, with FUNCSION_ADMIN_TOKEN and FUNCSION_STORE_TOKEN set")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    jobs = p.add_argument_group("concurrent jobs (several WDS files)")
    jobs.add_argument("--admit-budget", type=parse_size, default=0, metavar="SIZE",
                      help="admit jobs first come, first served while their expected peaks fit in SIZE of storage "
                           "memory (FuncStore Fig. 11b); the others wait their turn")
    jobs.add_argument("--job-peak", default="", metavar="SIZE[,SIZE...]",
                      help="each job's expected peak of storage memory for --admit-budget: one size for every job "
                           "or one per WDS file, in order")
    hints = p.add_argument_group("run-start hints (Pocket's register_job hints; all optional)")
    hints.add_argument("--max-concurrency", type=int, default=0, metavar="N",
                       help="most tasks running at once (default: the widest stage of the workflow)")
    hints.add_argument("--capacity", type=parse_size, default=0, metavar="SIZE",
                       help="most bytes the run holds in memory, e.g. 512MiB: reserved up front, "
                            "more spills to COS")
    hints.add_argument("--latency-insensitive", action="store_true",
                       help="keep this run's data in COS only (cheapest; no function memory)")
    add_param_option(p)
    run_aws.add_arguments(p)  # --target aws and its options
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
    from sdk._client import Client
    from sdk._config import Config
    from sdk.exceptions import MetadataError, StoreFailure
    from sdk.local._executor import ExecutorOptions, parse_crash_specs
    from sdk.local._run import RunHints, prepare_run, run_workflow
    from sdk.local._stack import Stack, read_stack_file
    from sdk.local._stack_errors import StateDirBusy

    if args.target == "aws":
        return run_aws.run(args)
    if len(args.wds) > 1:
        from sdk.cli.run_jobs import run_many
        return run_many(args)
    if args.admit_budget or args.job_peak:
        args._parser.error("--admit-budget and --job-peak admit concurrent jobs: give several WDS files")
    params = parse_params(args.param, args._parser)
    inputs = _pairs(args.input, args._parser)
    given = None
    if args.stack is not None:
        try:
            given = stack_option(args.stack, os.environ)
        except ValueError as exc:
            args._parser.error(str(exc))
    try:
        crash = parse_crash_specs(args.crash)
    except ValueError as exc:
        args._parser.error(str(exc))
    cfg = Config.load(state_dir=args.state_dir, policy=args.policy, crash_rate=args.crash_rate,
                      kill_rate=args.kill_rate, kill_storage_rate=args.kill_storage_rate,
                      restart_daemon_after_s=args.restart_daemon_after)
    if cfg.restart_daemon_after_s and cfg.kill_storage_rate:
        args._parser.error("--restart-daemon-after and --kill-storage-rate cannot be combined yet: run them "
                           "one at a time (the storage chaos drives an in-process daemon)")
    opts = ExecutorOptions(max_attempts=cfg.max_attempts, task_memory_mb=cfg.task_memory_mb,
                           task_timeout_s=cfg.task_timeout_s, concurrency=cfg.task_concurrency,
                           crash_rate=cfg.crash_rate, crash=crash, kill_rate=cfg.kill_rate, seed=args.seed,
                           progress=False if (args.no_progress or args.json) else None)
    if args.max_concurrency < 0:
        args._parser.error(f"--max-concurrency {args.max_concurrency}: give a number of tasks >= 1")
    hints = RunHints(args.max_concurrency, args.capacity, not args.latency_insensitive)
    prep = prepare_run(args.wds[0], inputs=inputs, params=params, options=opts,
                       limits=cfg.wds_limits())  # bad input: exit 2, before any stack starts
    try:
        with _interrupts():
            running = read_stack_file(cfg.state_dir) if given is None else None
            if cfg.restart_daemon_after_s and (given is not None or running is not None):
                print(f"funcsion run: --restart-daemon-after needs an embedded stack; this run would use "
                      f"{'--stack' if given is not None else 'the stack `funcsion up` started'} (stop it, or "
                      "drop the option)", file=sys.stderr)
                return 2
            if given is not None or running is not None:
                with Client(given or stack_endpoints(running or {})) as client:
                    report = run_workflow(prep, config=cfg, client=client, options=opts, hints=hints)
            else:
                _say_starting(cfg, opts)
                with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
                    report = run_workflow(prep, config=cfg, stack=stack, options=opts, hints=hints)
    except (StateDirBusy, StoreFailure) as exc:  # no run started: nothing to report
        print(f"funcsion run: {exc}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"funcsion run: the run could not start: {exc}", file=sys.stderr)
        return 1
    doc = report.to_dict()
    print(format_report(doc))
    print(f"  report saved: {report.saved_to} (funcsion report {report.run_id} [--png FILE])")
    if args.json:
        print(json.dumps(doc), flush=True)
    if report.status != "succeeded":
        print("\n".join([f"funcsion run: {failure_line(doc)}", *failure_details(doc)]), file=sys.stderr)
        return 1
    return 0


def _say_starting(cfg: Any, opts: Any) -> None:
    """A line while the embedded stack starts (a second or two), where progress bars are shown."""
    from sdk.local._progress import starting_stack_line

    if sys.stderr.isatty() if opts.progress is None else opts.progress:
        print(starting_stack_line(str(cfg.state_dir), cfg.storage_functions), file=sys.stderr, flush=True)


@contextmanager
def _interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM stop the run (``RunInterrupted``: it is ended and reported); a second
    one exits at once. Only in the main thread (signal handlers live there)."""
    from sdk.local._run import RunInterrupted

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[str] = []

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if seen:
            print(f"funcsion run: {name} again: exiting now; the run is left to its TTL", file=sys.stderr,
                  flush=True)
            os._exit(130)
        seen.append(name)
        print(f"funcsion run: {name}: stopping the run (again to exit at once)", file=sys.stderr, flush=True)
        raise RunInterrupted(name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
