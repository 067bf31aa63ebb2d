"""``funcsion offload deploy ASL --target aws``: a user's state machine with ``@sdk.offload``
handlers as ONE CloudFormation stack. The templates of the four ``examples/offload`` state
machines pass cfn-lint; the stack of the Parallel one is created in moto's CloudFormation with
its task Lambdas running the handlers module, the user's definition invoking exactly those
Lambdas (inside the Parallel's branches too), the status rule on that state machine invoking
the cleanup Lambda; ``--dry-run --out`` writes the template and zips (the task zip holds the
handlers and the decorator, not the planner's picture); a Lambda with no handler is refused
naming the state and the fix."""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sdk.deploy import StackParameters, TemplateSettings, deploy_stack
from sdk.deploy._offload_stack import offload_bundle
from sdk.deploy._stack import StackDeployError
from tests.functional.test_deploy_stack import LAYER, TLS

REGION = "us-east-1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "offload"
HANDLERS = EXAMPLES / "handlers.py"


@pytest.mark.parametrize("example", ["large_result", "parallel_fanout", "catch_path", "map_items"])
def test_cfn_lint_passes_on_the_offload_examples_templates(example: str) -> None:
    from cfnlint.api import ManualArgs, lint

    b = offload_bundle(EXAMPLES / f"{example}.asl.json", HANDLERS)
    matches = lint(json.dumps(b.template), config=ManualArgs(regions=[REGION]))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
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
            boto3.client("lambda", region_name=REGION).publish_layer_version(
                LayerName="funcsion-deps", Content={"ZipFile": b"PK\x05\x06" + bytes(18)})
            yield {"artifact_bucket": "artifacts", "vpc_id": vpc, "subnet_ids": subnets, "route_table_ids": [rtb],
                   "cos_bucket": "cos", "cos_prefix": "offload", "tls_ca": TLS[0], "tls_cert": TLS[1],
                   "tls_key": TLS[2], "task_layers": [LAYER]}


def _task_function_names(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["Parameters"]["FunctionName"]] if node.get("Type") == "Task" else []
        return found + [n for v in node.values() for n in _task_function_names(v)]
    if isinstance(node, list):
        return [n for v in node for n in _task_function_names(v)]
    return []


