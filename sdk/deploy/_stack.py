"""Deploy a workflow to AWS as ONE CloudFormation stack, and its dry run.

``bundle(wds_path, ...)`` builds what a deployment is made of without AWS:
the template (``_template``), the task zip and the storage zip, and the
artifact keys (they carry each zip's SHA-256, so a changed zip changes the
Lambda's ``S3Key`` and CloudFormation updates the code). ``write_dry_run``
writes ``template.json``, ``task.zip`` and ``storage.zip`` to a directory.
``deploy_stack`` uploads the zips and the template to the artifact bucket,
creates the stack ``funcsion-<app>`` or updates it (a parameter not given
keeps its previous value; "No updates are to be performed" is
``unchanged``), waits with boto3's waiter and returns the outputs.

Every problem is a ``StackDeployError`` of one line naming the setting and
the fix: no subnets, a layer in another region, a missing artifact bucket,
TLS material that does not name ``ServerName`` (``_certs``), CloudFormation's
validation error, a stack left in ``ROLLBACK_COMPLETE``,
no credentials (``describe_aws_error``). Not here: the template itself
(``_template``), the CLI (``sdk/cli/deploy_workflow.py``).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import hdag
import wds
from storage_functions.deploy import build_zip

from ._aws_errors import describe_aws_error, is_aws_error
from ._certs import tls_problem
from ._template import CLEANUP_HANDLER, Artifacts, TemplateSettings, render_template, stack_name, task_functions
from ._zip import build_task_zip

__all__ = ["DRY_RUN_FILES", "StackBundle", "StackDeployError", "StackDeployment", "StackParameters", "bundle",
           "check_parameters", "deploy_stack", "write_dry_run"]

#: What ``write_dry_run`` writes.
DRY_RUN_FILES = ("template.json", "task.zip", "storage.zip")
_BAD_END = ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED", "DELETE_FAILED")


class StackDeployError(wds.FuncsionError):
    """A deployment setting is missing or wrong, or AWS refused a step; the message is one line."""


@dataclass(frozen=True)
class StackBundle:
    """What one deployment is made of, built without AWS."""

    graph: hdag.HDAG
    stack_name: str
    template: dict[str, Any]
    task_zip: bytes
    storage_zip: bytes
    artifacts: Artifacts

    @property
    def template_body(self) -> str:
        return json.dumps(self.template, separators=(",", ":"), sort_keys=True)

    @property
    def template_key(self) -> str:
        digest = hashlib.sha256(self.template_body.encode()).hexdigest()
        return f"funcsion/{self.stack_name}/template-{digest}.json"


def _key(stack: str, what: str, data: bytes) -> str:
    return f"funcsion/{stack}/{what}-{hashlib.sha256(data).hexdigest()}.zip"


def bundle(wds_path: str | Path, *, params: Mapping[str, int] | None = None, limits: wds.Limits | None = None,
           settings: TemplateSettings | None = None) -> StackBundle:
    """Parse the WDS, build both zips and render the template."""
    path = Path(wds_path)
    graph = hdag.build(wds.load(path, params=params, limits=limits))
    name = stack_name(graph.workflow.app)
    handlers = sorted({f.handler for f in graph.functions.values()} | {CLEANUP_HANDLER})
    task_zip, storage_zip = build_task_zip(path.parent, handlers), build_zip()  # exactly what the handlers import
    artifacts = Artifacts(_key(name, "task", task_zip), _key(name, "storage", storage_zip))
    return StackBundle(graph, name, render_template(graph, artifacts, settings), task_zip, storage_zip, artifacts)


def write_dry_run(b: StackBundle, out_dir: str | Path) -> dict[str, Any]:
    """Write ``DRY_RUN_FILES`` into ``out_dir`` (made if missing); returns a summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "template.json").write_text(json.dumps(b.template, indent=1) + "\n")
    (out / "task.zip").write_bytes(b.task_zip)
    (out / "storage.zip").write_bytes(b.storage_zip)
    return {"workflow": b.graph.key, "stack": b.stack_name, "out": str(out), "files": list(DRY_RUN_FILES),
            "artifacts": {"task": b.artifacts.task_key, "storage": b.artifacts.storage_key},
            "parameters": sorted(b.template["Parameters"])}


