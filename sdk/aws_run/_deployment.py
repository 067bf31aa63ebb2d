"""Where a deployment on AWS is, from its CloudFormation stack's Outputs: the
state machine, the servers' addresses, the COS, the Secrets Manager secret
holding the tokens, the storage functions' name prefix; and the ``Endpoints``
a driver uses to reach it (``driver_endpoints``, the one place they are built:
TLS settings join there).

The Outputs are the contract with the template (``funcsion deploy --target
aws``): ``OUTPUT_KEYS``. ``deployment_from_outputs``, ``parse_tokens``,
``default_stack_name`` and ``check_address`` are pure; ``describe_deployment``
and ``read_tokens`` call CloudFormation and Secrets Manager through clients
they are given. Every failure is a ``DeploymentError`` of one line saying
what is wrong and how to fix it, never a botocore traceback.

Not here: running anything (``_driver``).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._client import Endpoints, parse_addr
from ..deploy._aws_errors import describe_aws_error, is_aws_error
from ..exceptions import FuncsionError

__all__ = ["AwsDeployment", "DeploymentError", "OUTPUT_KEYS", "REACH_HINT", "default_stack_name",
           "deployment_from_outputs", "parse_tokens", "describe_deployment", "read_tokens", "driver_endpoints",
           "check_address"]

#: The stack Outputs a run reads, each with what it holds.
OUTPUT_KEYS = {
    "StateMachineArn": "the workflow's state machine",
    "MetadataAddress": "the metadata server, host:port",
    "DaemonAddress": "the SION daemon, host:port",
    "ServerName": "the name in the servers' certificate",
    "CosUrl": "the COS, s3://bucket/prefix",
    "TokensSecretArn": "the Secrets Manager secret with admin_token and store_token",
    "StorageFunctionPrefix": "the storage Lambdas' name prefix",
}

#: What to do when the driver cannot reach the servers (they listen on the VPC's private addresses).
REACH_HINT = ("the driver must reach the servers' private address: run it inside the VPC, over a VPN, or "
              "through an SSM port forward (aws ssm start-session --document-name "
              "AWS-StartPortForwardingSessionToRemoteHost ...), then give --metadata HOST:PORT --daemon HOST:PORT")

#: Stack states whose Outputs describe a deployment that is up.
_USABLE = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE",
                     "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"})
_STACK_NAME = re.compile(r"[^A-Za-z0-9-]")


class DeploymentError(FuncsionError):
    """The deployment cannot be found or used: no stack, an output missing, no tokens, the
    servers out of reach, AWS refusing or unreachable."""

    retryable = False


@dataclass(frozen=True, slots=True)
class AwsDeployment:
    stack_name: str
    state_machine_arn: str
    metadata: str
    daemon: str
    server_name: str
    cos_url: str
    tokens_secret_arn: str
    storage_function_prefix: str

    def to_dict(self) -> dict[str, str]:
        return {"stack_name": self.stack_name, "state_machine_arn": self.state_machine_arn,
                "metadata": self.metadata, "daemon": self.daemon, "server_name": self.server_name,
                "cos_url": self.cos_url, "storage_function_prefix": self.storage_function_prefix}


def default_stack_name(app: str) -> str:
    """``funcsion-<app>`` with every character outside ``[A-Za-z0-9-]`` made ``-``, cut to 128."""
    return _STACK_NAME.sub("-", f"funcsion-{app}")[:128]


def deployment_from_outputs(stack_name: str, outputs: Mapping[str, str], *, metadata: str | None = None,
                            daemon: str | None = None) -> AwsDeployment:
    """The deployment a stack's Outputs describe; ``metadata``/``daemon`` (``--metadata``,
    ``--daemon``) stand in for the stack's addresses (e.g. an SSM port forward)."""
    given = {"MetadataAddress": metadata, "DaemonAddress": daemon}
    missing = [k for k in OUTPUT_KEYS if not str(outputs.get(k) or given.get(k) or "").strip()]
    if missing:
        what = "; ".join(f"{k} ({OUTPUT_KEYS[k]})" for k in missing)
        raise DeploymentError(f"stack {stack_name} has no output {what}: deploy it with `funcsion deploy WDS "
                              "--target aws` (its template has them), or name the right stack with --stack-name")
    v = {k: str(given.get(k) or outputs[k]).strip() for k in OUTPUT_KEYS}
    for key, flag in (("MetadataAddress", "--metadata"), ("DaemonAddress", "--daemon")):
        try:
            parse_addr(v[key])
        except ValueError as exc:
            src = flag if given.get(key) else f"stack {stack_name} output {key}"
            raise DeploymentError(f"{src}: {exc}") from None
    if not v["CosUrl"].startswith("s3://"):
        raise DeploymentError(f"stack {stack_name} output CosUrl is {v['CosUrl']!r}: a deployment's COS is S3, "
                              "s3://bucket/prefix")
    return AwsDeployment(stack_name, v["StateMachineArn"], v["MetadataAddress"], v["DaemonAddress"], v["ServerName"],
                         v["CosUrl"], v["TokensSecretArn"], v["StorageFunctionPrefix"])


