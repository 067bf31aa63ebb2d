"""``funcsion deploy workflow WDS --target local|aws``.

``local`` registers the workflow with the stack ``funcsion up`` keeps running;
``aws`` renders ONE CloudFormation template for the whole deployment (the
storage and task Lambdas in the VPC, the server host, the roles, the state
machine: ``sdk.deploy._template``), uploads the zips and the template to
``--artifact-bucket`` and creates or updates the stack ``funcsion-<app>``
(``sdk.deploy._stack``), then prints its outputs. Settings not given on an
update keep the stack's previous values, so a redeploy needs only the WDS.
``aws --dry-run --out DIR`` writes ``template.json``, ``task.zip`` and
``storage.zip`` to DIR without calling AWS. With no ``--layer`` it warns: the
task Lambdas import packages only a layer gives.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._common import add_param_option, parse_params

__all__ = ["HELP", "add_arguments", "add_aws_arguments", "deploy_and_say", "run", "settings_of"]

HELP = "register a workflow with the local stack, or deploy it to AWS as one CloudFormation stack"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("wds", metavar="WDS", help="the workflow description; handlers live beside it")
    p.add_argument("--target", choices=("local", "aws"), default="local")
    add_aws_arguments(p)
    p.add_argument("--state-dir", default=None, help="state directory of the local stack (local)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    add_param_option(p)


def add_aws_arguments(p: argparse.ArgumentParser) -> None:
    """The options of an AWS deployment (``funcsion offload deploy`` takes them too)."""
    p.add_argument("--layer", action="append", default=[], metavar="ARN",
                   help="a Lambda layer with thrift, pyeclib, msgpack and powertools for every task (aws; repeatable)")
    p.add_argument("--region", default=None, help="AWS region (aws; default: config region)")
    p.add_argument("--endpoint-url", metavar="URL", help="CloudFormation and S3 endpoint (aws; e.g. a moto server)")
    p.add_argument("--artifact-bucket", metavar="BUCKET", help="(aws) an existing bucket the zips and template go to")
    p.add_argument("--vpc-id", metavar="VPC", help="(aws) the VPC of the Lambdas and the server host")
    p.add_argument("--subnet", action="append", default=[], metavar="SUBNET",
                   help="(aws) a private subnet of the Lambdas; the host runs in the first (repeatable)")
    p.add_argument("--route-table", action="append", default=[], metavar="RTB",
                   help="(aws) a route table of those subnets, for the S3 gateway endpoint (repeatable)")
    p.add_argument("--cos", metavar="s3://BUCKET/PREFIX", help="(aws) COS: an existing bucket and a key prefix")
    p.add_argument("--tls-dir", metavar="DIR",
                   help="(aws) ca.pem, server.pem and server.key as `funcsion certs DIR --name NAME --name 127.0.0.1` "
                        "wrote them")
    p.add_argument("--tls-ca", metavar="FILE", help="(aws) the CA certificate (PEM; `funcsion certs DIR` makes one)")
    p.add_argument("--tls-cert", metavar="FILE", help="(aws) the servers' certificate for --server-name (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="(aws) the servers' private key (PEM)")
    p.add_argument("--server-name", metavar="NAME", help="(aws) the servers' DNS name (default funcsion.internal)")
    p.add_argument("--storage-functions", type=int, default=None, metavar="N",
                   help="(aws) how many storage Lambdas (default: config storage_functions)")
    p.add_argument("--parameter", action="append", default=[], metavar="NAME=VALUE",
                   help="(aws) any other template parameter, e.g. ServerInstanceType=m6i.xlarge (repeatable)")
    p.add_argument("--no-wait", action="store_true", help="(aws) return once CloudFormation accepted the change")
    p.add_argument("--dry-run", action="store_true",
                   help="aws: write template.json and the zips to --out; no AWS calls")
    p.add_argument("--out", metavar="DIR", help="where --dry-run writes (made if missing)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sdk._config import Config

    params = parse_params(args.param, args._parser)
    if not Path(args.wds).is_file():
        args._parser.error(f"{args.wds}: no such workflow description file")
    cfg = Config.load(state_dir=args.state_dir, region=args.region, storage_functions=args.storage_functions)
    if args.dry_run and args.target != "aws":
        args._parser.error("--dry-run shows an AWS deployment: add --target aws")
    if args.dry_run and not args.out:
        args._parser.error("--dry-run needs --out DIR, the directory to write the ASL and zips to")
    if args.target == "aws":
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


def _warn_no_layer() -> None:
    from sdk.deploy._zip import TASK_LAYER_PACKAGES

    print(f"funcsion deploy: warning: no --layer given; the task Lambdas import "
          f"{', '.join(TASK_LAYER_PACKAGES)}, which only a layer provides (docs/deploy-aws.md, \"The layer for the task Lambdas\"), "
          "so every task would fail with Runtime.ImportModuleError", file=sys.stderr)


def settings_of(cfg: Any) -> Any:
    """The template's render-time settings from the config."""
    from sdk.deploy._template import TemplateSettings

    return TemplateSettings(storage_functions=cfg.storage_functions, storage_memory_mb=cfg.function_memory_mb,
                            task_memory_mb=cfg.task_memory_mb, task_timeout_s=min(900, int(cfg.task_timeout_s)),
                            metadata_port=cfg.metadata_port, daemon_port=cfg.daemon_port)