@dataclass(frozen=True)
class StackParameters:
    """The values given for the template's parameters; ``None`` (or empty) keeps a stack's previous
    value on update, and is an error on create where the parameter has no default."""

    artifact_bucket: str | None = None
    vpc_id: str | None = None
    subnet_ids: Sequence[str] = ()
    route_table_ids: Sequence[str] = ()
    cos_bucket: str | None = None
    cos_prefix: str | None = None
    task_layers: Sequence[str] = ()
    tls_ca: bytes | None = None  # PEM
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    server_name: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # any other parameter, by its template name

    def values(self) -> dict[str, str]:
        """The given parameters by template name (only those given)."""
        def b64(pem: bytes | None) -> str | None:
            return base64.b64encode(pem).decode() if pem else None

        out = {"ArtifactBucket": self.artifact_bucket, "VpcId": self.vpc_id,
               "SubnetIds": ",".join(self.subnet_ids) or None, "RouteTableIds": ",".join(self.route_table_ids) or None,
               "CosBucket": self.cos_bucket, "CosPrefix": self.cos_prefix,
               "TaskLayerArns": ",".join(self.task_layers) or None, "TlsCaCert": b64(self.tls_ca),
               "TlsServerCert": b64(self.tls_cert), "TlsServerKey": b64(self.tls_key),
               "ServerName": self.server_name, **self.extra}
        return {k: v for k, v in out.items() if v}


_FLAGS = {"ArtifactBucket": "--artifact-bucket BUCKET", "VpcId": "--vpc-id vpc-...",
          "SubnetIds": "--subnet subnet-... (repeatable: the private subnets the Lambdas run in)",
          "RouteTableIds": "--route-table rtb-... (repeatable: the subnets' route tables, for the S3 endpoint)",
          "CosBucket": "--cos s3://BUCKET/PREFIX (an existing bucket)",
          "TlsCaCert": "--tls-ca FILE (make one with `funcsion certs DIR`)",
          "TlsServerCert": "--tls-cert FILE (make one with `funcsion certs DIR`)",
          "TlsServerKey": "--tls-key FILE (make one with `funcsion certs DIR`)"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, f"--parameter {name}=VALUE")


def check_parameters(b: StackBundle, given: StackParameters, *, region: str, previous: Mapping[str, str] | None = None,
                     now: datetime.datetime | None = None) -> None:
    """What can be told before calling AWS: unknown parameters, a required one missing on
    create (``previous``: the parameters of an existing stack), layers outside ``region``
    or more than Lambda allows, TLS material that does not fit ``ServerName``."""
    previous = previous or {}
    declared = b.template["Parameters"]
    values = given.values()
    tls = {"--tls-ca": given.tls_ca, "--tls-cert": given.tls_cert, "--tls-key": given.tls_key}
    if any(tls.values()):
        if not all(tls.values()):
            raise StackDeployError(f"give all of --tls-ca, --tls-cert and --tls-key (or --tls-dir DIR), not only "
                                   f"{', '.join(k for k, v in tls.items() if v)}")
        server = values.get("ServerName") or previous.get("ServerName") or str(declared["ServerName"]["Default"])
        problem = tls_problem(given.tls_ca or b"", given.tls_cert or b"", given.tls_key or b"", server, now)
        if problem:
            raise StackDeployError(problem)
    for name in values:
        if name not in declared:
            raise StackDeployError(f"--parameter {name}: the template has no such parameter "
                                   f"(it has: {', '.join(sorted(declared))})")
    for sub in given.subnet_ids:
        if not sub.startswith("subnet-"):
            raise StackDeployError(f"--subnet {sub!r} is not a subnet id: give subnet-... ids of the VPC's private "
                                   "subnets")
    layers = [("--layer", arn) for arn in given.task_layers]
    for t in task_functions(b.graph, TemplateSettings()):
        layers += [(f"entry {t.entry!r} of {b.graph.workflow.source}", arn) for arn in t.layers]
        n = len(t.layers) + len(given.task_layers)
        if n > wds.MAX_LAYERS:
            raise StackDeployError(f"task Lambda {t.name} would get {n} layers ({len(given.task_layers)} from --layer, "
                                   f"{len(t.layers)} from entry {t.entry!r}); Lambda allows {wds.MAX_LAYERS}: "
                                   "merge layers")
    for where, arn in layers:
        at = wds.layer_arn_region(arn)
        if at is None:
            raise StackDeployError(f"{where}: {arn!r} is not a Lambda layer version ARN "
                                   "(arn:aws:lambda:<region>:<account>:layer:<name>:<version>)")
        if at != region:
            raise StackDeployError(f"{where}: layer {arn} is in region {at}, but this deploy is to {region}: "
                                   f"publish the layer in {region}, or deploy with --region {at}")
    for name, spec in declared.items():
        if "Default" not in spec and name not in values and name not in previous:
            what = "a new stack" if not previous else f"stack {b.stack_name}"
            raise StackDeployError(f"{name} is required for {what}: give {_flag(name)}")


