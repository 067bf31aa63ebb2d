"""One CloudFormation template for a whole AWS deployment of a workflow.

``render_template(graph, artifacts, settings)`` returns the template (a dict;
plain CloudFormation, no transform) holding:

- the storage Lambdas ``<prefix>0`` .. ``<prefix>N-1`` (N a render-time
  setting: plain CloudFormation has no loops) with reserved concurrency and an
  ``EventInvokeConfig`` of ``MaximumRetryAttempts: 0`` (Lambda's two
  asynchronous retries would re-run a failed invocation);
- one task Lambda per WDS entry and the cleanup Lambda, each with the entry's
  ``memory_mb``/``timeout_s``/``layers`` (else the settings' defaults) on top of
  the ``TaskLayerArns``;
- every Lambda in the VPC (``SubnetIds``, the Lambdas' security group), code
  from ``ArtifactBucket`` under keys that carry the zip's hash, a log group
  with ``LogRetentionDays``;
- the server host (``_host``: an EC2 instance running the metadata server and
  the daemon), its security group (inbound: the two server ports from the
  Lambdas' group only, and from ``DriverCidr`` when one is given), a Route 53
  private zone naming it ``ServerName``;
- the S3 gateway endpoint on ``RouteTableIds``; the TLS secret (from the
  NoEcho parameters) and the tokens secret (generated, never a parameter);
- least-privilege roles (``_iam``) and the state machine (``asl.build_asl``,
  Lambda ARNs by ``Fn::Sub``);
- an EventBridge rule on the state machine's execution status changes (SUCCEEDED,
  FAILED, TIMED_OUT, ABORTED) invoking the status-cleanup Lambda
  (``sdk._offload_cleanup``, with its permission): the generated definition's Catch
  ends a failed run, but an execution that times out or is aborted runs no state of
  its own, so the rule ends its run (one that already ended is left alone);
- ``OUTPUTS``, a contract ``funcsion run --target aws`` reads.

Pure: no boto3. Not here: uploading the zips and creating the stack
(``_stack``), the roles' policy documents (``_iam``), the host's boot script
(``_host``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import hdag
import wds
from storage_functions.deploy import RUNTIME_HANDLER
from storage_functions.protocol import DEFAULT_DAEMON_PORT

from ._host import user_data
from ._iam import lambda_role, server_role, state_machine_role
from .asl import AslOptions, build_asl, lambda_name

__all__ = ["Artifacts", "CLEANUP_HANDLER", "arn_mark", "base_resources", "state_machine_resources", "whole_template", "ENDED_STATUSES", "OUTPUTS", "STATUS_CLEANUP_HANDLER", "status_rule", "TemplateSettings", "TaskFunction", "render_template",
           "stack_name", "storage_prefix", "task_functions"]

CLEANUP_HANDLER = "sdk._cleanup:handler"
#: The Lambda the status-change rule invokes (``status_rule``), named ``<app>-funcsion-status-cleanup``.
STATUS_CLEANUP_HANDLER = "sdk._offload_cleanup.handler"
STATUS_CLEANUP_ENTRY = "funcsion-status-cleanup"
#: The execution statuses that end a run (``sdk._offload_cleanup.ENDED``).
ENDED_STATUSES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
#: The stack's outputs (a contract: ``funcsion run --target aws`` reads them by these keys).
OUTPUTS = ("StateMachineArn", "MetadataAddress", "DaemonAddress", "ServerName", "CosUrl", "TokensSecretArn",
           "StorageFunctionPrefix")
_UNSAFE_STACK = re.compile(r"[^A-Za-z0-9-]")
_AL2023 = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
_RETENTION = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288,
              3653]


def stack_name(app: str) -> str:
    """``funcsion-<app>``, every character outside ``[A-Za-z0-9-]`` a ``-``, at most 128 characters."""
    return _UNSAFE_STACK.sub("-", f"funcsion-{app}")[:128]


def storage_prefix(app: str) -> str:
    """The name prefix of a stack's storage Lambdas (``<prefix><index>`` stays within 64 characters)."""
    return f"{stack_name(app)[:48].rstrip('-')}-storage-"


@dataclass(frozen=True, slots=True)
class Artifacts:
    """Where the zips are in ``ArtifactBucket``: keys that carry the zip's hash, so a changed zip is
    a changed property and CloudFormation updates the code."""

    task_key: str
    storage_key: str


