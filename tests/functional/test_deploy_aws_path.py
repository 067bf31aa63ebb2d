"""The AWS path without surprises (issue 16 item 6): ``deploy --target aws --dry-run --out DIR``
writes the ASL and both zips and calls nothing; a missing ``--layer`` is warned about; botocore's
errors (no credentials, an unreachable endpoint, a refusal) are one line naming the step, not a
traceback."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)
from moto import mock_aws

from sdk.deploy._aws_errors import describe_aws_error
from sdk.deploy._plan import DRY_RUN_FILES
from sdk.deploy._zip import build_task_zip
from sdk.deploy.aws import WorkflowDeployError, deploy_workflow
from storage_functions.deploy import build_zip

REPO = Path(__file__).resolve().parents[2]
ROLE = "arn:aws:iam::123456789012:role/funcsion-tasks"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``funcsion`` in a process of its own with only ``env``'s AWS settings (none by default)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base.update({"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials", "AWS_CONFIG_FILE": "/nonexistent/config",
                 "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard",
                 "PYTHONPATH": str(REPO)})
    base.update(env or {})
    return subprocess.run([sys.executable, "-c", "import sys; from sdk.cli import main; rc = main(sys.argv[1:]); "
                           "assert rc != 0 or '--dry-run' not in sys.argv or 'botocore.client' not in sys.modules, "
                           "'a dry run made an AWS client'; sys.exit(rc)", *args],
                          capture_output=True, text=True, timeout=120, env=base)


def test_dry_run_writes_the_asl_and_zips_without_aws(example_paths: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "plan"
    proc = cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--dry-run", "--out", str(out),
               "--role-arn", ROLE, "--layer", "arn:aws:lambda:us-east-1:123456789012:layer:funcsion:1",
               "--param", "mappers=8", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # a layer was given: no warning
    assert sorted(p.name for p in out.iterdir()) == sorted(DRY_RUN_FILES)
    assert (out / "task.zip").read_bytes() == build_task_zip(example_paths["wordcount"].parent)
    assert (out / "storage.zip").read_bytes() == build_zip()
    assert "handlers.py" in zipfile.ZipFile(io.BytesIO((out / "task.zip").read_bytes())).namelist()
    asl = json.loads((out / "state_machine.asl.json").read_text())
    plan = json.loads((out / "functions.json").read_text())
    arns = {f["entry"]: f["arn"] for f in plan["functions"]}
    assert arns["mapper_{i:02d}"] == "arn:aws:lambda:us-east-1:123456789012:function:word-count-mapper"
    assert asl["States"]["split_stage"]["Parameters"]["FunctionName"] == arns["splitter"]
    assert len(asl["States"]["map_stage: replicas"]["Result"]["items"]) == 8
    used = {s["Parameters"]["FunctionName"] for s in _task_states(asl)}
    assert used <= set(arns.values()) and arns["funcsion-cleanup"] in used
    f = next(f for f in plan["functions"] if f["entry"] == "splitter")
    assert (f["Handler"], f["Role"], f["Layers"]) == ("handlers.splitter", ROLE,
                                                      ["arn:aws:lambda:us-east-1:123456789012:layer:funcsion:1"])
    assert plan["state_machine_name"] == "funcsion-word-count-1"
    assert plan["task_zip"]["layer_packages"] == ["thrift", "pyeclib", "msgpack", "aws-lambda-powertools"]
    assert json.loads(proc.stdout.splitlines()[-1])["out"] == str(out)


def _task_states(node: object) -> list[dict]:  # type: ignore[type-arg]
    found = []
    if isinstance(node, dict):
        if node.get("Type") == "Task" and "FunctionName" in node.get("Parameters", {}):
            found.append(node)
        for v in node.values():
            found += _task_states(v)
    elif isinstance(node, list):
        for v in node:
            found += _task_states(v)
    return found


def test_dry_run_needs_no_role_and_warns_without_a_layer(example_paths: dict[str, Path], tmp_path: Path) -> None:
    proc = cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (
        "funcsion deploy: warning: no --layer given; the task Lambdas import thrift, pyeclib, msgpack, "
        "aws-lambda-powertools, which only a layer provides (README, \"The AWS path\"), so every task would fail "
        "with Runtime.ImportModuleError")
    asl = (tmp_path / "state_machine.asl.json").read_text()
    assert "arn:aws:lambda:us-east-1:<ACCOUNT_ID>:function:word-count-splitter" in asl


def test_dry_run_arguments(example_paths: dict[str, Path], tmp_path: Path) -> None:
    proc = cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--dry-run")
    assert proc.returncode == 2 and "--dry-run needs --out DIR" in proc.stderr
    proc = cli("deploy", str(example_paths["wordcount"]), "--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 2 and "add --target aws" in proc.stderr


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "warning: no --layer" not in ln]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_no_credentials_is_one_line(example_paths: dict[str, Path]) -> None:
    line = one_line_error(cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--role-arn", ROLE,
                              env={"AWS_DEFAULT_REGION": "us-east-1"}))
    assert line == ("funcsion deploy: deploying Lambda word-count-splitter (entry 'splitter'): no AWS credentials "
                    "found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or run `aws configure`")
    storage = one_line_error(cli("deploy", "storage", "--role-arn", ROLE, "--count", "1",
                                 env={"AWS_DEFAULT_REGION": "us-east-1"}))
    assert storage.startswith("funcsion deploy: deploying the storage functions: no AWS credentials found")


def test_an_unreachable_endpoint_is_one_line(example_paths: dict[str, Path]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = one_line_error(cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--role-arn", ROLE,
                              "--endpoint-url", f"http://127.0.0.1:{port}", "--region", "eu-west-1",
                              env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}))
    assert line.startswith(f"funcsion deploy: deploying Lambda word-count-splitter (entry 'splitter'): cannot reach "
                           f"http://127.0.0.1:{port}/")
    assert line.endswith("check the region (eu-west-1), the network or proxy, and --endpoint-url / AWS_ENDPOINT_URL "
                         "if you set one")


@mock_aws
def test_a_refusal_names_the_step_and_the_code(example_paths: dict[str, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(k, v)
    with pytest.raises(WorkflowDeployError) as info:  # moto: the role does not exist in this account
        deploy_workflow(example_paths["wordcount"], role_arn=ROLE, region_name="us-east-1")
    msg = str(info.value)
    assert msg.startswith("deploying Lambda word-count-splitter (entry 'splitter'): AWS refused CreateFunction: "
                          "InvalidParameterValueException: ")
    assert "\n" not in msg


@pytest.mark.parametrize(("exc", "line"), [
    (NoCredentialsError(), "no AWS credentials found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY), or run `aws configure`"),
    (NoRegionError(), "no AWS region: give --region, or set region in funcsion.toml (FUNCSION_REGION) or "
                      "AWS_DEFAULT_REGION"),
    (EndpointConnectionError(endpoint_url="https://lambda.xx-east-9.amazonaws.com/x"),
     "cannot reach https://lambda.xx-east-9.amazonaws.com/x: check the region (xx-east-9), the network or proxy, "
     "and --endpoint-url / AWS_ENDPOINT_URL if you set one"),
    (ClientError({"Error": {"Code": "ExpiredTokenException", "Message": "The security token included in the "
                            "request is expired"}}, "ListStateMachines"),
     "AWS refused ListStateMachines: ExpiredTokenException: The security token included in the request is expired "
     "(your AWS session token expired: refresh your credentials (e.g. `aws sso login`))"),
])
def test_describe_aws_error(exc: BaseException, line: str) -> None:
    assert describe_aws_error(exc, region="xx-east-9") == line
