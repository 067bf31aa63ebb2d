"""One CloudFormation stack for a whole AWS deployment: the templates of the
three examples pass cfn-lint; the stack is created in moto's CloudFormation
and its resources and their wiring are checked (VPC, security groups, the S3
endpoint, least-privilege roles, the server host, the state machine,
outputs); an update with a changed setting updates; bad settings fail at
deploy with one line naming the setting and the fix.

What moto's CloudFormation does not keep is asserted on the rendered
template instead, and says so: ``AWS::SecretsManager::Secret`` and
``AWS::Lambda::EventInvokeConfig`` are not modelled (moto skips them, so the
``TokensSecretArn`` output is missing there), and a function's ``Layers``
and an instance's ``SecurityGroupIds`` are dropped.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sdk.deploy import OUTPUTS, StackDeployError, StackParameters, TemplateSettings, bundle, deploy_stack, stack_name
from sdk.deploy._iam import S3_OBJECT_ACTIONS
from sdk.deploy._stack import StackBundle

REGION = "us-east-1"
LAYER = f"arn:aws:lambda:{REGION}:123456789012:layer:funcsion-deps:1"  # published in the fixture
#: cfn-lint findings accepted on purpose (rule id -> why). None today.
CFN_LINT_IGNORED: dict[str, str] = {}


def make_tls(*names: str, days: int = 30, ca_key: Any = None) -> tuple[bytes, bytes, bytes]:
    """(CA, server certificate, server key) PEMs, the certificate naming ``names`` (as `funcsion certs` does)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ca_key or ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "funcsion test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


TLS = make_tls("funcsion.internal", "127.0.0.1")


def small(path: Path, **kw: Any) -> StackBundle:
    return bundle(path, settings=TemplateSettings(storage_functions=3), **kw)


@pytest.mark.parametrize("example", ["wordcount", "gg_compile", "video"])
def test_cfn_lint_passes_on_the_examples_templates(example_paths: dict[str, Path], example: str) -> None:
    from cfnlint.api import ManualArgs, lint

    b = bundle(example_paths[example])  # the config's defaults: 12 storage functions
    matches = lint(json.dumps(b.template), config=ManualArgs(regions=[REGION]))
    found = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id not in CFN_LINT_IGNORED]
    assert found == []


def test_stack_name_rule() -> None:
    assert stack_name("word-count") == "funcsion-word-count"
    assert stack_name("a.b_c d/é") == "funcsion-a-b-c-d--"
    assert stack_name("x" * 300) == ("funcsion-" + "x" * 300)[:128]


@dataclasses.dataclass
class Account:
    vpc: str
    subnets: list[str]
    route_table: str

    def parameters(self, **kw: Any) -> StackParameters:
        base: dict[str, Any] = {
            "artifact_bucket": "artifacts", "vpc_id": self.vpc, "subnet_ids": self.subnets,
            "route_table_ids": [self.route_table], "cos_bucket": "cos", "cos_prefix": "wc/data",
            "tls_ca": TLS[0], "tls_cert": TLS[1], "tls_key": TLS[2]}
        return StackParameters(**{**base, **kw})


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[Account]:
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", REGION)):
        monkeypatch.setenv(k, v)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not supported by moto's CloudFormation", category=UserWarning)
        with mock_aws():
            ec2 = boto3.client("ec2", region_name=REGION)
            vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
            subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{k}.0/24")["Subnet"]["SubnetId"] for k in (1, 2)]
            rtb = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
            s3 = boto3.client("s3", region_name=REGION)
            for bucket in ("artifacts", "cos"):
                s3.create_bucket(Bucket=bucket)
            published = boto3.client("lambda", region_name=REGION).publish_layer_version(
                LayerName="funcsion-deps", Content={"ZipFile": b"PK\x05\x06" + bytes(18)})  # an empty zip
            assert published["LayerVersionArn"] == LAYER  # moto's stack update refuses an unknown layer
            yield Account(vpc, subnets, rtb)