@dataclass(frozen=True, slots=True)
class TemplateSettings:
    """What is fixed when the template is rendered (the rest are the template's Parameters)."""

    storage_functions: int = 12
    storage_memory_mb: int = 1024  # the StorageMemoryMb parameter's default
    task_memory_mb: int = 512  # for an entry that sets no memory_mb
    task_timeout_s: int = 300
    runtime: str = "python3.12"
    metadata_port: int = 7917
    daemon_port: int = DEFAULT_DAEMON_PORT
    max_concurrency: int = 0  # of each Map state; 0: no limit


@dataclass(frozen=True, slots=True)
class TaskFunction:
    """One task Lambda: a WDS entry (or the cleanup task) and what its Lambda gets."""

    entry: str
    logical_id: str
    name: str
    handler: str  # module.function, as Lambda wants it
    memory_mb: int
    timeout_s: int
    layers: tuple[str, ...]


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text) if part)


def task_functions(graph: hdag.HDAG, settings: TemplateSettings) -> list[TaskFunction]:
    """The task Lambdas of a workflow, one per WDS entry (replicas share it), then the cleanup Lambda."""
    app = graph.workflow.app
    specs: dict[str, wds.FunctionSpec] = {}
    for f in graph.workflow.functions.values():
        specs.setdefault(f.entry, f)
    out: list[TaskFunction] = []
    used: set[str] = set()
    entries: list[tuple[str, str, wds.LambdaSettings]] = [(e, f.handler_ref, f.lambda_settings)
                                                           for e, f in specs.items()]
    entries.append((wds.CLEANUP_ENTRY, CLEANUP_HANDLER, wds.LambdaSettings()))
    for entry, handler, ls in entries:
        name = lambda_name(app, entry)
        base = "Task" + (_camel(name[len(app):]) or "Fn")
        logical, k = base[:200], 2
        while logical in used:  # names differ, but may after dropping '-' and '_'
            logical, k = f"{base[:200]}{k}", k + 1
        used.add(logical)
        out.append(TaskFunction(entry, logical, name, handler.replace(":", "."),
                                ls.memory_mb or settings.task_memory_mb, ls.timeout_s or settings.task_timeout_s,
                                ls.layers))
    return out


def _parameters(settings: TemplateSettings) -> dict[str, Any]:
    def text(description: str, **kw: Any) -> dict[str, Any]:
        return {"Type": "String", "Description": description, **kw}

    b64_pem = {"NoEcho": True, "MinLength": 1, "AllowedPattern": "^[A-Za-z0-9+/=]+$",
               "ConstraintDescription": "base64 of a PEM file (funcsion deploy does it)"}
    return {
        "VpcId": {"Type": "AWS::EC2::VPC::Id", "Description": "the VPC of the Lambdas and the server host"},
        "SubnetIds": {"Type": "List<AWS::EC2::Subnet::Id>",
                      "Description": "private subnets of the Lambdas; the host runs in the first"},
        "RouteTableIds": {"Type": "CommaDelimitedList",
                          "Description": "route tables of those subnets (for the S3 gateway endpoint)"},
        "TaskLayerArns": {"Type": "CommaDelimitedList", "Default": "",
                          "Description": "layer version ARNs every task Lambda gets (thrift, pyeclib, msgpack, "
                                         "aws-lambda-powertools)"},
        "ArtifactBucket": text("the bucket funcsion deploy uploaded the zips to", MinLength=3, MaxLength=63),
        "CosBucket": text("an existing bucket for COS (durable copies, outputs); it outlives the stack",
                          MinLength=3, MaxLength=63),
        "CosPrefix": text("the key prefix of COS in CosBucket", Default="funcsion", MinLength=1,
                          AllowedPattern="^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$",
                          ConstraintDescription="a key prefix without leading or trailing '/'"),
        "ServerAmiId": {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": _AL2023,
                        "Description": "the server host's image (an SSM parameter naming an Amazon Linux 2023 AMI)"},
        "ServerInstanceType": text("the server host's instance type", Default="m6i.large"),
        "ServerDiskGb": {"Type": "Number", "Default": 100, "MinValue": 8, "MaxValue": 16384,
                         "Description": "the host's disk (the daemon's persistent buffer, the metadata journal)"},
        "ServerName": text("the DNS name of the servers (their TLS certificate names it); a Route 53 private "
                           "zone in the VPC points it at the host", Default="funcsion.internal",
                           AllowedPattern="^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$",
                           ConstraintDescription="a lower-case DNS name with at least one dot"),
        "ServerPackage": text("what the host pip-installs for funcsion (a requirement or a wheel URL)",
                              Default="funcsion"),
        "TlsCaCert": text("the CA certificate, base64 of its PEM", **b64_pem),
        "TlsServerCert": text("the servers' certificate for ServerName, base64 of its PEM", **b64_pem),
        "TlsServerKey": text("the servers' private key, base64 of its PEM", **b64_pem),
        "StorageMemoryMb": {"Type": "Number", "Default": settings.storage_memory_mb, "MinValue": 128,
                            "MaxValue": 10240, "Description": "memory of each storage Lambda (MB)"},
        "StorageConcurrency": {"Type": "Number", "Default": 1, "MinValue": 1, "MaxValue": 1000,
                               "Description": "reserved concurrency of each storage Lambda (an instance each)"},
        "DriverCidr": text("a CIDR the drivers (funcsion run) reach the two server ports from; empty: none, "
                           "only the Lambdas", Default="",
                           AllowedPattern="^$|^([0-9]{1,3}\\.){3}[0-9]{1,3}/[0-9]{1,2}$",
                           ConstraintDescription="empty, or an IPv4 CIDR such as 10.0.0.0/16"),
        "LogRetentionDays": {"Type": "Number", "Default": 14, "AllowedValues": _RETENTION,
                             "Description": "how long the Lambdas' and the servers' logs are kept"},
    }


