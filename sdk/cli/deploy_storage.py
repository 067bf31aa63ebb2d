"""``funcsion deploy storage``: package the storage-function runtime into a zip
and create or update N storage Lambda functions (``<prefix>0`` ..) through
boto3. Idempotent: a rerun with the same code and settings changes nothing.
``--zip-only`` builds the zip without calling AWS; ``--json`` prints one JSON
object as the last line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wds import FuncsionError

__all__ = ["HELP", "add_arguments", "run", "DeployStorageError"]

HELP = "package the storage-function runtime and create or update the storage Lambda functions"


class DeployStorageError(FuncsionError):
    """Bad arguments, or AWS refused a deployment step."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from sdk._config import Config
    from storage_functions.deploy import DEFAULT_PREFIX, DEFAULT_RUNTIME

    d = Config()  # the defaults; an unset option takes FUNCSION_<FIELD>, then funcsion.toml, then these
    p.add_argument("--count", "-n", type=int, default=None, metavar="N",
                   help=f"how many storage functions (default: config storage_functions, {d.storage_functions})")
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"function name prefix (default {DEFAULT_PREFIX})")
    p.add_argument("--role-arn", metavar="ARN",
                   help="execution role of the functions (default: config role_arn; required unless --zip-only)")
    p.add_argument("--memory-mb", type=int, default=None, metavar="MB",
                   help=f"memory size (default: config function_memory_mb, {d.function_memory_mb})")
    p.add_argument("--timeout-s", type=int, default=900, metavar="S", help="timeout in seconds (default 900)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable of the functions (repeatable)")
    p.add_argument("--runtime", default=DEFAULT_RUNTIME, help=f"Lambda runtime (default {DEFAULT_RUNTIME})")
    p.add_argument("--arch", choices=["x86_64", "arm64"], default="x86_64", help="architecture (default x86_64)")
    p.add_argument("--region", help="AWS region (default: config region)")
    p.add_argument("--endpoint-url", metavar="URL", help="Lambda endpoint override (e.g. a moto server)")
    p.add_argument("--zip-out", metavar="FILE", help="also write the deployment zip to FILE")
    p.add_argument("--zip-only", action="store_true", help="build the zip (see --zip-out) and stop; no AWS calls")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _env(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise DeployStorageError(f"--env {item!r}: write NAME=VALUE, e.g. --env LOG_LEVEL=debug")
        out[name] = value
    return out


def run(args: argparse.Namespace, *, client: Any = None) -> int:
    from storage_functions.deploy import (
        StorageFunctionConfig,
        build_zip,
        code_sha256,
        deploy_storage_functions,
    )
    from storage_functions.exceptions import StorageError

    code = build_zip()
    sha = code_sha256(code)
    if args.zip_out:
        with open(args.zip_out, "wb") as fh:
            fh.write(code)
    summary: dict[str, Any] = {"zip_bytes": len(code), "code_sha256": sha, "zip_out": args.zip_out}
    if args.zip_only:
        print(f"storage runtime zip: {len(code)} bytes, CodeSha256 {sha}"
              + (f", written to {args.zip_out}" if args.zip_out else ""))
        if args.json:
            print(json.dumps(summary))
        return 0
    from sdk._config import Config

    if args.count is not None and args.count < 1:
        raise DeployStorageError(f"--count must be at least 1, got {args.count}")
    cfg = Config.load(storage_functions=args.count, function_memory_mb=args.memory_mb, region=args.region,
                      role_arn=args.role_arn)
    if not cfg.role_arn:
        raise DeployStorageError("--role-arn is required to create functions (or role_arn in funcsion.toml / "
                                 "FUNCSION_ROLE_ARN, or pass --zip-only)")
    try:
        config = StorageFunctionConfig(role_arn=cfg.role_arn, memory_mb=cfg.function_memory_mb,
                                       timeout_s=args.timeout_s, env=_env(args.env), runtime=args.runtime,
                                       architecture=args.arch)
        results = deploy_storage_functions(client, count=cfg.storage_functions, config=config, prefix=args.prefix,
                                           zip_bytes=code, region_name=cfg.region, endpoint_url=args.endpoint_url)
    except StorageError as exc:
        raise DeployStorageError(str(exc)) from exc
    except Exception as exc:  # botocore: no credentials, no region, endpoint unreachable
        from sdk.deploy._aws_errors import describe_aws_error, is_aws_error

        if is_aws_error(exc):
            raise DeployStorageError(f"deploying the storage functions: "
                                     f"{describe_aws_error(exc, region=cfg.region, endpoint_url=args.endpoint_url)}"
                                     ) from exc
        raise
    for r in results:
        extra = f" ({', '.join(r.changed)})" if r.changed else ""
        print(f"{r.name:<32} {r.action}{extra}  {r.arn}")
    print(f"{len(results)} storage functions, zip {len(code)} bytes, CodeSha256 {sha}", file=sys.stderr)
    if args.json:
        summary["functions"] = [{"name": r.name, "action": r.action, "arn": r.arn, "changed": list(r.changed)}
                                for r in results]
        print(json.dumps(summary))
    return 0
