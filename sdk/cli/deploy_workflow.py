"""``funcsion deploy workflow WDS --target local|aws``.

``local`` registers the workflow with the stack ``funcsion up`` keeps running;
``aws`` creates or updates its Lambdas and state machine (``sdk.deploy.aws``);
``aws --dry-run --out DIR`` writes the state machine's ASL, the zips and the
functions' settings to DIR without calling AWS (``sdk.deploy._plan``). With
no ``--layer`` it warns: the task Lambdas import packages only a layer gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._common import add_param_option, parse_params

__all__ = ["HELP", "add_arguments", "run"]

HELP = "register a workflow with the local stack, or deploy its Lambdas and state machine to AWS"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("wds", metavar="WDS", help="the workflow description; handlers live beside it")
    p.add_argument("--target", choices=("local", "aws"), default="local")
    p.add_argument("--role-arn", help="IAM role of the Lambdas (aws; default: config role_arn)")
    p.add_argument("--state-machine-role-arn", help="IAM role of the state machine (aws; default: --role-arn)")
    p.add_argument("--layer", action="append", default=[], metavar="ARN",
                   help="a Lambda layer with thrift, pyeclib, msgpack and powertools (aws; repeatable)")
    p.add_argument("--region", default=None, help="AWS region (aws; default: config region)")
    p.add_argument("--endpoint-url", metavar="URL", help="Lambda and Step Functions endpoint (aws; e.g. a moto server)")
    p.add_argument("--dry-run", action="store_true",
                   help="aws: write what would be deployed to --out (ASL, zips, settings); no AWS calls")
    p.add_argument("--out", metavar="DIR", help="where --dry-run writes (made if missing)")
    p.add_argument("--state-dir", default=None, help="state directory of the local stack (local)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    add_param_option(p)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sdk._config import Config

    params = parse_params(args.param, args._parser)
    if not Path(args.wds).is_file():
        args._parser.error(f"{args.wds}: no such workflow description file")
    cfg = Config.load(state_dir=args.state_dir, region=args.region, role_arn=args.role_arn)
    if args.dry_run and args.target != "aws":
        args._parser.error("--dry-run shows an AWS deployment: add --target aws")
    if args.dry_run and not args.out:
        args._parser.error("--dry-run needs --out DIR, the directory to write the ASL and zips to")
    if args.target == "aws":
        if not args.layer:
            from sdk.deploy._zip import TASK_LAYER_PACKAGES

            print(f"funcsion deploy: warning: no --layer given; the task Lambdas import "
                  f"{', '.join(TASK_LAYER_PACKAGES)}, which only a layer provides (README, \"The AWS path\"), "
                  "so every task would fail with Runtime.ImportModuleError", file=sys.stderr)
        doc = _dry_run(args, cfg, params) if args.dry_run else _deploy(args, cfg, params)
    else:
        import wds
        from sdk._client import Client
        from sdk.local._stack import read_stack_file

        from ._common import stack_endpoints
        from sdk.local._stack_errors import NoStackError

        limits = cfg.wds_limits()
        text = wds.read_text(args.wds, limits)  # validated here, with this config's limits
        wds.loads(text, source=args.wds, params=params, limits=limits)
        info = read_stack_file(cfg.state_dir)
        if info is None:
            raise NoStackError(f"no local stack is up in {Path(cfg.state_dir).resolve()}; start one with "
                               "`funcsion up` (or just `funcsion run WDS`, which starts its own)")
        with Client(stack_endpoints(info)) as c:
            key = c.register_workflow(text, params, args.wds)
        doc = {"workflow": key, "target": "local", "metadata": info["metadata"]}
        print(f"registered {key} with the local stack at {info['metadata']}")
    if args.json:
        print(json.dumps(doc))
    return 0


def _deploy(args: argparse.Namespace, cfg: Any, params: dict[str, int]) -> dict[str, Any]:
    from sdk.deploy.aws import deploy_workflow

    if not cfg.role_arn:
        args._parser.error("--target aws needs --role-arn (or role_arn in funcsion.toml / FUNCSION_ROLE_ARN); "
                           "--dry-run --out DIR needs none")
    dep = deploy_workflow(args.wds, role_arn=cfg.role_arn, state_machine_role_arn=args.state_machine_role_arn,
                          params=params, layers=args.layer, region_name=cfg.region, limits=cfg.wds_limits(),
                          endpoint_url=args.endpoint_url)
    doc = dep.to_dict()
    for f in doc["functions"]:
        print(f"  {f['action']:<9} {f['name']}")
    print(f"state machine {doc['state_machine']}: {doc['state_machine_arn']}")
    return doc


def _dry_run(args: argparse.Namespace, cfg: Any, params: dict[str, int]) -> dict[str, Any]:
    from sdk.deploy._plan import plan_workflow, write_dry_run

    plan = plan_workflow(args.wds, role_arn=cfg.role_arn or "<ROLE_ARN>", params=params, layers=args.layer,
                         limits=cfg.wds_limits())
    doc = write_dry_run(plan, args.out, region=cfg.region)
    for f in doc["functions"]:
        print(f"  would deploy {f['name']:<40} {f['Handler']}")
    print(f"state machine {doc['state_machine_name']}: {args.out}/state_machine.asl.json")
    print(f"wrote {', '.join(doc['files'])} to {args.out} (nothing was sent to AWS)")
    return doc
