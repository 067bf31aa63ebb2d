"""``funcsion run A.wds B.wds ...``: several workflows as concurrent jobs on one stack (the
running one of the state directory, or an embedded one), each its own run with its own
report (``sdk.local._jobs``). The options are ``funcsion run``'s; ``--input`` and
``--param`` name one workflow's inputs and parameters, so they are refused with several
WDS files (each job takes its example's default inputs). ``--admit-budget SIZE`` with
``--job-peak`` runs the jobs under the live admission controller (``sdk.local._admission``):
each waits until its expected peak fits, first come, first served, and a job larger than
the budget is refused before any starts. ``--json`` prints one object as the last line:
``status``, ``wall_s``, ``mb_s``, ``leaked_bytes`` (summed), ``jobs``, every job's run
report, and with a budget ``admission`` (how many ran at once, the admissions in order).
The jobs run through ``sdk.run_jobs`` (``sdk._runs``), the Python API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["run_many"]


def _peaks(args: argparse.Namespace) -> list[int] | None:
    """Every ``--job-peak`` size (None when not given); a bad size ends in ``args._parser.error``."""
    from sdk.cli._common import parse_size

    sizes = [t for t in args.job_peak.split(",") if t.strip()]
    try:
        peaks = [parse_size(t) for t in sizes]
    except argparse.ArgumentTypeError as exc:
        args._parser.error(f"--job-peak: {exc}")
    return peaks or None


def run_many(args: argparse.Namespace, interrupts: Callable[[], AbstractContextManager[None]],
             run_options: Callable[[argparse.Namespace], dict[str, Any]]) -> int:
    """``sdk.run_jobs`` (the same code path), its options from the command line (``run_cmd.run``
    hands several WDS files here with its ``interrupts`` and ``run_options``)."""
    from sdk._runs import RunOptionError, run_jobs
    from sdk.cli._summary import format_report
    from sdk.exceptions import MetadataError, StoreFailure
    from sdk.local._stack_errors import StateDirBusy

    for opt, given in (("--input", args.input), ("--param", args.param), ("--crash", args.crash)):
        if given:
            args._parser.error(f"{opt} names one workflow's tasks or data: run the WDS files one at a time "
                               f"to use it (with several, each job takes its default inputs)")
    options = {**run_options(args), "progress": False}
    if options.pop("restart_daemon_after_s") is not None:
        args._parser.error("--restart-daemon-after restarts one run's daemon: run the WDS files one at a time")
    try:
        with interrupts():
            jobs = run_jobs(args.wds, policy=args.policy, admit_budget=args.admit_budget, job_peaks=_peaks(args),
                            **options)
    except RunOptionError as exc:
        args._parser.error(str(exc))
    except (StateDirBusy, StoreFailure) as exc:
        print(f"funcsion run: {exc}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"funcsion run: a job could not start: {exc}", file=sys.stderr)
        return 1
    doc = jobs.raw
    for d in doc["jobs"]:
        print(format_report(d))
    print(f"{len(jobs.jobs)} concurrent jobs: {doc['status']} in {doc['wall_s']:.2f} s, {doc['mb_s']:.3f} MB*s, "
          f"leaked {doc['leaked_bytes']} bytes")
    if "admission" in doc:
        adm = doc["admission"]
        print(f"admission within {adm['budget_bytes'] / 2**20:.1f} MiB: at most {adm['max_running']} jobs at once")
    if args.json:
        print(json.dumps(doc), flush=True)
    failed = [d for d in doc["jobs"] if d["status"] != "succeeded"]
    for d in failed:
        print(f"funcsion run: job {d['workflow']} ({d['run_id']}) {d['status']}: {d['error']}", file=sys.stderr)
    return 1 if failed else 0
