"""``funcsion run WDS --target aws``: run a workflow on its AWS deployment
(``sdk.aws_run``) and print and save the same report as a local run.

The deployment is found from its CloudFormation stack (``--stack-name``,
default ``funcsion-<app>``; ``--region``, ``--endpoint-url``); the driver
talks to the metadata server and the daemon directly, so it must reach their
private address (from the VPC, a VPN, or an SSM port forward with
``--metadata``/``--daemon``). Exit codes as a local run: 0 succeeded, 1
failed or aborted (or the run could not start: no stack, no credentials,
servers out of reach, one line each), 2 bad input. SIGINT/SIGTERM stop the
execution and end the run (``aborted``); ``--timeout S`` does the same after S
seconds (``failed``).

Only ``add_arguments`` and ``run`` are called from ``run_cmd``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ._summary import failure_details, failure_line, format_report

__all__ = ["add_arguments", "run"]

#: run options that drive the local stack or executor, refused with --target aws
_LOCAL_ONLY = (("crash_rate", "--crash-rate"), ("crash", "--crash"), ("kill_rate", "--kill-rate"),
               ("kill_storage_rate", "--kill-storage-rate"), ("restart_daemon_after", "--restart-daemon-after"),
               ("stack", "--stack"), ("admit_budget", "--admit-budget"), ("job_peak", "--job-peak"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=("local", "aws"), default="local",
                   help="where the tasks run: the local stack (default) or the AWS deployment of "
                        "`funcsion deploy WDS --target aws` (see the options on AWS)")
    g = p.add_argument_group(
        "on AWS (--target aws)",
        "The driver reads the deployment from its CloudFormation stack and talks to the metadata server and the "
        "daemon itself: it must reach their private address (run it in the VPC, over a VPN, or through an SSM "
        "port forward, e.g. aws ssm start-session --document-name AWS-StartPortForwardingSessionToRemoteHost, "
        "and give --metadata/--daemon).")
    g.add_argument("--stack-name", metavar="NAME", help="the deployment's CloudFormation stack (default: "
                   "funcsion-<app>, the WDS app name with characters outside [A-Za-z0-9-] made '-')")
    g.add_argument("--region", help="AWS region of the stack (default: the config's region, FUNCSION_REGION)")
    g.add_argument("--endpoint-url", metavar="URL", help="AWS endpoint for CloudFormation, Step Functions, Lambda, "
                   "Secrets Manager and CloudWatch Logs (e.g. a local emulator)")
    g.add_argument("--timeout", type=float, default=0.0, metavar="S",
                   help="stop the execution and end the run after S seconds (default: wait for it)")
    g.add_argument("--metadata", metavar="HOST:PORT", help="reach the metadata server here instead of the stack's "
                   "MetadataAddress (e.g. the local end of a port forward)")
    g.add_argument("--daemon", metavar="HOST:PORT", help="reach the daemon here instead of the stack's DaemonAddress")
    g.add_argument("--tls-ca", metavar="PATH", default=None,
                   help="the deployment's CA (ca.pem of `funcsion certs`; default: config tls_ca, FUNCSION_TLS_CA): "
                        "the servers' certificate is checked against it")
    g.add_argument("--poll", type=float, default=1.0, metavar="S",
                   help="seconds between two reads of the execution history (default 1)")


def run(args: argparse.Namespace, interrupts: Callable[[], AbstractContextManager[None]],
        pairs: Callable[[list[str], argparse.ArgumentParser], dict[str, str]]) -> int:
    """``funcsion run WDS --target aws``; ``run_cmd.run`` hands over its ``interrupts`` (SIGINT and
    SIGTERM end the run and it is reported) and its ``NAME=PATH`` parser."""
    from sdk._config import Config
    from sdk.aws_run import AwsRun, AwsRunOptions, DeploymentError
    from sdk.exceptions import MetadataError
    from sdk.local._run import RunHints, prepare_run

    from ._common import parse_params

    parser = args._parser
    if len(args.wds) > 1:
        parser.error("--target aws runs one workflow at a time: give one WDS file")
    given = [flag for attr, flag in _LOCAL_ONLY if getattr(args, attr, None) not in (None, [], 0, "", False)]
    if given:
        parser.error(f"{', '.join(given)}: local only (fault injection and stacks of the local target); drop "
                     f"{'it' if len(given) == 1 else 'them'} with --target aws")
    if args.timeout < 0 or args.poll <= 0:
        parser.error("--timeout and --poll take seconds: --timeout >= 0 (0: none), --poll > 0")
    if args.max_concurrency < 0:
        parser.error(f"--max-concurrency {args.max_concurrency}: give a number of tasks >= 1")
    params = parse_params(args.param, parser)
    inputs = pairs(args.input, parser)
    cfg = Config.load(state_dir=args.state_dir, policy=args.policy)
    prep = prepare_run(args.wds[0], inputs=inputs, params=params, limits=cfg.wds_limits())  # bad input: exit 2
    options = AwsRunOptions(stack_name=args.stack_name, region=args.region or cfg.region or None,
                            endpoint_url=args.endpoint_url, metadata=args.metadata, daemon=args.daemon,
                            timeout_s=args.timeout, poll_s=args.poll,
                            progress=False if (args.no_progress or args.json) else None,
                            max_attempts=cfg.max_attempts, tls_ca=_ca_pem(args.tls_ca or cfg.tls_ca, parser))
    hints = RunHints(args.max_concurrency, args.capacity, not args.latency_insensitive)
    try:
        with interrupts():
            report = AwsRun(prep, config=cfg, options=options, hints=hints).run()
    except DeploymentError as exc:  # no run started: nothing to report
        print(f"funcsion run: {exc}", file=sys.stderr)
        return 1
    except MetadataError as exc:
        print(f"funcsion run: the run could not start: {exc}", file=sys.stderr)
        return 1
    return _emit(report, args)


def _ca_pem(path: str, parser: argparse.ArgumentParser) -> str:
    """The CA file's PEM text ("" when none is given); a file that is not one is a usage error."""
    if not path:
        return ""
    from storage_functions.tls import read_pem

    try:
        return read_pem(path, "--tls-ca")
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")  # parser.error exits


def _emit(report: Any, args: argparse.Namespace) -> int:
    """Print the report as a local run does (and the execution's ARN); the exit code."""
    doc = report.to_dict()
    print(format_report(doc))
    where = (doc.get("target") or {}).get("execution_arn")
    if where:
        print(f"  execution: {where}")
    print(f"  report saved: {report.saved_to} (funcsion report {report.run_id} [--png FILE])")
    if args.json:
        print(json.dumps(doc), flush=True)
    if report.status != "succeeded":
        print("\n".join([f"funcsion run: {failure_line(doc)}", *failure_details(doc)]), file=sys.stderr)
        return 1
    return 0