def _vpc_config() -> dict[str, Any]:
    return {"SubnetIds": {"Ref": "SubnetIds"}, "SecurityGroupIds": [{"Ref": "LambdaSecurityGroup"}]}


def _function(logical: str, name: str, *, handler: str, role: str, code_key: str, memory: Any, timeout: int,
              runtime: str, description: str, env: dict[str, str] | None = None,
              layers: Any = None) -> dict[str, Any]:
    """A Lambda and its log group (the function waits for it, so Lambda never makes one unbounded)."""
    props: dict[str, Any] = {
        "FunctionName": name, "Handler": handler, "Runtime": runtime, "MemorySize": memory, "Timeout": timeout,
        "Role": {"Fn::GetAtt": [role, "Arn"]}, "Description": description, "VpcConfig": _vpc_config(),
        "Code": {"S3Bucket": {"Ref": "ArtifactBucket"}, "S3Key": code_key},
    }
    if env:
        props["Environment"] = {"Variables": env}
    if layers is not None:
        props["Layers"] = layers
    return {
        f"{logical}Logs": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
                           "Properties": {"LogGroupName": f"/aws/lambda/{name}",
                                          "RetentionInDays": {"Ref": "LogRetentionDays"}}},
        logical: {"Type": "AWS::Lambda::Function", "DependsOn": [f"{logical}Logs"], "Properties": props},
    }


def _layers(own: Sequence[str]) -> dict[str, Any]:
    """``TaskLayerArns`` (when given) followed by the entry's own layers."""
    shared = {"Fn::Split": [",", {"Fn::Join": [",", [{"Fn::Join": [",", {"Ref": "TaskLayerArns"}]}, *own]]}]}
    return {"Fn::If": ["HasTaskLayers", shared, list(own) if own else {"Ref": "AWS::NoValue"}]}


def _network() -> dict[str, Any]:
    everywhere = [{"IpProtocol": "-1", "CidrIp": "0.0.0.0/0", "Description": "servers, S3 and AWS APIs"}]
    return {
        "LambdaSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": "funcsion Lambdas: no inbound; they dial the servers and S3",
            "VpcId": {"Ref": "VpcId"}, "SecurityGroupEgress": everywhere}},
        "ServerSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": "funcsion servers: the metadata and daemon ports from the Lambdas only",
            "VpcId": {"Ref": "VpcId"}, "SecurityGroupEgress": everywhere}},
        "S3Endpoint": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {
            "VpcEndpointType": "Gateway", "VpcId": {"Ref": "VpcId"},
            "ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"},
            "RouteTableIds": {"Ref": "RouteTableIds"}}},
        "ServerZone": {"Type": "AWS::Route53::HostedZone", "Properties": {
            "Name": {"Ref": "ServerName"},
            "HostedZoneConfig": {"Comment": "funcsion: the servers' name inside the VPC"},
            "VPCs": [{"VPCId": {"Ref": "VpcId"}, "VPCRegion": {"Ref": "AWS::Region"}}]}},
        "ServerRecord": {"Type": "AWS::Route53::RecordSet", "Properties": {
            "HostedZoneId": {"Ref": "ServerZone"}, "Name": {"Ref": "ServerName"}, "Type": "A", "TTL": "60",
            "ResourceRecords": [{"Fn::GetAtt": ["Server", "PrivateIp"]}]}},
    }


