"""``funcsion offload deploy ASL.json --handlers FILE --target aws``: deploy a state machine
whose handlers use ``@sdk.offload`` to AWS as ONE CloudFormation stack
(``sdk.deploy._offload_stack``): its task Lambdas built from the handlers module, the user's
definition as the state machine, the EventBridge status rule and the cleanup Lambda, the
storage Lambdas and the server host. Takes ``funcsion deploy workflow``'s AWS options;
``--dry-run --out DIR`` writes ``template.json``, ``task.zip`` and ``storage.zip`` without
calling AWS. Not here: running it locally (``funcsion offload run``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .deploy_workflow import _stack_parameters, _warn_no_layer, add_aws_arguments, deploy_and_say, settings_of

__all__ = ["HELP", "add_arguments", "run"]

HELP = "deploy a state machine with @sdk.offload handlers to AWS as one CloudFormation stack"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("asl", metavar="ASL", help="path of the state machine definition (Amazon States Language, JSON)")
    p.add_argument("--handlers", metavar="FILE", default=None,
                   help="the handlers' module (default: handlers.py next to ASL); one function per Lambda")
    p.add_argument("--target", choices=("aws",), default="aws",
                   help="aws (the only target: `funcsion offload run` runs it locally)")
    p.add_argument("--app", default=None, help="names the stack funcsion-APP (default: ASL's name before its first .)")
    p.add_argument("--threshold", type=int, default=None, metavar="BYTES",
                   help="the task Lambdas offload values larger than this (default: 64 KiB)")
    add_aws_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.deploy._offload_stack import offload_bundle
    from sdk.deploy._stack import write_dry_run

    asl = Path(args.asl)
    if not asl.is_file():
        args._parser.error(f"{args.asl}: no such state machine definition file")
    if args.dry_run and not args.out:
        args._parser.error("--dry-run needs --out DIR, the directory to write the template and zips to")
    handlers = Path(args.handlers) if args.handlers else asl.parent / "handlers.py"
    cfg = Config.load(region=args.region, storage_functions=args.storage_functions)
    given = None if args.dry_run else _stack_parameters(args)  # bad TLS or --cos fail before the build
    b = offload_bundle(asl, handlers, app=args.app, settings=settings_of(cfg), threshold_bytes=args.threshold)
    doc: dict[str, Any]
    if args.dry_run:
        if not args.layer:
            _warn_no_layer()
        doc = write_dry_run(b, args.out)
        print(f"stack {b.stack_name}: {len(b.template['Resources'])} resources")
        print(f"wrote {', '.join(doc['files'])} to {args.out} (nothing was sent to AWS)")
    else:
        assert given is not None
        dep = deploy_and_say(b, given, args, cfg)
        doc = {"workflow": b.graph.key, "target": "aws", "region": cfg.region, **dep.to_dict()}
    if args.json:
        print(json.dumps(doc))
    return 0
