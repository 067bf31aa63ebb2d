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
The run itself is ``sdk.run`` (``sdk._runs``), the Python API, with its options from
the command line.
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
from ._common import add_param_option, parse_params, parse_size
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
    p.add_argument("--policy", help="release policy: funcstore (default; funcstore:commit keeps memory until the last "
                                        "reader commits), pocket, oracle, jiffy:<lease_ms>")
    p.add_argument("--json", action="store_true", help="print the run report as one JSON object on the last line")
    p.add_argument("--crash-rate", type=float, default=None, metavar="P",
                   help="crash each task attempt with probability P at a random point (fault injection)")
    p.add_argument("--crash", action="append", default=[], metavar="FUNCTION[:POINT]",
                   help="crash this task's first attempt at POINT (start, after_read, after_commit, end)")
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
                        "`funcsion serve daemon --metadata`, with FUNCSION_ADMIN_TOKEN and FUNCSION_STORE_TOKEN set; "
                        "several metadata shards: metadata= once per shard, in shard order (or 'metadata=H:P;H:P'); "
                        "several daemons: daemon= once per daemon, in order (or 'daemon=H:P;H:P'; the K-th is "
                        "daemon-K, as `funcsion serve daemon --daemon-id daemon-K` names itself; every daemon "
                        "started with the same --token)")
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
    """``sdk.run`` (the same code path), its options from the command line; its
    ``RunOptionError`` is a usage error (exit 2)."""
    from sdk._runs import RunOptionError
    from sdk._runs import run as run_one
    from sdk.exceptions import MetadataError, StoreFailure
    from sdk.local._stack_errors import StateDirBusy

    if args.target == "aws":
        return run_aws.run(args, _interrupts, _pairs)
    if len(args.wds) > 1:
        from sdk.cli.run_jobs import run_many
        return run_many(args, _interrupts, _options)
    if args.admit_budget or args.job_peak:
        args._parser.error("--admit-budget and --job-peak admit concurrent jobs: give several WDS files")
    params = parse_params(args.param, args._parser)
    inputs = _pairs(args.input, args._parser)
    try:
        with _interrupts():
            report = run_one(args.wds[0], inputs=inputs, params=params, policy=args.policy, **_options(args))
    except RunOptionError as exc:
        args._parser.error(str(exc))
    except (StateDirBusy, StoreFailure) as exc:  # no run started: nothing to report
        print(f"funcsion run: {exc}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"funcsion run: the run could not start: {exc}", file=sys.stderr)
        return 1
    doc = report.raw
    print(format_report(doc))
    print(f"  report saved: {report.saved_to} (funcsion report {report.run_id} [--png FILE])")
    if args.json:
        print(json.dumps(doc), flush=True)
    if report.status != "succeeded":
        print("\n".join([f"funcsion run: {failure_line(doc)}", *failure_details(doc)]), file=sys.stderr)
        return 1
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """``sdk.run``'s options (``RunOptions``) from ``funcsion run``'s arguments."""
    return {"state_dir": args.state_dir, "stack": args.stack, "crash_rate": args.crash_rate, "crash": args.crash,
            "kill_rate": args.kill_rate, "kill_storage_rate": args.kill_storage_rate,
            "restart_daemon_after_s": args.restart_daemon_after, "seed": args.seed,
            "progress": False if (args.no_progress or args.json) else None,
            "max_concurrency": args.max_concurrency, "capacity": args.capacity,
            "latency_sensitive": not args.latency_insensitive}


@contextmanager
def _interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM stop the run (``RunInterrupted``: it is ended and reported); a second
    one exits at once. Only in the main thread (signal handlers live there)."""
    from sdk.local._progress import announce
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
        # below the progress bars, once the run took them off (at once: it stops on this exception)
        announce(f"funcsion run: {name}: stopping the run (again to exit at once)")
        raise RunInterrupted(name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