@dataclass(frozen=True)
class StackDeployment:
    stack_name: str
    action: Literal["created", "updated", "unchanged"]
    outputs: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"stack": self.stack_name, "action": self.action, "outputs": dict(self.outputs)}


def _describe(cf: Any, name: str) -> dict[str, Any] | None:
    try:
        stacks = cf.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:
        if "does not exist" in str(exc):
            return None
        raise
    return dict(stacks[0]) if stacks else None


def _failure(cf: Any, name: str) -> str:
    """The first resource failure of the stack's latest operation, as ``LogicalId: reason``."""
    try:
        events = cf.describe_stack_events(StackName=name)["StackEvents"]
    except Exception as exc:  # the stack may be gone: the status says enough
        if is_aws_error(exc):
            return ""
        raise
    failed = [e for e in events if str(e.get("ResourceStatus", "")).endswith("_FAILED")
              and e.get("ResourceStatusReason")]
    if not failed:
        return ""
    first = failed[-1]  # events are newest first
    return f": {first.get('LogicalResourceId')}: {first['ResourceStatusReason']}"


def deploy_stack(b: StackBundle, given: StackParameters, *, region: str, cf_client: Any = None, s3_client: Any = None,
                 endpoint_url: str | None = None, wait: bool = True, delay_s: float = 10.0,
                 max_wait_s: float = 3600.0) -> StackDeployment:
    """Upload the zips and the template, create or update the stack, wait, return its outputs."""
    def failed(step: str, exc: BaseException) -> StackDeployError:
        return StackDeployError(f"{step}: {describe_aws_error(exc, region=region, endpoint_url=endpoint_url)}")

    try:
        import boto3

        cf = cf_client or boto3.client("cloudformation", region_name=region, endpoint_url=endpoint_url)
        s3 = s3_client or boto3.client("s3", region_name=region, endpoint_url=endpoint_url)
        current = _describe(cf, b.stack_name)
    except Exception as exc:
        if is_aws_error(exc):
            raise failed(f"reading stack {b.stack_name}", exc) from exc
        raise
    previous = {p["ParameterKey"]: p.get("ParameterValue", "") for p in (current or {}).get("Parameters", [])}
    if current is not None:
        status = str(current.get("StackStatus", ""))
        if status in _BAD_END:
            raise StackDeployError(f"stack {b.stack_name} is in {status} and cannot be updated: delete it "
                                   f"(aws cloudformation delete-stack --stack-name {b.stack_name} --region {region}) "
                                   "and deploy again")
        if status.endswith("_IN_PROGRESS"):
            raise StackDeployError(f"stack {b.stack_name} is busy ({status}): wait for it to finish "
                                   f"(aws cloudformation wait stack-update-complete --stack-name {b.stack_name}), then "
                                   "deploy again")
    check_parameters(b, given, region=region, previous=previous)
    values = given.values()
    bucket = values.get("ArtifactBucket") or previous.get("ArtifactBucket", "")
    _upload(s3, b, bucket, region, failed)
    params = [_parameter(k, values) for k, spec in b.template["Parameters"].items()
              if k in values or (k in previous and not _is_default(spec, previous[k]))]
    url = f"https://{bucket}.s3.{region}.amazonaws.com/{b.template_key}"
    call: dict[str, Any] = {"StackName": b.stack_name, "TemplateURL": url, "Parameters": params,
                            "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"]}
    try:
        if current is None:
            cf.create_stack(**call, Tags=[{"Key": "funcsion:workflow", "Value": b.graph.key}])
            action: Literal["created", "updated", "unchanged"] = "created"
        else:
            try:
                cf.update_stack(**call)
                action = "updated"
            except Exception as exc:
                if "No updates are to be performed" not in str(exc):
                    raise
                action = "unchanged"
    except Exception as exc:
        if is_aws_error(exc) and "ValidationError" in str(exc):
            raise StackDeployError(f"CloudFormation refused stack {b.stack_name}: "
                                   f"{getattr(exc, 'response', {}).get('Error', {}).get('Message', exc)}") from exc
        if is_aws_error(exc):
            raise failed(f"{'creating' if current is None else 'updating'} stack {b.stack_name}", exc) from exc
        raise
    if wait and action != "unchanged":
        _wait(cf, b.stack_name, action, delay_s, max_wait_s)
    try:
        final = _describe(cf, b.stack_name) or {}
    except Exception as exc:
        if is_aws_error(exc):
            raise failed(f"reading stack {b.stack_name}", exc) from exc
        raise
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in final.get("Outputs", [])}
    return StackDeployment(b.stack_name, action, outputs)