def test_the_offload_stack_in_moto_runs_the_users_state_machine_with_the_status_rule(aws: dict[str, Any]) -> None:
    b = offload_bundle(EXAMPLES / "parallel_fanout.asl.json", HANDLERS, settings=TemplateSettings(storage_functions=3))
    dep = deploy_stack(b, StackParameters(**aws), region=REGION, delay_s=1)
    assert (dep.stack_name, dep.action) == ("funcsion-parallel-fanout", "created")
    lam = boto3.client("lambda", region_name=REGION)
    tasks = {"offload-produce": "handlers.produce", "offload-checksum": "handlers.checksum",
             "offload-compress": "handlers.compress", "offload-index": "handlers.index",
             "offload-merge": "handlers.merge"}
    status = "funcsion-parallel-fanout-status-cleanup"
    storage = [f"funcsion-parallel-fanout-storage-{i}" for i in range(3)]
    assert {f["FunctionName"] for f in lam.list_functions()["Functions"]} == {*tasks, status, *storage}
    arns = {}
    for name, handler in tasks.items():
        cfg = lam.get_function(FunctionName=name)["Configuration"]
        assert cfg["Handler"] == handler
        arns[name] = cfg["FunctionArn"]
    assert lam.get_function(FunctionName=status)["Configuration"]["Handler"] == "sdk._offload_cleanup.handler"
    # the user's definition, each Lambda it invokes made the deployed one's ARN (Parallel branches too)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    deployed = json.loads(sfn.describe_state_machine(stateMachineArn=dep.outputs["StateMachineArn"])["definition"])
    original = json.loads((EXAMPLES / "parallel_fanout.asl.json").read_text())
    assert sorted(_task_function_names(deployed)) == sorted(arns[n.split(":function:")[1]]
                                                            for n in _task_function_names(original))
    assert deployed["States"].keys() == original["States"].keys()
    # every way an execution of it ends, the rule invokes the cleanup Lambda
    events = boto3.client("events", region_name=REGION)
    (rule,) = events.list_rules()["Rules"]
    pattern = json.loads(rule["EventPattern"])
    assert pattern["detail"] == {"status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                                 "stateMachineArn": [dep.outputs["StateMachineArn"]]}
    (target,) = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
    assert target["Arn"] == f"arn:aws:lambda:{REGION}:123456789012:function:{status}"
    # the state machine may invoke the task Lambdas only (not the cleanup, not the storage Lambdas)
    sm_role = b.template["Resources"]["StateMachineRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    invoked = json.dumps(sm_role)
    assert all(f"TaskOffload{n.split('-')[1].capitalize()}" in invoked for n in tasks)
    assert "StatusCleanup" not in invoked and "Storage0" not in invoked


def test_dry_run_writes_the_template_and_the_zips(tmp_path: Path) -> None:
    from sdk.cli import main

    out = tmp_path / "out"
    assert main(["offload", "deploy", str(EXAMPLES / "large_result.asl.json"), "--target", "aws", "--dry-run",
                 "--out", str(out), "--layer", LAYER]) == 0
    template = json.loads((out / "template.json").read_text())
    assert {"TaskOffloadProduce", "TaskOffloadConsume", "StatusCleanup", "StatusCleanupRule",
            "StateMachine"} <= set(template["Resources"])
    names = set(zipfile.ZipFile(out / "task.zip").namelist())
    assert {"handlers.py", "sdk/_offload.py", "sdk/_offload_cleanup.py", "sdk/_offload_refs.py"} <= names
    assert not any(n.startswith(("sdk/cli/", "sdk/deploy/", "hdag/", "metadata_server/")) for n in names)
    assert zipfile.ZipFile(out / "storage.zip").testzip() is None


def test_a_lambda_without_a_handler_is_refused_naming_the_state(tmp_path: Path) -> None:
    asl = json.loads((EXAMPLES / "large_result.asl.json").read_text())
    asl["States"]["Consume"]["Parameters"]["FunctionName"] = "offload-digest"
    path = tmp_path / "m.asl.json"
    path.write_text(json.dumps(asl))
    with pytest.raises(StackDeployError, match=r"state 'Consume' invokes Lambda 'offload-digest'.*defines no "
                                               r"offload_digest or digest"):
        offload_bundle(path, HANDLERS)


def test_the_threshold_reaches_the_task_lambdas_and_a_bad_one_is_refused() -> None:
    from funcsion_errors import FuncsionError

    b = offload_bundle(EXAMPLES / "large_result.asl.json", HANDLERS, threshold_bytes=2048)
    res = b.template["Resources"]
    for logical in ("TaskOffloadProduce", "TaskOffloadConsume"):
        assert res[logical]["Properties"]["Environment"] == {"Variables": {"FUNCSION_OFFLOAD_THRESHOLD_BYTES": "2048"}}
    assert "Environment" not in res["StatusCleanup"]["Properties"]
    assert "Environment" not in offload_bundle(EXAMPLES / "large_result.asl.json", HANDLERS).template["Resources"][
        "TaskOffloadProduce"]["Properties"]
    with pytest.raises(FuncsionError, match="offload_threshold_bytes"):
        offload_bundle(EXAMPLES / "large_result.asl.json", HANDLERS, threshold_bytes=10)


def test_the_cli_creates_the_stack_and_prints_its_outputs(aws: dict[str, Any], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    for name, pem in zip(("ca.pem", "server.pem", "server.key"), TLS):
        (tmp_path / name).write_bytes(pem)
    argv = ["offload", "deploy", str(EXAMPLES / "catch_path.asl.json"), "--target", "aws", "--region", REGION,
            "--artifact-bucket", "artifacts", "--vpc-id", aws["vpc_id"], "--cos", "s3://cos/offload",
            "--tls-dir", str(tmp_path), "--storage-functions", "2", "--layer", LAYER, "--json"]
    for s in aws["subnet_ids"]:
        argv += ["--subnet", s]
    argv += ["--route-table", aws["route_table_ids"][0]]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (doc["stack"], doc["action"], doc["target"]) == ("funcsion-catch-path", "created", "aws")
    assert doc["outputs"]["StorageFunctionPrefix"] == "funcsion-catch-path-storage-"
    names = {f["FunctionName"] for f in boto3.client("lambda", region_name=REGION).list_functions()["Functions"]}
    assert {"offload-fetch", "offload-transform", "offload-recover", "offload-store",
            "funcsion-catch-path-status-cleanup", "funcsion-catch-path-storage-1"} <= names