def _ingress(settings: TemplateSettings) -> dict[str, Any]:
    """The server ports from the Lambdas' group, and from ``DriverCidr`` when one is given."""
    out = {}
    for what, port in (("Metadata", settings.metadata_port), ("Daemon", settings.daemon_port)):
        rule = {"GroupId": {"Fn::GetAtt": ["ServerSecurityGroup", "GroupId"]}, "IpProtocol": "tcp",
                "FromPort": port, "ToPort": port}
        out[f"Server{what}Ingress"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
            **rule, "SourceSecurityGroupId": {"Fn::GetAtt": ["LambdaSecurityGroup", "GroupId"]},
            "Description": f"{what.lower()} port from the funcsion Lambdas"}}
        out[f"Server{what}DriverIngress"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Condition": "HasDriverCidr",
                                             "Properties": {**rule, "CidrIp": {"Ref": "DriverCidr"},
                                                            "Description": f"{what.lower()} port from the drivers"}}
    return out


def _secrets() -> dict[str, Any]:
    def generated(what: str) -> dict[str, Any]:
        return {"Type": "AWS::SecretsManager::Secret", "Properties": {
            "Description": f"funcsion {what} (generated; copied into the tokens secret)",
            "GenerateSecretString": {"PasswordLength": 48, "ExcludePunctuation": True}}}

    tokens = ('{"admin_token": "{{resolve:secretsmanager:${AdminToken}}}", '
              '"store_token": "{{resolve:secretsmanager:${StoreToken}}}"}')
    tls = '{"ca_cert": "${TlsCaCert}", "server_cert": "${TlsServerCert}", "server_key": "${TlsServerKey}"}'
    return {
        "AdminToken": generated("admin token"),
        "StoreToken": generated("store token"),
        "TokensSecret": {"Type": "AWS::SecretsManager::Secret", "Properties": {
            "Description": "funcsion tokens: admin_token and store_token (drivers and the servers read it)",
            "SecretString": {"Fn::Sub": tokens}}},
        "TlsSecret": {"Type": "AWS::SecretsManager::Secret", "Properties": {
            "Description": "funcsion TLS: the CA, the servers' certificate and key (base64 PEM)",
            "SecretString": {"Fn::Sub": tls}}},
    }


def _server(settings: TemplateSettings, prefix: str) -> dict[str, Any]:
    return {
        "ServerProfile": {"Type": "AWS::IAM::InstanceProfile", "Properties": {"Roles": [{"Ref": "ServerRole"}]}},
        "ServerLogs": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
                       "Properties": {"LogGroupName": {"Fn::Sub": "/funcsion/${AWS::StackName}/server"},
                                      "RetentionInDays": {"Ref": "LogRetentionDays"}}},
        "Server": {"Type": "AWS::EC2::Instance", "Properties": {
            "ImageId": {"Ref": "ServerAmiId"}, "InstanceType": {"Ref": "ServerInstanceType"},
            "IamInstanceProfile": {"Ref": "ServerProfile"},
            "SubnetId": {"Fn::Select": [0, {"Ref": "SubnetIds"}]},
            "SecurityGroupIds": [{"Fn::GetAtt": ["ServerSecurityGroup", "GroupId"]}],
            "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
                "VolumeSize": {"Ref": "ServerDiskGb"}, "VolumeType": "gp3", "Encrypted": True}}],
            "UserData": user_data(metadata_port=settings.metadata_port, daemon_port=settings.daemon_port,
                                  function_prefix=prefix),
            "Tags": [{"Key": "Name", "Value": {"Fn::Sub": "${AWS::StackName}-server"}}]}},
    }


