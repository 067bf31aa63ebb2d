"""The daemon with its storage functions on AWS Lambda, the counterpart of
``LocalStore``: ``AwsStore`` finds the storage Lambdas ``<prefix>0`` ..
``<prefix>N-1`` that ``funcsion deploy storage`` created, sizes the pool from
them (how many, their memory), and runs a ``Daemon`` that invokes them
through ``AwsInvoker`` (boto3) with COS in an S3 bucket, the one store both
the daemon and the Lambdas can reach. Used by ``funcsion serve daemon
--invoker aws`` and its tests. At start it probes the COS prefix as the
server's role will use it: one tiny object written, read back and deleted
(``check_cos``); a missing bucket, an unreachable endpoint, missing
credentials or a denied action is one line naming the bucket/prefix, the
action and the fix (``probe_error``), never a botocore traceback. Not here:
deploying the functions (``storage_functions.deploy``), the CLI's checks of
the addresses.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import replace
from typing import Any

from ..exceptions import COSConfigError, FunctionNotDeployed, PlatformConfigError, PlatformError
from ..invoker import AwsInvoker
from ._config import DaemonConfig
from ._server import Daemon

__all__ = ["AwsStore", "deployed_functions", "probe_error", "PROBE_ACTIONS"]

#: what the daemon does under its COS prefix, in the order ``check_cos`` tries it
PROBE_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:DeleteObject")
_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "AccountProblem"}
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}


def deployed_functions(client: Any, prefix: str) -> dict[int, dict[str, Any]]:
    """The Lambda functions named ``<prefix><index>``: index -> their
    configuration (``list_functions`` entries)."""
    pattern = re.compile(re.escape(prefix) + r"(0|[1-9]\d*)")
    out: dict[int, dict[str, Any]] = {}
    for page in client.get_paginator("list_functions").paginate():
        for fn in page.get("Functions", []):
            m = pattern.fullmatch(str(fn.get("FunctionName", "")))
            if m:
                out[int(m.group(1))] = fn
    return out


class AwsStore:
    """``with AwsStore("s3://bucket/prefix", function_prefix="funcsion-storage-",
    region_name="eu-west-1", advertise="10.0.0.5:7000") as st: ...``

    ``function_prefix`` is the prefix ``funcsion deploy storage`` was given
    (functions ``<prefix>0`` ..); it ends in ``-``, the separator the daemon
    puts before a function's index. ``client`` is a boto3 ``lambda`` client
    (else one is built from ``region_name``/``endpoint_url``). Other
    ``DaemonConfig`` fields may be given by keyword; ``max_functions`` and
    ``function_memory_mb`` default to what is deployed and may not exceed it.
    """

    def __init__(self, cos_url: str, *, function_prefix: str, region_name: str | None = None,
                 endpoint_url: str | None = None, client: Any = None, config: DaemonConfig | None = None,
                 **overrides: Any) -> None:
        if not isinstance(cos_url, str) or not cos_url.startswith("s3://"):
            raise COSConfigError(f"COS {cos_url!r}: storage functions on AWS Lambda cannot reach a local "
                                 "directory; give an S3 bucket, s3://bucket/prefix")
        if not function_prefix.endswith("-") or len(function_prefix) < 2:
            raise PlatformConfigError(f"function prefix {function_prefix!r}: the storage functions are named "
                                      "<prefix>N with a '-' before N; deploy them with a prefix ending in '-' "
                                      "(funcsion deploy storage --prefix NAME-) and pass that prefix")
        self._own_client = client is None
        if client is None:
            import boto3

            client = boto3.client("lambda", region_name=region_name, endpoint_url=endpoint_url)
        self.client = client
        from botocore.exceptions import ClientError

        try:
            found = deployed_functions(client, function_prefix)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise PlatformError(f"listing the storage functions in Lambda: {err.get('Code')}: "
                                f"{err.get('Message')}") from exc
        deployed = 0
        while deployed in found:
            deployed += 1
        if deployed == 0:
            raise FunctionNotDeployed(f"no storage function {function_prefix}0 in Lambda"
                                      f"{' (' + client.meta.region_name + ')' if client.meta.region_name else ''}: "
                                      f"deploy them first, funcsion deploy storage --prefix {function_prefix} "
                                      "--count N --role-arn ARN")
        base = config or DaemonConfig()
        n = int(overrides.pop("max_functions", None) or deployed)
        if n > deployed:
            raise PlatformConfigError(f"max_functions={n} but only {function_prefix}0..{function_prefix}"
                                      f"{deployed - 1} are deployed: deploy more (funcsion deploy storage "
                                      f"--prefix {function_prefix} --count {n}) or ask for fewer")
        group = int(overrides.get("group_size", base.group_size))
        if group > n:
            raise PlatformConfigError(f"group_size={group} needs at least {group} storage functions, "
                                      f"{n} are deployed or allowed: deploy more or lower the group size")
        memory = min(int(found[i].get("MemorySize", 128)) for i in range(n))
        mb = int(overrides.pop("function_memory_mb", None) or memory)
        if mb > memory:
            raise PlatformConfigError(f"function_memory_mb={mb} but {function_prefix}* have {memory} MB in Lambda: "
                                      "redeploy them with --memory-mb or ask for less")
        fields: dict[str, Any] = {"token": base.token or secrets.token_hex(16), "cos_url": cos_url,
                                  "function_prefix": function_prefix[:-1], "max_functions": n,
                                  "function_memory_mb": mb}
        fields.update(overrides)
        try:
            self.config = replace(base, **fields)
        except ValueError as exc:
            raise PlatformConfigError(str(exc)) from None
        self.deployed = deployed
        self.invoker = AwsInvoker(client)
        self.daemon = Daemon(self.config, self.invoker)

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def address(self) -> tuple[str, int]:
        return self.daemon.address

    @property
    def cos(self) -> Any:
        return self.daemon.cos

    def check_cos(self) -> None:
        """Write, read back and delete one tiny object under the COS prefix, as the daemon
        will; raise ``COSConfigError`` (one line: ``probe_error``) at the first that fails."""
        cos = self.daemon.cos
        key = f"{cos.prefix}.funcsion-probe-{secrets.token_hex(6)}"
        body = secrets.token_bytes(16)
        for action in PROBE_ACTIONS:
            try:
                if action == "s3:PutObject":
                    cos.client.put_object(Bucket=cos.bucket, Key=key, Body=body)
                elif action == "s3:GetObject":
                    got = cos.client.get_object(Bucket=cos.bucket, Key=key)["Body"].read()
                    if got != body:
                        raise COSConfigError(f"COS s3://{cos.bucket}/{cos.prefix}: an object read back differs "
                                             "from what was written: is the endpoint an S3 service?")
                else:
                    cos.client.delete_object(Bucket=cos.bucket, Key=key)
            except COSConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - any botocore failure: one line naming what to fix
                raise COSConfigError(probe_error(cos.bucket, cos.prefix, action, exc,
                                                 endpoint=cos.endpoint_url)) from None

    def start(self) -> AwsStore:
        """Check the bucket, then listen (functions are invoked on demand)."""
        self.check_cos()
        self.daemon.start()
        return self

    def stop(self) -> None:
        try:
            self.daemon.stop()
        finally:
            if self.daemon.cos is not None and hasattr(self.daemon.cos, "close"):
                self.daemon.cos.close()
            if self._own_client:
                self.client.close()

    def __enter__(self) -> AwsStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def probe_error(bucket: str, prefix: str, action: str, exc: BaseException, *, endpoint: str | None = None) -> str:
    """One line for a failed COS probe step: what was tried where, what S3 (or botocore)
    said, and the fix."""
    where = f"s3://{bucket}/{prefix}"
    response = getattr(exc, "response", None) or {}
    err = response.get("Error", {}) if isinstance(response, dict) else {}
    code = str(err.get("Code") or (response.get("ResponseMetadata", {}) if isinstance(response, dict) else {})
               .get("HTTPStatusCode", "") or "")
    message = str(err.get("Message") or "").rstrip(".")
    kind = type(exc).__name__
    if code == "NoSuchBucket":
        return (f"COS {where}: bucket {bucket!r} does not exist ({action} said NoSuchBucket): create it "
                f"(aws s3 mb s3://{bucket}) or fix the bucket in --cos")
    if code in _DENIED:
        return (f"COS {where}: {action} was denied ({code}{': ' + message if message else ''}): give the "
                f"server's role s3:PutObject, s3:GetObject and s3:DeleteObject on arn:aws:s3:::{bucket}/{prefix}*")
    if code in _BAD_CREDENTIALS:
        return (f"COS {where}: S3 refused the server's credentials on {action} ({code}{': ' + message if message else ''}): "
                "run the server with a role (instance profile or ECS task role) rather than keys, or renew them")
    if kind in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return (f"COS {where}: no AWS credentials for {action} ({kind}): run the server with a role "
                "(instance profile or ECS task role) or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                "ProxyConnectionError", "SSLError"):
        at = endpoint or "its regional endpoint"
        return (f"COS {where}: S3 is not reachable at {at} ({kind} on {action}): check the endpoint_url of "
                "--cos and --region, and that this host reaches S3 (in a VPC: an S3 gateway endpoint)")
    said = f"{code}: {message}" if code else f"{kind}: {exc}"
    return f"COS {where}: {action} failed ({said}); the server's role needs s3:PutObject, s3:GetObject and " \
           f"s3:DeleteObject on arn:aws:s3:::{bucket}/{prefix}*"
