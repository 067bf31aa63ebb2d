"""``funcsion run A.wds B.wds ...``: several workflows as concurrent jobs on one stack (the
running one of the state directory, or an embedded one), each its own run with its own
report (``sdk.local._jobs``). The options are ``funcsion run``'s; ``--input`` and
``--param`` name one workflow's inputs and parameters, so they are refused with several
WDS files (each job takes its example's default inputs). ``--admit-budget SIZE`` with
``--job-peak`` runs the jobs under the live admission controller (``sdk.local._admission``):
each waits until its expected peak fits, first come, first served, and a job larger than
the budget is refused before any starts. ``--json`` prints one object as the last line:
``status``, ``wall_s``, ``mb_s``, ``leaked_bytes`` (summed), ``jobs``, every job's run
report, and with a budget ``admission`` (how many ran at once, the admissions in order)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["run_many"]


def _admission(args: argparse.Namespace) -> tuple[Any, list[int] | None]:
    """The admission controller and every job's expected peak from ``--admit-budget`` and
    ``--job-peak`` (None, None without a budget); bad sizes end in ``args._parser.error``."""
    from sdk.cli._common import parse_size
    from sdk.local._admission import Admission

    if not args.admit_budget:
        if args.job_peak:
            args._parser.error("--job-peak is the expected peak for --admit-budget: give the budget too")
        return None, None
    sizes = [t for t in args.job_peak.split(",") if t.strip()]
    if len(sizes) not in (1, len(args.wds)):
        args._parser.error(f"--job-peak: give one size for every job or one per WDS file ({len(args.wds)}), "
                           f"got {len(sizes)}")
    try:
        peaks = [parse_size(t) for t in sizes]
    except argparse.ArgumentTypeError as exc:
        args._parser.error(f"--job-peak: {exc}")
    return Admission(args.admit_budget), (peaks * len(args.wds) if len(peaks) == 1 else peaks)


def run_many(args: argparse.Namespace, interrupts: Callable[[], AbstractContextManager[None]]) -> int:
    """``funcsion run`` of several WDS files (``run_cmd.run`` hands them here with its
    ``interrupts``: SIGINT and SIGTERM end the jobs and they are reported)."""
    from sdk._config import Config
    from sdk.cli._common import stack_endpoints
    from sdk.cli._summary import format_report
    from sdk.exceptions import MetadataError, StoreFailure
    from sdk.local._executor import ExecutorOptions
    from sdk.local._inputs import prepare_run
    from sdk.local._jobs import jobs_summary, run_jobs
    from sdk.local._run import RunHints
    from sdk.local._stack import Stack, read_stack_file
    from sdk.local._stack_errors import StateDirBusy

    for opt, given in (("--input", args.input), ("--param", args.param), ("--crash", args.crash)):
        if given:
            args._parser.error(f"{opt} names one workflow's tasks or data: run the WDS files one at a time "
                               f"to use it (with several, each job takes its default inputs)")
    cfg = Config.load(state_dir=args.state_dir, policy=args.policy, crash_rate=args.crash_rate,
                      kill_rate=args.kill_rate, kill_storage_rate=args.kill_storage_rate)
    opts = ExecutorOptions(max_attempts=cfg.max_attempts, task_memory_mb=cfg.task_memory_mb,
                           task_timeout_s=cfg.task_timeout_s, concurrency=cfg.task_concurrency,
                           crash_rate=cfg.crash_rate, kill_rate=cfg.kill_rate, seed=args.seed, progress=False)
    if args.max_concurrency < 0:
        args._parser.error(f"--max-concurrency {args.max_concurrency}: give a number of tasks >= 1")
    hints = RunHints(args.max_concurrency, args.capacity, not args.latency_insensitive)
    admission, peaks = _admission(args)
    preps = [prepare_run(w, options=opts, limits=cfg.wds_limits()) for w in args.wds]  # bad input: exit 2
    start = time.monotonic()
    try:
        with interrupts():
            running = read_stack_file(cfg.state_dir)
            if running is not None:
                reports = run_jobs(preps, config=cfg, endpoints=stack_endpoints(running), options=opts, hints=hints,
                                   admission=admission, peaks=peaks)
            else:
                with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
                    reports = run_jobs(preps, config=cfg, stack=stack, options=opts, hints=hints,
                                       admission=admission, peaks=peaks)
    except (StateDirBusy, StoreFailure) as exc:
        print(f"funcsion run: {exc}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"funcsion run: a job could not start: {exc}", file=sys.stderr)
        return 1
    doc = jobs_summary(reports, time.monotonic() - start)
    if admission is not None:
        doc["admission"] = {"budget_bytes": admission.budget_bytes, "max_running": admission.max_running,
                            "peak_held_bytes": admission.peak_held_bytes,
                            "log": [[what, args.wds[int(str(job))], held] for what, job, held in admission.log]}
    for d in doc["jobs"]:
        print(format_report(d))
    print(f"{len(reports)} concurrent jobs: {doc['status']} in {doc['wall_s']:.2f} s, {doc['mb_s']:.3f} MB*s, "
          f"leaked {doc['leaked_bytes']} bytes")
    if admission is not None:
        print(f"admission within {admission.budget_bytes / 2**20:.1f} MiB: at most {admission.max_running} jobs at once")
    if args.json:
        print(json.dumps(doc), flush=True)
    failed = [d for d in doc["jobs"] if d["status"] != "succeeded"]
    for d in failed:
        print(f"funcsion run: job {d['workflow']} ({d['run_id']}) {d['status']}: {d['error']}", file=sys.stderr)
    return 1 if failed else 0