#: A Lambda's place in the definition until ``_definition_sub`` makes it ``${<logical id>.Arn}``.
_ARN_MARK = "funcsion-arn-of:{}"
_ARN_MARK_RE = re.compile(r"funcsion-arn-of:([A-Za-z0-9]+)")


def _definition_sub(definition: dict[str, Any]) -> str:
    """The state machine as an ``Fn::Sub`` string: a ``${`` of its own (a stage name may hold one)
    escaped as ``${!``, then each Lambda's mark made ``${<id>.Arn}``."""
    text = json.dumps(definition, indent=1).replace("${", "${!")
    return _ARN_MARK_RE.sub(lambda m: f"${{{m.group(1)}.Arn}}", text)


_SUB_NAME = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


def _refs(node: Any) -> set[str]:
    """The logical ids a resource's properties name (Ref, Fn::GetAtt, Fn::Sub, DependsOn)."""
    if isinstance(node, list):
        return set().union(*map(_refs, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, value in node.items():
        if key == "Ref" and isinstance(value, str):
            found.add(value)
        elif key == "Fn::GetAtt":
            found.add(value[0])
        elif key == "Fn::Sub":
            found.update(_SUB_NAME.findall(value if isinstance(value, str) else value[0]))
        elif key == "DependsOn":
            found.update([value] if isinstance(value, str) else value)
        found |= _refs(value)
    return found


def _dependency_order(res: dict[str, Any]) -> dict[str, Any]:
    """The resources, each after those it names (a stable depth-first order): CloudFormation does not
    care, but moto's stack update resolves references in template order."""
    out: dict[str, Any] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in out or name not in res:
            return
        if name in path:
            raise ValueError(f"the template's resources form a cycle: {' -> '.join(path + (name,))}")
        for dep in sorted(_refs(res[name]) - {name}):
            visit(dep, path + (name,))
        out[name] = res[name]

    for name in res:
        visit(name, ())
    return out


def status_rule(state_machine: str, target: str) -> dict[str, Any]:
    """An EventBridge rule on the status changes of state machine ``state_machine`` (a logical
    id) that end an execution, invoking Lambda ``target`` (a logical id), and the permission
    that lets EventBridge invoke it (for this rule only)."""
    return {
        "StatusCleanupRule": {"Type": "AWS::Events::Rule", "Properties": {
            "Description": "funcsion: end the run of every execution that ends, however it ends",
            "State": "ENABLED",
            "EventPattern": {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
                             "detail": {"status": list(ENDED_STATUSES), "stateMachineArn": [{"Ref": state_machine}]}},
            "Targets": [{"Id": "funcsion-status-cleanup", "Arn": {"Fn::GetAtt": [target, "Arn"]}}]}},
        "StatusCleanupPermission": {"Type": "AWS::Lambda::Permission", "Properties": {
            "Action": "lambda:InvokeFunction", "FunctionName": {"Ref": target}, "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": ["StatusCleanupRule", "Arn"]}}},
    }


def render_template(graph: hdag.HDAG, artifacts: Artifacts, settings: TemplateSettings | None = None) -> dict[str, Any]:
    """The stack's template (``json.dumps`` it for CloudFormation); see the module docstring."""
    settings = settings or TemplateSettings()
    app = graph.workflow.app
    prefix = storage_prefix(app)
    tasks = task_functions(graph, settings)
    res, storage_ids = base_resources(settings, artifacts, prefix)
    for t in tasks:
        res.update(_function(t.logical_id, t.name, handler=t.handler, role="TaskRole", code_key=artifacts.task_key,
                             memory=t.memory_mb, timeout=t.timeout_s, runtime=settings.runtime,
                             description=f"funcsion {graph.key} {t.entry}"[:256],
                             env={"FUNCSION_WORKFLOW": graph.key}, layers=_layers(t.layers)))
    res.update(_function("StatusCleanup", lambda_name(app, STATUS_CLEANUP_ENTRY), handler=STATUS_CLEANUP_HANDLER,
                         role="TaskRole", code_key=artifacts.task_key, memory=settings.task_memory_mb,
                         timeout=settings.task_timeout_s,
                         runtime=settings.runtime, description=f"funcsion {graph.key}: end runs of ended executions"[:256],
                         layers=_layers(())))
    by_entry = {t.entry: t.logical_id for t in tasks}
    definition = build_asl(graph, lambda e: _ARN_MARK.format(by_entry[e]), _ARN_MARK.format(by_entry[wds.CLEANUP_ENTRY]),
                           AslOptions(max_concurrency=settings.max_concurrency))
    res.update(state_machine_resources(
        re.sub(r"[^A-Za-z0-9_-]", "-", f"funcsion-{app}-{graph.workflow.workflow_id}")[:80], definition,
        [t.logical_id for t in tasks], storage_ids))
    return whole_template(f"funcsion deployment of workflow {graph.key}: storage and task Lambdas in a VPC, the "
                          "server host, the state machine", settings, res, prefix)


def base_resources(settings: TemplateSettings, artifacts: Artifacts, prefix: str) -> tuple[dict[str, Any], list[str]]:
    """What every deployment holds whatever its state machine: the network, the servers' ingress,
    the secrets, the server host and the storage Lambdas ``<prefix><i>``; returns the resources
    and the storage Lambdas' logical ids."""
    storage_ids = [f"Storage{i}" for i in range(settings.storage_functions)]
    res: dict[str, Any] = {**_network(), **_ingress(settings), **_secrets(), **_server(settings, prefix)}
    for i, logical in enumerate(storage_ids):
        res.update(_function(logical, f"{prefix}{i}", handler=RUNTIME_HANDLER, role="StorageRole",
                             code_key=artifacts.storage_key, memory={"Ref": "StorageMemoryMb"}, timeout=900,
                             runtime=settings.runtime, description="funcsion storage function (SION runtime)"))
        res[logical]["Properties"]["ReservedConcurrentExecutions"] = {"Ref": "StorageConcurrency"}
        res[f"{logical}InvokeConfig"] = {"Type": "AWS::Lambda::EventInvokeConfig", "Properties": {
            "FunctionName": {"Ref": logical}, "Qualifier": "$LATEST", "MaximumRetryAttempts": 0}}
    return res, storage_ids


def state_machine_resources(name: str, definition: dict[str, Any], task_ids: Sequence[str],
                            storage_ids: Sequence[str]) -> dict[str, Any]:
    """The roles, the state machine ``name`` of ``definition`` (where ``arn_mark(<logical id>)``
    stands for a Lambda's ARN) invoking the task Lambdas ``task_ids``, and the status rule with
    its cleanup Lambda's permission (the ``StatusCleanup`` Lambda itself is the caller's)."""
    return {
        **status_rule("StateMachine", "StatusCleanup"),
        "TaskRole": lambda_role([*task_ids, "StatusCleanup"], s3=False),
        "StorageRole": lambda_role(storage_ids, s3=True),
        "ServerRole": server_role(storage_ids),
        "StateMachineRole": state_machine_role(list(task_ids)),
        "StateMachine": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
            "StateMachineName": name, "RoleArn": {"Fn::GetAtt": ["StateMachineRole", "Arn"]},
            "DefinitionString": {"Fn::Sub": _definition_sub(definition)}}},
    }


