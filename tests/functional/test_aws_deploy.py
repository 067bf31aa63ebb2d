"""Packaging and deploying the storage functions to AWS Lambda through
boto3, against moto (creation, update, configuration; moto cannot run the
code), the ``funcsion deploy storage`` command, and both invokers."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_functions.deploy import (
    RUNTIME_HANDLER, StorageFunctionConfig, build_zip, code_sha256, deploy_storage_functions,
)
from storage_functions.exceptions import DeployError, FunctionNotDeployed, InvalidPayload, InvocationFailed
from storage_functions.invoker import AwsInvoker, LocalInvoker

REGION = "us-east-1"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from moto import mock_aws

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", REGION), ("AWS_SESSION_TOKEN", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        import boto3

        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="funcsion-storage", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                   "Principal": {"Service": "lambda.amazonaws.com"}}]}))
        lam = boto3.client("lambda", region_name=REGION)
        yield {"role_arn": role["Role"]["Arn"], "lambda": lam}
        lam.close()
        iam.close()


def config_of(lam: Any, name: str) -> dict[str, Any]:
    return lam.get_function_configuration(FunctionName=name)  # type: ignore[no-any-return]


def test_zip_is_reproducible_and_holds_only_the_runtime() -> None:
    z = build_zip()
    assert z == build_zip() and code_sha256(z) == code_sha256(build_zip())
    names = zipfile.ZipFile(io.BytesIO(z)).namelist()
    assert "storage_functions/runtime/__init__.py" in names and "funcsion_errors/__init__.py" in names
    assert "storage_functions/exceptions.py" in names and "storage_functions/protocol.py" in names
    # the COS adapters go in: every invocation that stored data seals its insertion log into COS
    assert {"storage_functions/cos/__init__.py", "storage_functions/cos/_s3.py"} <= set(names)
    # the VM-side daemon, the local platform, the invoker and deploy code stay out
    assert not any(n.startswith(("storage_functions/local/", "storage_functions/daemon/",
                                 "sdk/", "wds/", "funcsion_rpc/"))
                   or n in ("storage_functions/invoker.py", "storage_functions/deploy.py")
                   or "__pycache__" in n or n.endswith(".pyc") for n in names), names
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(io.BytesIO(z)).infolist())


def test_zip_imports_with_the_standard_library_alone(tmp_path: Path) -> None:
    """As in Lambda: only the zip on sys.path (isolated: no PYTHONPATH, no site-packages)."""
    zpath = tmp_path / "storage.zip"
    zpath.write_bytes(build_zip())
    code = (f"import sys; sys.path.insert(0, {str(zpath)!r}); "
            "import storage_functions, storage_functions.runtime; "
            f"assert storage_functions.__file__.startswith({str(zpath)!r}), storage_functions.__file__; "
            "h = storage_functions.runtime.handler; assert callable(h); "
            "import importlib.util as u; assert u.find_spec('storage_functions.daemon') is None; "
            "assert 'boto3' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_zip_allow_list_entries_must_exist(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="'storage_functions/gone.py' matches no file"):
        build_zip(files=("storage_functions/gone.py",))


def test_create_then_rerun_changes_nothing(aws: dict[str, Any]) -> None:
    cfg = StorageFunctionConfig(role_arn=aws["role_arn"], memory_mb=1536, timeout_s=600, env={"FUNCSION_X": "1"})
    first = deploy_storage_functions(aws["lambda"], count=3, config=cfg, prefix="sion-")
    assert [(r.name, r.action) for r in first] == [("sion-0", "created"), ("sion-1", "created"), ("sion-2", "created")]
    c = config_of(aws["lambda"], "sion-1")
    assert (c["MemorySize"], c["Timeout"], c["Handler"], c["Runtime"], c["Role"]) == (
        1536, 600, RUNTIME_HANDLER, "python3.12", aws["role_arn"])
    assert c["Environment"]["Variables"] == {"FUNCSION_X": "1"} and c["CodeSha256"] == first[0].code_sha256
    assert c["FunctionArn"] == first[1].arn
    again = deploy_storage_functions(aws["lambda"], count=3, config=cfg, prefix="sion-")
    assert [r.action for r in again] == ["unchanged"] * 3


def test_update_code_and_configuration(aws: dict[str, Any]) -> None:
    lam = aws["lambda"]
    cfg = StorageFunctionConfig(role_arn=aws["role_arn"])
    deploy_storage_functions(lam, count=2, config=cfg)
    bigger = StorageFunctionConfig(role_arn=aws["role_arn"], memory_mb=3008, env={"FUNCSION_LOG": "debug"})
    res = deploy_storage_functions(lam, count=3, config=bigger)  # also scales out by one
    assert [r.action for r in res] == ["updated", "updated", "created"]
    assert set(res[0].changed) == {"MemorySize", "Environment"}
    c = config_of(lam, "funcsion-storage-0")
    assert c["MemorySize"] == 3008 and c["Environment"]["Variables"] == {"FUNCSION_LOG": "debug"}
    new_code = build_zip() + b""  # same bytes: unchanged; a different runtime: code update
    assert [r.action for r in deploy_storage_functions(lam, count=3, config=bigger, zip_bytes=new_code)] == [
        "unchanged"] * 3
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("storage_functions/__init__.py", "# v2\n")
    res = deploy_storage_functions(lam, count=1, config=bigger, zip_bytes=other.getvalue())
    assert res[0].action == "updated" and res[0].changed == ("Code",)
    assert config_of(lam, "funcsion-storage-0")["CodeSha256"] == code_sha256(other.getvalue())


def test_deploy_errors_are_clear(aws: dict[str, Any]) -> None:
    with pytest.raises(DeployError, match="not an IAM role ARN"):
        StorageFunctionConfig(role_arn="funcsion-role")
    with pytest.raises(DeployError, match="memory_mb"):
        StorageFunctionConfig(role_arn=aws["role_arn"], memory_mb=64)
    with pytest.raises(DeployError, match="timeout_s"):
        StorageFunctionConfig(role_arn=aws["role_arn"], timeout_s=901)
    with pytest.raises(DeployError, match="environment variable"):
        StorageFunctionConfig(role_arn=aws["role_arn"], env={"1BAD": "x"})
    cfg = StorageFunctionConfig(role_arn=aws["role_arn"])
    with pytest.raises(DeployError, match="count"):
        deploy_storage_functions(aws["lambda"], count=0, config=cfg)
    with pytest.raises(DeployError, match="prefix"):
        deploy_storage_functions(aws["lambda"], count=1, config=cfg, prefix="bad prefix")
    missing = StorageFunctionConfig(role_arn="arn:aws:iam::123456789012:role/no-such-role")
    with pytest.raises(DeployError, match="deploying storage function funcsion-storage-0: .*done before it: none"):
        deploy_storage_functions(aws["lambda"], count=1, config=missing)


def test_cli_deploys_and_reports_json(aws: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from sdk.cli import main

    argv = ["deploy", "storage", "--count", "2", "--role-arn", aws["role_arn"], "--memory-mb", "2048",
            "--env", "FUNCSION_A=1", "--region", REGION, "--zip-out", str(tmp_path / "s.zip"), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [f["action"] for f in doc["functions"]] == ["created", "created"]
    assert (tmp_path / "s.zip").read_bytes() == build_zip() and doc["code_sha256"] == code_sha256(build_zip())
    assert config_of(aws["lambda"], "funcsion-storage-1")["MemorySize"] == 2048
    assert main(argv) == 0
    assert [f["action"] for f in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["functions"]] == [
        "unchanged", "unchanged"]


def test_cli_defaults_come_from_the_config(aws: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No --count, --memory-mb or --role-arn: the config's storage_functions, function_memory_mb, role_arn."""
    from sdk.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUNCSION_STORAGE_FUNCTIONS", "2")
    monkeypatch.setenv("FUNCSION_ROLE_ARN", aws["role_arn"])
    (tmp_path / "funcsion.toml").write_text("function_memory_mb = 512\n")
    assert main(["deploy", "storage", "--region", REGION, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [f["name"] for f in doc["functions"]] == ["funcsion-storage-0", "funcsion-storage-1"]
    assert config_of(aws["lambda"], "funcsion-storage-1")["MemorySize"] == 512


@pytest.mark.parametrize("extra,match", [
    ([], "--role-arn is required"),
    (["--role-arn", "arn:aws:iam::123456789012:role/r", "--env", "NOEQUALS"], "--env 'NOEQUALS'"),
    (["--role-arn", "not-an-arn"], "not an IAM role ARN"),
    (["--role-arn", "arn:aws:iam::123456789012:role/r", "--count", "0"], "count must be"),
])
def test_cli_bad_input_exits_2(aws: dict[str, Any], capsys: pytest.CaptureFixture[str], extra: list[str],
                               match: str) -> None:
    from sdk.cli import main

    assert main(["deploy", "storage", "--region", REGION, *extra]) == 2
    assert match in capsys.readouterr().err


def test_aws_invoker_against_moto(aws: dict[str, Any]) -> None:
    inv = AwsInvoker(aws["lambda"])
    with pytest.raises(FunctionNotDeployed, match="'nobody' is not deployed"):
        inv.invoke_async("nobody", {"a": 1})
    with pytest.raises(InvalidPayload, match="not JSON"):
        inv.invoke_async("nobody", {"a": {1}})
    with pytest.raises(InvalidPayload, match="262144-byte limit"):
        inv.invoke_async("nobody", {"a": "x" * 300_000})


class FakeLambda:
    """A boto3 lambda client double: answers from a script of responses."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def _client_error(code: str, status: int = 400) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "Invoke")


def test_aws_invoker_event_sync_errors_and_throttling() -> None:
    from storage_functions.cos import RetryPolicy
    from storage_functions.exceptions import ConcurrencyLimit

    sleeps: list[float] = []
    fake = FakeLambda(
        _client_error("TooManyRequestsException", 429), {"StatusCode": 202},
        {"StatusCode": 200, "Payload": io.BytesIO(b'{"ok": true}')},
        {"StatusCode": 200, "FunctionError": "Unhandled", "ResponseMetadata": {"RequestId": "r-1"},
         "Payload": io.BytesIO(json.dumps({"errorType": "ValueError", "errorMessage": "bad",
                                           "stackTrace": ["  File x\n"]}).encode())},
        *[_client_error("TooManyRequestsException", 429)] * 3,
    )
    inv = AwsInvoker(fake, qualifier="live", retry=RetryPolicy(max_attempts=3, jitter=False), sleep=sleeps.append)
    assert inv.invoke_async("f", {"k": 1}) is None
    assert fake.calls[-1]["InvocationType"] == "Event" and fake.calls[-1]["Qualifier"] == "live"
    assert json.loads(fake.calls[-1]["Payload"]) == {"k": 1} and sleeps == [0.05]
    assert inv.invoke("f", {}) == {"ok": True} and fake.calls[-1]["InvocationType"] == "RequestResponse"
    with pytest.raises(InvocationFailed, match=r"f \(request r-1\): ValueError: bad") as info:
        inv.invoke("f", {})
    assert info.value.error_type == "ValueError" and info.value.stack_trace == "  File x\n"
    with pytest.raises(ConcurrencyLimit, match="throttled by Lambda after 3 attempts"):
        inv.invoke_async("f", {})


def test_local_invoker_over_the_local_platform(tmp_path: Path) -> None:
    from storage_functions.local import LocalPlatform, PlatformConfig

    (tmp_path / "inv_handlers.py").write_text(
        "SEEN = []\n"
        "def handler(event, context):\n"
        "    SEEN.append(event)\n"
        "    return {'seen': len(SEEN)}\n")
    with LocalPlatform(PlatformConfig(), environ={}) as p:
        p.deploy("f", "inv_handlers:handler", code_paths=[tmp_path])
        inv = LocalInvoker(p)
        assert inv.invoke("f", {"a": 1}) == {"seen": 1}
        inv.invoke_async("f", {"a": 2})
        with pytest.raises(FunctionNotDeployed):
            inv.invoke_async("g", {})
        with pytest.raises(InvalidPayload):
            inv.invoke("f", {"a": object()})
        import time

        deadline = time.monotonic() + 10
        while len(p.records("f")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert inv.invoke("f", {}) == {"seen": 3}