def parse_tokens(secret: str, arn: str) -> tuple[str, str]:
    """(admin token, store token) from the secret's JSON ``{"admin_token": ..., "store_token": ...}``."""
    try:
        doc = json.loads(secret)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise DeploymentError(f"secret {arn} is not a JSON object; it must hold "
                              '{"admin_token": ..., "store_token": ...} (the tokens the servers were started with)')
    missing = [k for k in ("admin_token", "store_token") if not isinstance(doc.get(k), str) or not doc[k]]
    if missing:
        raise DeploymentError(f"secret {arn} has no {' and no '.join(missing)}; it must hold "
                              '{"admin_token": ..., "store_token": ...} (the tokens the servers were started with)')
    return str(doc["admin_token"]), str(doc["store_token"])


def _aws(step: str, exc: BaseException, region: str | None, endpoint_url: str | None) -> DeploymentError:
    return DeploymentError(f"{step}: {describe_aws_error(exc, region=region, endpoint_url=endpoint_url)}")


def describe_deployment(cfn: Any, stack_name: str, *, region: str | None = None, endpoint_url: str | None = None,
                        metadata: str | None = None, daemon: str | None = None) -> AwsDeployment:
    """Read the stack's Outputs (``cfn``: a boto3 CloudFormation client)."""
    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except Exception as exc:
        if not is_aws_error(exc):
            raise
        err = getattr(exc, "response", {}).get("Error", {}) if isinstance(getattr(exc, "response", None), dict) else {}
        if err.get("Code") == "ValidationError" and "does not exist" in str(err.get("Message", "")):
            raise DeploymentError(f"no CloudFormation stack {stack_name!r} in {region or 'this region'}: deploy "
                                  "the workflow with `funcsion deploy WDS --target aws`, or give --stack-name "
                                  "(and --region) of the stack it made") from None
        raise _aws(f"reading CloudFormation stack {stack_name}", exc, region, endpoint_url) from None
    if not stacks:
        raise DeploymentError(f"no CloudFormation stack {stack_name!r} in {region or 'this region'}")
    st = stacks[0]
    status = str(st.get("StackStatus", ""))
    if status and status not in _USABLE:
        raise DeploymentError(f"CloudFormation stack {stack_name} is {status}: run when it is CREATE_COMPLETE or "
                              "UPDATE_COMPLETE (wait for the deploy, or fix it and deploy again)")
    outputs = {str(o.get("OutputKey")): str(o.get("OutputValue", "")) for o in st.get("Outputs", []) or []}
    return deployment_from_outputs(stack_name, outputs, metadata=metadata, daemon=daemon)


def read_tokens(secrets: Any, arn: str, *, region: str | None = None,
                endpoint_url: str | None = None) -> tuple[str, str]:
    """(admin token, store token) from Secrets Manager (``secrets``: a boto3 client)."""
    try:
        value = secrets.get_secret_value(SecretId=arn)
    except Exception as exc:
        if not is_aws_error(exc):
            raise
        raise _aws(f"reading the tokens from secret {arn} (stack output TokensSecretArn)", exc, region,
                   endpoint_url) from None
    return parse_tokens(str(value.get("SecretString") or ""), arn)


def driver_endpoints(dep: AwsDeployment, admin_token: str, store_token: str, *, tls_ca: str = "") -> Endpoints:
    """The endpoints a driver of this deployment uses (the store-wide and admin tokens: a run's
    tasks get run-scoped ones, ``Endpoints.for_run``). ``tls_ca``: the deployment CA's PEM; each
    server is checked against it under the host name of its address (the stack's ``ServerName``,
    or 127.0.0.1 through a port forward: the deployment's certificate names both)."""
    return Endpoints(dep.metadata, dep.daemon, store_token, admin_token, dep.cos_url, tls_ca=tls_ca)


def check_address(addr: str, what: str, source: str, *, timeout_s: float = 5.0) -> None:
    """Refuse at once, naming the address and the way to reach it, a server the driver cannot
    connect to (``source``: where the address came from)."""
    host, port = parse_addr(addr)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise DeploymentError(f"cannot reach the {what} at {addr} ({source}): {why}; {REACH_HINT}") from None
