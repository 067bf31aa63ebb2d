"""``funcsion run WDS --target aws`` refuses to start, in one line naming what
is wrong and how to fix it and never with a botocore traceback, when the
deployment cannot be used: no stack, a stack missing an output, no or
expired AWS credentials, servers the driver cannot reach. AWS is moto; no
run starts, so no servers are needed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from sdk._config import Config
from sdk.aws_run import AwsClients, AwsRun, AwsRunOptions, DeploymentError
from sdk.cli import main
from sdk.local._run import prepare_run

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"
REGION = "us-east-1"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def _outputs(**over: str) -> dict[str, str]:
    secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="funcsion-word-count-tokens", SecretString=json.dumps({"admin_token": "a", "store_token": "s"}))["ARN"]
    port = _closed_port()
    return {"StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:funcsion-word-count",
            "MetadataAddress": f"127.0.0.1:{port}", "DaemonAddress": f"127.0.0.1:{port}", "ServerName": "localhost",
            "CosUrl": "s3://funcsion-cos/sion", "TokensSecretArn": secret, "StorageFunctionPrefix": "funcsion-storage",
            **over}


def _stack(outputs: dict[str, str], name: str = "funcsion-word-count") -> None:
    template = {"Resources": {"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/x"}}},
                "Outputs": {k: {"Value": v} for k, v in outputs.items() if v}}
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=name, TemplateBody=json.dumps(template))


def _run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> str:
    book = tmp_path / "book.txt"
    book.write_text("to be or not to be\n")
    code = main(["run", str(WC), "--target", "aws", "--region", REGION, "--state-dir", str(tmp_path / "state"),
                 "--input", f"raw_text={book}", *extra])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "botocore" not in err, err
    assert not (tmp_path / "state" / "runs").exists()  # no run started
    return lines[0]


def test_no_such_stack(aws: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _run(capsys, tmp_path)
    assert line.startswith("funcsion run: no CloudFormation stack 'funcsion-word-count' in us-east-1")
    assert "funcsion deploy WDS --target aws" in line and "--stack-name" in line


def test_a_stack_missing_an_output(aws: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _stack(_outputs(TokensSecretArn="", CosUrl=""), name="mine")
    line = _run(capsys, tmp_path, "--stack-name", "mine")
    assert "stack mine has no output CosUrl (the COS, s3://bucket/prefix); TokensSecretArn" in line


def test_servers_out_of_reach_name_the_address_and_the_way_in(aws: None, capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    outputs = _outputs()
    _stack(outputs)
    line = _run(capsys, tmp_path)
    assert f"cannot reach the metadata server at {outputs['MetadataAddress']} (stack funcsion-word-count output " \
           "MetadataAddress)" in line
    assert "SSM port forward" in line and "--metadata HOST:PORT --daemon HOST:PORT" in line
    port = _closed_port()
    line = _run(capsys, tmp_path, "--metadata", f"127.0.0.1:{port}")
    assert f"cannot reach the metadata server at 127.0.0.1:{port} (--metadata)" in line


def test_a_secret_without_the_tokens(aws: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    arn = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="other", SecretString=json.dumps({"admin_token": "a"}))["ARN"]
    _stack(_outputs(TokensSecretArn=arn))
    assert "has no store_token" in _run(capsys, tmp_path)


def test_no_credentials(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # no credentials cached by an earlier test
    line = _run(capsys, tmp_path)
    assert "reading CloudFormation stack funcsion-word-count: no AWS credentials found" in line
    assert "AWS_PROFILE" in line


def test_an_expired_token(tmp_path: Path) -> None:
    """AWS answers ExpiredToken (moto does not expire tokens: botocore's own Stubber answers)."""
    cfn = botocore.session.get_session().create_client("cloudformation", region_name=REGION,
                                                        aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(cfn) as stub:
        stub.add_client_error("describe_stacks", service_error_code="ExpiredToken",
                              service_message="The security token included in the request is expired")
        prep = prepare_run(WC, inputs={}, params={})
        cfg = Config.load(state_dir=str(tmp_path), env={})
        run = AwsRun(prep, config=cfg, options=AwsRunOptions(region=REGION),
                     clients=AwsClients(REGION, cloudformation=cfn))
        with pytest.raises(DeploymentError) as info:
            run.run()
    assert str(info.value) == (
        "reading CloudFormation stack funcsion-word-count: AWS refused DescribeStacks: ExpiredToken: The security "
        "token included in the request is expired (your AWS session token expired: refresh your credentials "
        "(e.g. `aws sso login`))")


def test_report_lines_are_read_from_the_lambdas_log_groups(aws: None) -> None:
    """The bill's REPORT lines, from CloudWatch Logs (moto's), matched by request id; a Lambda
    with no log group gives none."""
    from sdk.aws_run._driver import read_report_lines

    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName="/aws/lambda/wc-map")
    logs.create_log_stream(logGroupName="/aws/lambda/wc-map", logStreamName="s")
    now = int(time.time() * 1000)
    lines = ["START RequestId: rid-1 Version: $LATEST",
             "REPORT RequestId: rid-1\tDuration: 12.50 ms\tBilled Duration: 13 ms\tMemory Size: 512 MB\t"
             "Max Memory Used: 80 MB\t",
             "REPORT RequestId: rid-other\tDuration: 1.00 ms\tBilled Duration: 1 ms\tMemory Size: 512 MB\t"
             "Max Memory Used: 80 MB\t"]
    logs.put_log_events(logGroupName="/aws/lambda/wc-map", logStreamName="s",
                        logEvents=[{"timestamp": now + k, "message": m} for k, m in enumerate(lines)])
    got = read_report_lines(logs, ["wc-map", "wc-gone"], {"rid-1", "rid-2"}, since=now / 1000 - 60)
    assert list(got) == ["rid-1"] and got["rid-1"].billed_ms == 13 and got["rid-1"].memory_mb == 512


@pytest.mark.parametrize("extra, says", [
    (["--crash", "splitter"], "--crash: local only"),
    (["--stack", "metadata=127.0.0.1:1,daemon=127.0.0.1:2"], "--stack: local only"),
    ([str(WC)], "--target aws runs one workflow at a time"),
    (["--timeout", "-1"], "--timeout >= 0"),
])
def test_local_only_options_are_refused(extra: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", str(WC), *extra, "--target", "aws"])
    assert info.value.code == 2 and says in capsys.readouterr().err