def policy(role: str) -> list[dict[str, Any]]:
    """The statements of a stack role's inline policy (moto returns it as a Python literal)."""
    iam = boto3.client("iam", region_name=REGION)
    doc = iam.get_role_policy(RoleName=role, PolicyName="funcsion")["PolicyDocument"]
    doc = ast.literal_eval(doc) if isinstance(doc, str) else doc
    return [dict(s) for s in doc["Statement"]]


def actions(statements: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for s in statements:
        out.update([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    return out


def resources(statements: list[dict[str, Any]], action: str) -> list[str]:
    out: list[str] = []
    for s in statements:
        acts = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        if action in acts:
            out += [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
    return out


def task_arns(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["Parameters"]["FunctionName"]} if node.get("Type") == "Task" else set()
        return found.union(*map(task_arns, node.values())) if node else found
    if isinstance(node, list):
        return set().union(*map(task_arns, node)) if node else set()
    return set()


def test_the_stack_in_moto_is_wired(example_paths: dict[str, Path], account: Account) -> None:
    b = small(example_paths["wordcount"])
    dep = deploy_stack(b, account.parameters(task_layers=[LAYER]), region=REGION, delay_s=1)
    assert (dep.stack_name, dep.action) == ("funcsion-word-count", "created")
    prefix = "funcsion-word-count-storage-"
    assert dep.outputs == {
        "StateMachineArn": f"arn:aws:states:{REGION}:123456789012:stateMachine:funcsion-word-count-1",
        "MetadataAddress": "funcsion.internal:7917", "DaemonAddress": "funcsion.internal:7918",
        "ServerName": "funcsion.internal", "CosUrl": "s3://cos/wc/data", "StorageFunctionPrefix": prefix}
    # moto does not model secrets: the tokens output is on the template, a Ref of a generated secret
    assert set(b.template["Outputs"]) == set(OUTPUTS)
    assert b.template["Outputs"]["TokensSecretArn"] == {"Value": {"Ref": "TokensSecret"}}
    assert "{{resolve:secretsmanager:${StoreToken}}}" in b.template["Resources"]["TokensSecret"]["Properties"][
        "SecretString"]["Fn::Sub"]
    assert all("GenerateSecretString" in b.template["Resources"][k]["Properties"] for k in ("AdminToken", "StoreToken"))
    assert not any("token" in p.lower() for p in b.template["Parameters"])

    cf = boto3.client("cloudformation", region_name=REGION)
    ids = {r["LogicalResourceId"]: r["PhysicalResourceId"]
           for r in cf.list_stack_resources(StackName=dep.stack_name)["StackResourceSummaries"]}
    lam = boto3.client("lambda", region_name=REGION)
    storage = [f"{prefix}{i}" for i in range(3)]
    tasks = ["word-count-splitter", "word-count-mapper", "word-count-reducer", "word-count-merger",
             "word-count-funcsion-cleanup"]
    status = "word-count-funcsion-status-cleanup"   # invoked by the status-change rule, not the state machine
    deployed = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
    assert deployed == set(storage + tasks + [status])
    for name in storage + tasks + [status]:
        fn = lam.get_function(FunctionName=name)
        vpc = fn["Configuration"]["VpcConfig"]
        assert (sorted(vpc["SubnetIds"]), vpc["SecurityGroupIds"]) == (sorted(account.subnets),
                                                                       [ids["LambdaSecurityGroup"]]), name
        if name in storage:
            assert fn["Concurrency"] == {"ReservedConcurrentExecutions": 1}
            assert fn["Configuration"]["Handler"] == "storage_functions.runtime.handler"
            assert fn["Configuration"]["Role"].split("/")[-1] == ids["StorageRole"]
        else:
            assert "Concurrency" not in fn and fn["Configuration"]["Role"].split("/")[-1] == ids["TaskRole"]
            assert fn["Configuration"]["MemorySize"] == 512 and fn["Configuration"]["Timeout"] == 300
    assert lam.get_function(FunctionName="word-count-mapper")["Configuration"]["Handler"] == "handlers.mapper"
    # moto drops Layers: on the template, every task Lambda gets TaskLayerArns (when given), no storage Lambda any
    res = b.template["Resources"]
    shared = {"Fn::Split": [",", {"Fn::Join": [",", [{"Fn::Join": [",", {"Ref": "TaskLayerArns"}]}]]}]}
    for logical in ("TaskSplitter", "TaskMapper", "TaskReducer", "TaskMerger", "TaskFuncsionCleanup", "StatusCleanup"):
        assert res[logical]["Properties"]["Layers"] == {"Fn::If": ["HasTaskLayers", shared, {"Ref": "AWS::NoValue"}]}
    assert not any("Layers" in res[f"Storage{i}"]["Properties"] for i in range(3))
    shown = {p["ParameterKey"]: p["ParameterValue"] for p in cf.describe_stacks(StackName=dep.stack_name)["Stacks"][0][
        "Parameters"]}
    assert shown["TaskLayerArns"] in (LAYER, repr([LAYER]))  # moto shows a list parameter as a Python list
    # moto drops EventInvokeConfig: asserted on the template, one per storage Lambda
    invoke = {k: r["Properties"] for k, r in b.template["Resources"].items()
              if r["Type"] == "AWS::Lambda::EventInvokeConfig"}
    assert invoke == {f"Storage{i}InvokeConfig": {"FunctionName": {"Ref": f"Storage{i}"}, "Qualifier": "$LATEST",
                                                  "MaximumRetryAttempts": 0} for i in range(3)}
    # every way an execution ends ends its run: a rule on the state machine's status changes invokes
    # the status cleanup (sdk._offload_cleanup), which EventBridge alone may invoke
    assert lam.get_function(FunctionName=status)["Configuration"]["Handler"] == "sdk._offload_cleanup.handler"
    events = boto3.client("events", region_name=REGION)
    (rule,) = events.list_rules()["Rules"]
    pattern = json.loads(rule["EventPattern"])
    assert pattern == {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
                       "detail": {"status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                                  "stateMachineArn": [dep.outputs["StateMachineArn"]]}}
    (target,) = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
    assert target["Arn"] == f"arn:aws:lambda:{REGION}:123456789012:function:{status}"
    perm = b.template["Resources"]["StatusCleanupPermission"]["Properties"]
    assert (perm["Principal"], perm["SourceArn"]) == ("events.amazonaws.com", {"Fn::GetAtt": ["StatusCleanupRule", "Arn"]})
    logs = boto3.client("logs", region_name=REGION)
    groups = {g["logGroupName"]: g.get("retentionInDays") for g in logs.describe_log_groups()["logGroups"]}
    assert groups == {**{f"/aws/lambda/{n}": 14 for n in storage + tasks + [status]}, "/funcsion/funcsion-word-count/server": 14}

    ec2 = boto3.client("ec2", region_name=REGION)
    server_sg = ec2.describe_security_groups(GroupIds=[ids["ServerSecurityGroup"]])["SecurityGroups"][0]
    inbound = sorted((p["IpProtocol"], p["FromPort"], p["ToPort"], tuple(g["GroupId"] for g in p["UserIdGroupPairs"]),
                      tuple(p["IpRanges"])) for p in server_sg["IpPermissions"])
    assert inbound == [("tcp", 7917, 7917, (ids["LambdaSecurityGroup"],), ()),
                       ("tcp", 7918, 7918, (ids["LambdaSecurityGroup"],), ())]
    lambda_sg = ec2.describe_security_groups(GroupIds=[ids["LambdaSecurityGroup"]])["SecurityGroups"][0]
    assert lambda_sg["IpPermissions"] == []
    (endpoint,) = ec2.describe_vpc_endpoints()["VpcEndpoints"]
    assert (endpoint["VpcEndpointType"], endpoint["ServiceName"], endpoint["RouteTableIds"]) == (
        "Gateway", f"com.amazonaws.{REGION}.s3", [account.route_table])
    (instance,) = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instance["SubnetId"] == account.subnets[0]
    assert instance["IamInstanceProfile"]["Arn"].endswith(ids["ServerProfile"])
    # moto drops an instance's SecurityGroupIds: on the template
    assert b.template["Resources"]["Server"]["Properties"]["SecurityGroupIds"] == [
        {"Fn::GetAtt": ["ServerSecurityGroup", "GroupId"]}]
    r53 = boto3.client("route53", region_name=REGION)
    (zone,) = r53.list_hosted_zones()["HostedZones"]
    a = [r for r in r53.list_resource_record_sets(HostedZoneId=zone["Id"])["ResourceRecordSets"] if r["Type"] == "A"]
    assert a == [{"Name": "funcsion.internal", "Type": "A", "TTL": 60,
                  "ResourceRecords": [{"Value": instance["PrivateIpAddress"]}]}]
    script = b.template["Resources"]["Server"]["Properties"]["UserData"]["Fn::Base64"]["Fn::Sub"]
    assert "funcsion serve metadata --host 0.0.0.0 --port 7917 --journal /var/lib/funcsion/metadata.journal " \
           "--advertise ${ServerName} --tls-cert /etc/funcsion/tls/server.pem --tls-key /etc/funcsion/tls/server.key " \
           "--tls-ca /etc/funcsion/tls/ca.pem" in script
    assert ("funcsion serve daemon --invoker aws --host 0.0.0.0 --port 7918 --metadata 127.0.0.1:7917 "
            "--advertise ${ServerName}:7918 --cos s3://${CosBucket}/${CosPrefix}") in script
    assert f"--function-prefix {prefix} " in script and "--tls-ca /etc/funcsion/tls/ca.pem" in script

    lam_arn = f"arn:aws:lambda:{REGION}:123456789012:function:"
    task_role = policy(ids["TaskRole"])
    assert not any(a.startswith("s3:") for a in actions(task_role))
    storage_role = policy(ids["StorageRole"])
    assert {a for a in actions(storage_role) if a.startswith("s3:")} == {*S3_OBJECT_ACTIONS, "s3:ListBucket"}
    for act in S3_OBJECT_ACTIONS:
        assert resources(storage_role, act) == ["arn:aws:s3:::cos/wc/data/*"]
    (listing,) = [s for s in storage_role if s["Action"] == "s3:ListBucket"]
    assert (listing["Resource"], listing["Condition"]) == (
        "arn:aws:s3:::cos", {"StringLike": {"s3:prefix": ["wc/data/*", "wc/data"]}})
    assert {r.removesuffix(":*") for r in resources(storage_role, "logs:PutLogEvents")} == {
        f"arn:aws:logs:{REGION}:123456789012:log-group:/aws/lambda/{n}" for n in storage}
    server = policy(ids["ServerRole"])
    assert {r.removesuffix(":*") for r in resources(server, "lambda:InvokeFunction")} == {lam_arn + n for n in storage}
    assert resources(server, "s3:PutObject") == ["arn:aws:s3:::cos/wc/data/*"]
    assert resources(server, "lambda:ListFunctions") == ["*"]  # takes no resource; the daemon counts its functions
    assert [r.removesuffix(":*") for r in resources(server, "logs:PutLogEvents")] == [
        f"arn:aws:logs:{REGION}:123456789012:log-group:/funcsion/funcsion-word-count/server"]
    assert {a.split(":")[0] for a in actions(server)} == {"lambda", "s3", "secretsmanager", "logs"}
    sm_role = policy(ids["StateMachineRole"])
    assert actions(sm_role) == {"lambda:InvokeFunction"}
    assert {r.removesuffix(":*") for r in resources(sm_role, "lambda:InvokeFunction")} == {lam_arn + n for n in tasks}

    sfn = boto3.client("stepfunctions", region_name=REGION)
    sm = sfn.describe_state_machine(stateMachineArn=dep.outputs["StateMachineArn"])
    assert sm["roleArn"].split("/")[-1] == ids["StateMachineRole"]
    assert task_arns(json.loads(sm["definition"])) == {lam_arn + n for n in tasks}


def test_an_update_with_a_changed_setting_updates(example_paths: dict[str, Path], account: Account,
                                                  tmp_path: Path) -> None:
    first = small(example_paths["wordcount"])
    deploy_stack(first, account.parameters(), region=REGION, delay_s=1)
    doc = json.loads(example_paths["wordcount"].read_text())
    doc["spec"]["map_stage"]["functions"][0].update(memory_mb=2048, timeout_s=60, max_attempts=1, layers=[LAYER])
    wds_path = tmp_path / "wordcount.wds.json"
    wds_path.write_text(json.dumps(doc))
    (tmp_path / "handlers.py").write_bytes((example_paths["wordcount"].parent / "handlers.py").read_bytes()
                                           + b"# changed\n")
    changed = small(wds_path, params={"mappers": 9})
    assert changed.artifacts.task_key != first.artifacts.task_key  # another task zip: another key
    # nothing but the WDS: every other setting keeps the stack's previous value
    dep = deploy_stack(changed, StackParameters(extra={"DriverCidr": "192.0.2.0/24"}), region=REGION, delay_s=1)
    assert dep.action == "updated" and dep.outputs["CosUrl"] == "s3://cos/wc/data"
    ec2 = boto3.client("ec2", region_name=REGION)
    (server_sg,) = ec2.describe_security_groups(Filters=[{"Name": "description", "Values": [
        "funcsion servers: the metadata and daemon ports from the Lambdas only"]}])["SecurityGroups"]
    drivers = sorted((p["FromPort"], [r["CidrIp"] for r in p["IpRanges"]]) for p in server_sg["IpPermissions"]
                     if p["IpRanges"])
    assert drivers == [(7917, ["192.0.2.0/24"]), (7918, ["192.0.2.0/24"])]
    lam = boto3.client("lambda", region_name=REGION)
    mapper = lam.get_function(FunctionName="word-count-mapper")["Configuration"]
    assert (mapper["MemorySize"], mapper["Timeout"]) == (2048, 60)
    own = {"Fn::Split": [",", {"Fn::Join": [",", [{"Fn::Join": [",", {"Ref": "TaskLayerArns"}]}, LAYER]]}]}
    assert changed.template["Resources"]["TaskMapper"]["Properties"]["Layers"] == {  # moto drops Layers
        "Fn::If": ["HasTaskLayers", own, [LAYER]]}
    assert lam.get_function(FunctionName="word-count-reducer")["Configuration"]["MemorySize"] == 512
    sfn = boto3.client("stepfunctions", region_name=REGION)
    definition = json.loads(sfn.describe_state_machine(stateMachineArn=dep.outputs["StateMachineArn"])["definition"])
    assert len(definition["States"]["map_stage: replicas"]["Result"]["items"]) == 9
    retry = definition["States"]["map_stage"]["ItemProcessor"]["States"][definition["States"]["map_stage"]["ItemProcessor"]["StartAt"]]["Retry"]
    assert [r["MaxAttempts"] for r in retry if r["ErrorEquals"] == ["States.TaskFailed"]] == [0]
    s3 = boto3.client("s3", region_name=REGION)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="artifacts")["Contents"]}
    assert {first.artifacts.task_key, changed.artifacts.task_key, changed.artifacts.storage_key,
            changed.template_key} <= keys


def test_bad_settings_are_one_line_naming_the_setting(example_paths: dict[str, Path], account: Account) -> None:
    b = small(example_paths["wordcount"])

    def error(params: StackParameters, bundle_: StackBundle = b, region: str = REGION) -> str:
        with pytest.raises(StackDeployError) as info:
            deploy_stack(bundle_, params, region=region, delay_s=1)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert error(account.parameters(subnet_ids=[])) == (
        "SubnetIds is required for a new stack: give --subnet subnet-... (repeatable: the private subnets the "
        "Lambdas run in)")
    assert error(account.parameters(tls_ca=None, tls_cert=None, tls_key=None)) == (
        "TlsCaCert is required for a new stack: give --tls-ca FILE (make one with `funcsion certs DIR`)")
    other = "arn:aws:lambda:eu-west-1:123456789012:layer:deps:2"
    assert error(account.parameters(task_layers=[other])) == (
        f"--layer: layer {other} is in region eu-west-1, but this deploy is to {REGION}: publish the layer in "
        f"{REGION}, or deploy with --region eu-west-1")
    assert error(account.parameters(artifact_bucket="no-such-bucket")) == (
        f"artifact bucket 'no-such-bucket' does not exist: create it in {REGION} (aws s3 mb s3://no-such-bucket "
        f"--region {REGION}) or give --artifact-bucket an existing one")
    assert error(account.parameters(extra={"Bogus": "1"})).startswith(
        "--parameter Bogus: the template has no such parameter (it has: ArtifactBucket, ")
    broken = json.loads(json.dumps(b.template))
    broken["Resources"]["ServerRecord"]["Properties"]["ResourceRecords"] = [{"Fn::GetAtt": ["Nope", "PrivateIp"]}]
    assert error(account.parameters(), dataclasses.replace(b, template=broken)) == (
        "CloudFormation refused stack funcsion-word-count: Template error: instance of Fn::GetAtt references "
        "undefined resource Nope")


def test_an_entrys_layer_in_another_region_names_the_entry(example_paths: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(example_paths["wordcount"].read_text())
    doc["spec"]["reduce_stage"]["functions"][0]["layers"] = ["arn:aws:lambda:eu-west-1:123456789012:layer:x:1"]
    path = tmp_path / "wc.wds.json"
    path.write_text(json.dumps(doc))
    (tmp_path / "handlers.py").write_text("")
    from sdk.deploy._stack import check_parameters

    with pytest.raises(StackDeployError, match=r"^entry 'reducer_\{i:02d\}' of .*wc.wds.json: layer "
                                               r"arn:aws:lambda:eu-west-1:123456789012:layer:x:1 is in region "
                                               r"eu-west-1, but this deploy is to us-east-1: publish"):
        check_parameters(small(path), StackParameters(), region=REGION, previous={"SubnetIds": "subnet-1"})


def test_a_stack_in_rollback_complete_says_to_delete_it(example_paths: dict[str, Path], account: Account) -> None:
    from moto.cloudformation.models import cloudformation_backends

    b = small(example_paths["wordcount"])
    deploy_stack(b, account.parameters(), region=REGION, delay_s=1)
    # moto never fails a create into ROLLBACK_COMPLETE: put its stack there, as CloudFormation leaves one
    (stack,) = cloudformation_backends["123456789012"][REGION].stacks.values()
    stack.status = "ROLLBACK_COMPLETE"
    with pytest.raises(StackDeployError) as info:
        deploy_stack(b, StackParameters(), region=REGION, delay_s=1)
    assert str(info.value) == (
        "stack funcsion-word-count is in ROLLBACK_COMPLETE and cannot be updated: delete it (aws cloudformation "
        f"delete-stack --stack-name funcsion-word-count --region {REGION}) and deploy again")


def test_the_template_carries_no_secret(example_paths: dict[str, Path]) -> None:
    b = small(example_paths["wordcount"])
    body = b.template_body
    assert "BEGIN" not in body and "admin_token\": \"" not in body
    for name in ("TlsCaCert", "TlsServerCert", "TlsServerKey"):
        assert b.template["Parameters"][name]["NoEcho"] is True
    given = StackParameters(tls_ca=b"-----BEGIN CERTIFICATE-----\nabc\n").values()
    assert base64.b64decode(given["TlsCaCert"]) == b"-----BEGIN CERTIFICATE-----\nabc\n"


def test_a_dollar_brace_of_the_workflows_own_is_escaped_in_the_definition(tmp_path: Path) -> None:
    doc = {"app": "t", "workflow_id": 1, "category": "c", "spec": {"st${x}": {"stage_id": 0, "functions": [
        {"start": True, "name": "f", "input": ["a"], "output": ["b"], "next": []}]}}}
    (tmp_path / "t.wds.json").write_text(json.dumps(doc))
    (tmp_path / "handlers.py").write_text("")
    sub = small(tmp_path / "t.wds.json").template["Resources"]["StateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"]
    assert '"st${!x}"' in sub and '"FunctionName": "${TaskF.Arn}"' in sub
    resolved = json.loads(sub.replace("${TaskF.Arn}", "arn:f").replace("${TaskFuncsionCleanup.Arn}", "arn:c")
                          .replace("${!", "${"))  # what Fn::Sub makes of it
    assert resolved["States"]["st${x}"]["Parameters"]["FunctionName"] == "arn:f"


def test_the_cli_deploys_the_stack_and_prints_its_outputs(example_paths: dict[str, Path], account: Account,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    for name, pem in zip(("ca.pem", "server.pem", "server.key"), TLS, strict=True):
        (tmp_path / name).write_bytes(pem)
    wc = str(example_paths["wordcount"])
    args = ["deploy", wc, "--target", "aws", "--region", REGION, "--artifact-bucket", "artifacts",
            "--vpc-id", account.vpc, "--subnet", account.subnets[0], "--subnet", account.subnets[1],
            "--route-table", account.route_table, "--cos", "s3://cos/wc", "--layer", LAYER,
            "--tls-dir", str(tmp_path), "--storage-functions", "2",
            "--parameter", "ServerInstanceType=m6i.xlarge", "--json"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out.splitlines()[-1])
    assert (doc["stack"], doc["action"], doc["outputs"]["CosUrl"]) == ("funcsion-word-count", "created", "s3://cos/wc")
    assert "stack funcsion-word-count created in us-east-1" in out and "warning" not in err
    assert f"  StateMachineArn        {doc['outputs']['StateMachineArn']}" in out.splitlines()
    cf = boto3.client("cloudformation", region_name=REGION)
    params = {p["ParameterKey"]: p["ParameterValue"] for p in cf.describe_stacks(
        StackName="funcsion-word-count")["Stacks"][0]["Parameters"]}
    assert params["ServerInstanceType"] == "m6i.xlarge"
    assert base64.b64decode(params["TlsCaCert"]) == TLS[0]  # moto shows NoEcho values
    ec2 = boto3.client("ec2", region_name=REGION)
    (instance,) = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instance["InstanceType"] == "m6i.xlarge"
    assert main(["deploy", wc, "--target", "aws", "--region", REGION, "--json"]) == 0  # nothing but the WDS
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["outputs"] == doc["outputs"]


def test_tls_material_that_does_not_fit_fails_at_deploy(example_paths: dict[str, Path]) -> None:
    import datetime

    from sdk.deploy._stack import check_parameters

    b = small(example_paths["wordcount"])
    fix = "make them with `funcsion certs DIR --name funcsion.internal --name 127.0.0.1` and pass --tls-dir DIR"

    def problem(*tls: bytes, server_name: str | None = None, **kw: Any) -> str:
        with pytest.raises(StackDeployError) as info:
            check_parameters(b, StackParameters(tls_ca=tls[0], tls_cert=tls[1], tls_key=tls[2] if len(tls) > 2 else None,
                                                server_name=server_name),
                             region=REGION, previous=previous, **kw)
        return str(info.value)

    previous = {k: "x" for k in b.template["Parameters"] if k != "ServerName"}  # ServerName: its default
    check_parameters(b, StackParameters(tls_ca=TLS[0], tls_cert=TLS[1], tls_key=TLS[2]), region=REGION,
                     previous=previous)
    assert problem(TLS[0], TLS[1]) == "give all of --tls-ca, --tls-cert and --tls-key (or --tls-dir DIR), not only " \
                                     "--tls-ca, --tls-cert"
    assert problem(*make_tls("other.internal", "127.0.0.1")) == (
        "--tls-cert names 127.0.0.1, other.internal but not funcsion.internal (the servers are dialled at "
        f"funcsion.internal and, on the host, 127.0.0.1): {fix}")
    assert problem(*TLS, server_name="srv.example.org").startswith(
        "--tls-cert names 127.0.0.1, funcsion.internal but not srv.example.org (the servers")
    assert problem(make_tls("x")[0], TLS[1], TLS[2]) == (
        f"--tls-cert was not issued by --tls-ca: give the CA that signed it, or {fix}")
    assert problem(TLS[0], TLS[1], make_tls("x")[2]) == (
        f"--tls-key is not the key of --tls-cert: give the key made with it, or {fix}")
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=40)
    assert problem(*TLS, now=later).startswith("--tls-cert is valid from ")
    assert problem(b"junk", TLS[1], TLS[2]) == f"--tls-ca is not a PEM certificate: {fix}"


def test_the_hosts_boot_script_parses_and_the_bundle_is_reproducible(example_paths: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    import re
    import subprocess

    b = small(example_paths["wordcount"])
    assert small(example_paths["wordcount"]).template_key == b.template_key  # same inputs, same bytes
    sub = b.template["Resources"]["Server"]["Properties"]["UserData"]["Fn::Base64"]["Fn::Sub"]
    script = re.sub(r"\$\{(?!!)[A-Za-z0-9:]+\}", "value", sub).replace("${!", "${")  # what Fn::Sub makes of it
    (tmp_path / "boot.sh").write_text(script)
    proc = subprocess.run(["bash", "-n", str(tmp_path / "boot.sh")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    python = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    compile(python, "boot.py", "exec")
    agent = script.split("<<'AGENT'\n", 1)[1].split("\nAGENT\n", 1)[0]
    assert [f["log_group_name"] for f in json.loads(agent)["logs"]["logs_collected"]["files"]["collect_list"]] == [
        "value", "value"]
    assert "ExecStart=/opt/funcsion/bin/funcsion serve daemon " in script and "--token ${FUNCSION_STORE_TOKEN} " in script


def test_the_hosts_server_commands_are_what_the_cli_takes() -> None:
    """The systemd units' command lines parse with funcsion's own parser, and carry what a
    TLS server off loopback needs: its certificate, the CA, and the name it is checked against."""
    from sdk.cli import build_parser
    from sdk.deploy._host import daemon_command, metadata_command

    subs = {"${ServerName}": "funcsion.internal", "${!FUNCSION_STORE_TOKEN}": "t", "${CosBucket}": "b",
            "${CosPrefix}": "p", "${AWS::Region}": "us-east-1", "${StorageMemoryMb}": "1024"}
    parser = build_parser()
    for cmd in (metadata_command(7917), daemon_command(metadata_port=7917, daemon_port=7918, function_prefix="fs-")):
        for k, v in subs.items():
            cmd = cmd.replace(k, v)
        assert "${" not in cmd, cmd
        args = parser.parse_args(cmd.split()[1:])
        assert (args.host, args.tls_cert, args.tls_key, args.tls_ca) == (
            "0.0.0.0", "/etc/funcsion/tls/server.pem", "/etc/funcsion/tls/server.key", "/etc/funcsion/tls/ca.pem"), cmd
        assert args.advertise.split(":")[0] == "funcsion.internal" and not args.insecure