def arn_mark(logical_id: str) -> str:
    """What stands for Lambda ``logical_id``'s ARN in a definition ``state_machine_resources`` takes."""
    return _ARN_MARK.format(logical_id)


def whole_template(description: str, settings: TemplateSettings, res: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The template around ``res``: the parameters, conditions, resources in dependency order and
    the ``OUTPUTS`` contract."""
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": description,
        "Parameters": _parameters(settings),
        "Conditions": {
            "HasTaskLayers": {"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "TaskLayerArns"}]}, ""]}]},
            "HasDriverCidr": {"Fn::Not": [{"Fn::Equals": [{"Ref": "DriverCidr"}, ""]}]}},
        "Resources": _dependency_order(res),
        "Outputs": {
            "StateMachineArn": {"Value": {"Ref": "StateMachine"}},
            "MetadataAddress": {"Value": {"Fn::Sub": f"${{ServerName}}:{settings.metadata_port}"}},
            "DaemonAddress": {"Value": {"Fn::Sub": f"${{ServerName}}:{settings.daemon_port}"}},
            "ServerName": {"Value": {"Ref": "ServerName"}},
            "CosUrl": {"Value": {"Fn::Sub": "s3://${CosBucket}/${CosPrefix}"}},
            "TokensSecretArn": {"Value": {"Ref": "TokensSecret"}},
            "StorageFunctionPrefix": {"Value": prefix},
        },
    }