def _is_default(spec: Mapping[str, Any], value: str) -> bool:
    """Whether a stack's value of a parameter is its default: left out of an update, it stays so (and a
    template's new default applies). An SSM-typed parameter counts as one: CloudFormation resolves its
    name again at every update anyway."""
    if str(spec["Type"]).startswith("AWS::SSM::"):
        return True
    return "Default" in spec and not spec.get("NoEcho") and str(spec["Default"]) == value


def _parameter(name: str, values: Mapping[str, str]) -> dict[str, Any]:
    """A given value, else the stack's previous one (a NoEcho value shows as ``****``, a list's shape
    varies: ``UsePreviousValue`` keeps it exactly)."""
    if name in values:
        return {"ParameterKey": name, "ParameterValue": values[name]}
    return {"ParameterKey": name, "UsePreviousValue": True}


def _upload(s3: Any, b: StackBundle, bucket: str, region: str, failed: Any) -> None:
    """Put the zips and the template into the artifact bucket, each once (its key holds its hash)."""
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise StackDeployError(f"artifact bucket {bucket!r} does not exist: create it in {region} "
                                   f"(aws s3 mb s3://{bucket} --region {region}) or give --artifact-bucket an "
                                   "existing one") from exc
        if is_aws_error(exc):
            raise failed(f"reading artifact bucket {bucket}", exc) from exc
        raise
    items = [(b.artifacts.task_key, b.task_zip), (b.artifacts.storage_key, b.storage_zip),
             (b.template_key, b.template_body.encode())]
    for key, body in items:
        try:
            try:
                s3.head_object(Bucket=bucket, Key=key)
                continue  # the same hash: the same bytes
            except Exception as exc:
                if str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) not in ("404", "NoSuchKey",
                                                                                                "NotFound"):
                    raise
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        except Exception as exc:
            if is_aws_error(exc):
                raise failed(f"uploading s3://{bucket}/{key}", exc) from exc
            raise


def _wait(cf: Any, name: str, action: str, delay_s: float, max_wait_s: float) -> None:
    waiter = cf.get_waiter("stack_create_complete" if action == "created" else "stack_update_complete")
    delay = max(1, int(delay_s))
    started = time.monotonic()
    try:
        waiter.wait(StackName=name, WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(max_wait_s // delay))})
    except Exception as exc:
        status = str((_describe(cf, name) or {}).get("StackStatus", "gone"))
        waited = time.monotonic() - started
        if status.endswith("_IN_PROGRESS"):
            raise StackDeployError(f"stack {name} is still {status} after {waited:.0f} s: watch it in the "
                                   "CloudFormation console, then deploy again") from exc
        hint = (f"; delete it (aws cloudformation delete-stack --stack-name {name}) and deploy again"
                if status == "ROLLBACK_COMPLETE" else "")
        raise StackDeployError(f"stack {name} ended in {status}{_failure(cf, name)}{hint}") from exc