def _bundle(cfg: Any, params: dict[str, int], args: argparse.Namespace) -> Any:
    from sdk.deploy._stack import bundle

    return bundle(args.wds, params=params, limits=cfg.wds_limits(), settings=settings_of(cfg))


def _read(flag: str, path: str | None) -> bytes | None:
    from sdk.deploy._stack import StackDeployError

    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise StackDeployError(f"{flag} {path}: {exc.strerror or exc}: give the PEM file "
                               "`funcsion certs DIR` wrote") from None
    if b"-----BEGIN " not in data:
        raise StackDeployError(f"{flag} {path}: not a PEM file (no -----BEGIN line): give the PEM file "
                               "`funcsion certs DIR` wrote")
    return data


def _stack_parameters(args: argparse.Namespace) -> Any:
    from sdk.deploy._stack import StackDeployError, StackParameters

    cos_bucket = cos_prefix = None
    if args.cos:
        bucket, _, prefix = args.cos.removeprefix("s3://").partition("/")
        if not args.cos.startswith("s3://") or not bucket or not prefix.strip("/"):
            raise StackDeployError(f"--cos {args.cos!r}: write s3://BUCKET/PREFIX (an existing bucket and a key "
                                   "prefix, e.g. s3://my-bucket/funcsion)")
        cos_bucket, cos_prefix = bucket, prefix.strip("/")
    extra = {}
    for item in args.parameter:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise StackDeployError(f"--parameter {item!r}: write NAME=VALUE, e.g. --parameter ServerInstanceType="
                                   "m6i.xlarge")
        extra[name] = value
    tls = {"ca": args.tls_ca, "cert": args.tls_cert, "key": args.tls_key}
    if args.tls_dir:
        for what, name in (("ca", "ca.pem"), ("cert", "server.pem"), ("key", "server.key")):
            tls[what] = tls[what] or os.path.join(args.tls_dir, name)
    return StackParameters(artifact_bucket=args.artifact_bucket, vpc_id=args.vpc_id, subnet_ids=args.subnet,
                           route_table_ids=args.route_table, cos_bucket=cos_bucket, cos_prefix=cos_prefix,
                           task_layers=args.layer, tls_ca=_read("--tls-ca", tls["ca"]),
                           tls_cert=_read("--tls-cert", tls["cert"]), tls_key=_read("--tls-key", tls["key"]),
                           server_name=args.server_name, extra=extra)


def _deploy(args: argparse.Namespace, cfg: Any, params: dict[str, int]) -> dict[str, Any]:
    given = _stack_parameters(args)
    b = _bundle(cfg, params, args)
    dep = deploy_and_say(b, given, args, cfg)
    return {"workflow": b.graph.key, "target": "aws", "region": cfg.region, **dep.to_dict()}


def deploy_and_say(bundle: Any, given: Any, args: argparse.Namespace, cfg: Any) -> Any:
    """Create or update ``bundle``'s stack and print what became of it and its outputs (the
    deploy result); warns once when a new stack has no task layer."""
    from sdk.deploy._stack import deploy_stack

    dep = deploy_stack(bundle, given, region=cfg.region, endpoint_url=args.endpoint_url, wait=not args.no_wait)
    if dep.action == "created" and not args.layer:
        _warn_no_layer()
    print(f"stack {dep.stack_name} {dep.action} in {cfg.region}")
    for key, value in sorted(dep.outputs.items()):
        print(f"  {key:<22} {value}")
    return dep


def _dry_run(args: argparse.Namespace, cfg: Any, params: dict[str, int]) -> dict[str, Any]:
    from sdk.deploy._stack import write_dry_run

    if not args.layer:
        _warn_no_layer()
    b = _bundle(cfg, params, args)
    doc = write_dry_run(b, args.out)
    print(f"stack {b.stack_name}: {len(b.template['Resources'])} resources")
    print(f"wrote {', '.join(doc['files'])} to {args.out} (nothing was sent to AWS)")
    return doc
