"""The AWS path without surprises (issue 16 item 6): ``deploy --target aws --dry-run --out DIR``
writes the ASL and both zips and calls nothing; a missing ``--layer`` is warned about; botocore's
errors (no credentials, an unreachable endpoint, a refusal) are one line naming the step, not a
traceback."""

from __future__ import annotations

import hashlib
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

from sdk.deploy._aws_errors import describe_aws_error
from sdk.deploy._stack import DRY_RUN_FILES, bundle
from sdk.deploy._template import TemplateSettings
from sdk.deploy._zip import build_task_zip
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


def test_dry_run_writes_the_template_and_zips_without_aws(example_paths: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "plan"
    proc = cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--dry-run", "--out", str(out),
               "--layer", "arn:aws:lambda:us-east-1:123456789012:layer:funcsion:1", "--param", "mappers=8",
               "--storage-functions", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # a layer was given: no warning
    assert sorted(p.name for p in out.iterdir()) == sorted(DRY_RUN_FILES)
    assert (out / "task.zip").read_bytes() == build_task_zip(example_paths["wordcount"].parent)
    assert (out / "storage.zip").read_bytes() == build_zip()
    assert "handlers.py" in zipfile.ZipFile(io.BytesIO((out / "task.zip").read_bytes())).namelist()
    template = json.loads((out / "template.json").read_text())
    expected = bundle(example_paths["wordcount"], params={"mappers": 8}, settings=TemplateSettings(storage_functions=5))
    assert template == expected.template
    res = template["Resources"]
    assert sorted(k for k, r in res.items() if r["Type"] == "AWS::Lambda::Function") == sorted(
        [f"Storage{i}" for i in range(5)] + ["TaskSplitter", "TaskMapper", "TaskReducer", "TaskMerger",
                                             "TaskFuncsionCleanup", "StatusCleanup"])
    assert res["TaskSplitter"]["Properties"]["Handler"] == "handlers.splitter"
    asl = json.loads(res["StateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"])
    assert len(asl["States"]["map_stage: replicas"]["Result"]["items"]) == 8
    used = {s["Parameters"]["FunctionName"] for s in _task_states(asl)}
    assert used == {"${TaskSplitter.Arn}", "${TaskMapper.Arn}", "${TaskReducer.Arn}", "${TaskMerger.Arn}",
                    "${TaskFuncsionCleanup.Arn}"}
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert (doc["out"], doc["stack"], doc["files"]) == (str(out), "funcsion-word-count", list(DRY_RUN_FILES))
    assert doc["artifacts"]["task"].endswith(f"{hashlib.sha256((out / 'task.zip').read_bytes()).hexdigest()}.zip")


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


def test_dry_run_needs_no_aws_settings_and_warns_without_a_layer(example_paths: dict[str, Path], tmp_path: Path) -> None:
    proc = cli("deploy", str(example_paths["wordcount"]), "--target", "aws", "--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (
        "funcsion deploy: warning: no --layer given; the task Lambdas import thrift, pyeclib, msgpack, "
        "aws-lambda-powertools, which only a layer provides (docs/deploy-aws.md, \"The layer for the task Lambdas\"), so every task would fail "
        "with Runtime.ImportModuleError")
    assert json.loads((tmp_path / "template.json").read_text())["Parameters"]["TaskLayerArns"]["Default"] == ""


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
    line = one_line_error(cli("deploy", str(example_paths["wordcount"]), "--target", "aws",
                              env={"AWS_DEFAULT_REGION": "us-east-1"}))
    assert line == ("funcsion deploy: reading stack funcsion-word-count: no AWS credentials "
                    "found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or run `aws configure`")
    storage = one_line_error(cli("deploy", "storage", "--role-arn", ROLE, "--count", "1",
                                 env={"AWS_DEFAULT_REGION": "us-east-1"}))
    assert storage.startswith("funcsion deploy: deploying the storage functions: no AWS credentials found")


def test_an_unreachable_endpoint_is_one_line(example_paths: dict[str, Path]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = one_line_error(cli("deploy", str(example_paths["wordcount"]), "--target", "aws",
                              "--endpoint-url", f"http://127.0.0.1:{port}", "--region", "eu-west-1",
                              env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}))
    assert line.startswith(f"funcsion deploy: reading stack funcsion-word-count: cannot reach http://127.0.0.1:{port}/")
    assert line.endswith("check the region (eu-west-1), the network or proxy, and --endpoint-url / AWS_ENDPOINT_URL "
                         "if you set one")


def test_a_bad_tls_file_or_cos_url_is_one_line(example_paths: dict[str, Path], tmp_path: Path) -> None:
    env = {"AWS_DEFAULT_REGION": "us-east-1"}
    wc = str(example_paths["wordcount"])
    line = one_line_error(cli("deploy", wc, "--target", "aws", "--tls-ca", str(tmp_path / "ca.pem"), env=env))
    assert line == (f"funcsion deploy: --tls-ca {tmp_path / 'ca.pem'}: No such file or directory: give the PEM file "
                    "`funcsion certs DIR` wrote")
    (tmp_path / "ca.pem").write_text("not a certificate")
    line = one_line_error(cli("deploy", wc, "--target", "aws", "--tls-ca", str(tmp_path / "ca.pem"), env=env))
    assert line.endswith("not a PEM file (no -----BEGIN line): give the PEM file `funcsion certs DIR` wrote")
    line = one_line_error(cli("deploy", wc, "--target", "aws", "--cos", "my-bucket", env=env))
    assert line == ("funcsion deploy: --cos 'my-bucket': write s3://BUCKET/PREFIX (an existing bucket and a key "
                    "prefix, e.g. s3://my-bucket/funcsion)")


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
