"""``funcsion serve daemon --invoker aws`` end to end against moto: the daemon
the CLI builds invokes the storage functions through ``AwsInvoker`` and
moto's Lambda API (functions created by ``deploy_storage_functions``), with
COS in moto's S3. moto cannot run the code, so a botocore hook on the
daemon's Lambda client hands every asynchronous invocation moto accepted to
the real storage-function runtime on the local Lambda platform (the trick
``sdk/deploy/sfn_local.py`` plays for task Lambdas). Everything talks to moto
over HTTP (its server on loopback), so the function processes reach the same
S3 as the daemon."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.deploy import StorageFunctionConfig, deploy_storage_functions
from storage_functions.local import LocalPlatform, PlatformConfig

REGION = "us-east-1"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
         "AWS_DEFAULT_REGION": REGION}
MiB = 1 << 20


def _moto_api(endpoint: str, path: str, body: dict[str, Any] | None = None) -> None:
    req = urllib.request.Request(f"{endpoint}/moto-api/{path}", data=json.dumps(body or {}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    for name, value in CREDS.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    _moto_api(endpoint, "config", {"lambda": {"use_docker": False}})  # functions are only records
    try:
        yield endpoint
    finally:
        _moto_api(endpoint, "config", {"lambda": {"use_docker": True}})
        _moto_api(endpoint, "reset")
        server.stop()
        if server._server is not None:  # stop() leaves the listening socket open
            server._server.server_close()


class LambdaToPlatform:
    """botocore hooks on one boto3 ``lambda`` client: moto answers each Invoke
    (it knows which functions exist); an asynchronous one it accepted (202)
    then starts with the same payload on the local platform, where the
    function runs the handler moto has on record."""

    def __init__(self, client: Any, platform: LocalPlatform) -> None:
        self.platform = platform
        self.calls: list[tuple[str, str, int]] = []  # (function, invocation type, moto's status)
        self._lock = threading.Lock()
        client.meta.events.register("before-parameter-build.lambda.Invoke", self._request)
        client.meta.events.register("after-call.lambda.Invoke", self._answered)

    def _request(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bridge"] = (params["FunctionName"], params.get("InvocationType", "RequestResponse"),
                             params.get("Payload", b"{}"))

    def _answered(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        name, kind, payload = context.pop("bridge")
        status = int(parsed.get("StatusCode", 0))
        with self._lock:
            self.calls.append((name, kind, status))
        if kind == "Event" and status == 202:
            self.platform.invoke_async(name, json.loads(payload))

    def invocations(self, name: str) -> int:
        with self._lock:
            return sum(1 for n, kind, status in self.calls if n == name and kind == "Event" and status == 202)


def _deploy(endpoint: str, count: int) -> Any:
    """Storage Lambdas sion-0 .. in moto, as `funcsion deploy storage --prefix sion-` makes them."""
    import boto3

    iam = boto3.client("iam", region_name=REGION, endpoint_url=endpoint)
    role = iam.create_role(RoleName="funcsion-storage", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                               "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]["Arn"]
    iam.close()
    lam = boto3.client("lambda", region_name=REGION, endpoint_url=endpoint)
    cfg = StorageFunctionConfig(role_arn=role, memory_mb=256, timeout_s=120, env={"FUNCSION_LOG": "info"})
    assert [r.action for r in deploy_storage_functions(lam, count=count, config=cfg, prefix="sion-")] == [
        "created"] * count
    return lam


def _mirror(lam: Any, platform: LocalPlatform, count: int) -> None:
    """Give the local platform each function moto has on record (handler, memory, timeout, environment)."""
    for i in range(count):
        c = lam.get_function_configuration(FunctionName=f"sion-{i}")
        env = {**c.get("Environment", {}).get("Variables", {}), **CREDS}  # the role's credentials, on AWS
        platform.deploy(c["FunctionName"], c["Handler"], memory_mb=c["MemorySize"], timeout_s=c["Timeout"],
                        env=env, reserved_concurrency=1)


def _keys(s3: Any, prefix: str) -> set[str]:
    return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="funcsion-cos", Prefix=prefix)
            for o in page.get("Contents", [])}


def _args(*argv: str) -> Any:
    from sdk.cli import build_parser

    return build_parser().parse_args(["serve", "daemon", *argv])


@pytest.mark.slow
def test_serve_daemon_aws_puts_gets_and_survives_a_killed_function(moto_endpoint: str, tmp_path: Path) -> None:
    import boto3

    from sdk.cli import serve_daemon
    from storage_functions.cos import S3COS
    from storage_functions.daemon import AwsStore, cos_object_key
    from storage_functions.runtime import snapshot_key

    count = 6
    lam = _deploy(moto_endpoint, count)
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="funcsion-cos")
    warnings: list[str] = []
    args = _args("--invoker", "aws", "--region", REGION, "--endpoint-url", moto_endpoint, "--function-prefix",
                 "sion-", "--cos", f"s3://funcsion-cos/run-1?endpoint_url={moto_endpoint}",
                 "--advertise", "127.0.0.1", "--group-size", "6", "--idle-s", "1", "--root", str(tmp_path))
    with LocalPlatform(PlatformConfig(log_dir=str(tmp_path / "logs"))) as platform:
        _mirror(lam, platform, count)
        store = serve_daemon.build(args, warn=warnings.append)
        assert isinstance(store, AwsStore) and isinstance(store.cos, S3COS)
        assert (store.config.max_functions, store.config.function_memory_mb) == (count, 256)  # from Lambda
        assert any("loopback" in w for w in warnings)
        bridge = LambdaToPlatform(store.daemon.invoker.client, platform)
        objs = {"tiny": os.urandom(10), "slice": os.urandom(200_000), "coded": os.urandom(3 * MiB + 1),
                "two-stripes": os.urandom(9 * MiB)}
        with store, StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=8 * MiB)) as c:
            for k, v in objs.items():
                c.put(k, v)
            for k, v in objs.items():
                assert c.get(k) == v
            assert store.daemon.wait_uploads(30)
            copies = {k: store.daemon.cos_copy(k) for k in objs}
            assert copies["coded"] == (cos_object_key("sion", "coded", 1), 0)  # large: an object of its own
            assert {f"run-1/{c[0]}" for c in copies.values() if c is not None} <= _keys(s3, "run-1/")
            assert None not in copies.values()
            assert {kind for _, kind, _ in bridge.calls} == {"Event"} and all(s == 202 for _, _, s in bridge.calls)
            # the function processes reach the same S3: each seals its insertion log there when it goes idle
            # (a new chain's first seal is a log node; snapshots come every few terms)
            logs = {f"run-1/{snapshot_key('sion', f'sion-{i}').rsplit('/', 1)[0]}/log/" for i in range(count)}

            def sealed() -> bool:
                keys = _keys(s3, "run-1/")
                return all(any(k.startswith(p) for k in keys) for p in logs)

            deadline = time.monotonic() + 30
            while not sealed() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sealed()
            # kill the instance holding the slice: its memory is gone; the daemon invokes the function again
            # through moto, the new instance is empty, and every object still reads (parity, S3)
            victim = f"sion-{store.daemon.table.latest('slice').stripes[0].places[0][0]}"
            before = bridge.invocations(victim)
            killed = platform.kill(victim)
            assert killed
            for k, v in objs.items():
                assert c.get(k) == v
            assert bridge.invocations(victim) > before
            assert store.daemon.counters["lost_functions"] >= 1 and store.daemon.counters["cos_fallbacks"] >= 1
            assert killed[0] not in [i.pid for i in platform.instances(victim)]
            for k, v in objs.items():  # and again, now from what the new instance holds or S3
                assert c.get(k) == v
    s3.close()
    lam.close()


def test_serve_daemon_aws_checks_the_deployment(moto_endpoint: str) -> None:
    """What is deployed bounds the pool: a missing prefix, too few functions, more memory than they have."""
    from sdk.cli import serve_daemon
    from storage_functions.exceptions import COSConfigError

    lam = _deploy(moto_endpoint, 2)
    lam.close()
    base = ("--invoker", "aws", "--region", REGION, "--endpoint-url", moto_endpoint,
            "--cos", f"s3://b/p?endpoint_url={moto_endpoint}",
            "--advertise", "127.0.0.1:7000", "--group-size", "2")
    for extra, match in [(("--function-prefix", "nope-"), "no storage function nope-0 in Lambda"),
                         (("--function-prefix", "sion"), "prefix ending in '-'"),
                         (("--function-prefix", "sion-", "--max-functions", "3"), "only sion-0..sion-1 are deployed"),
                         (("--function-prefix", "sion-", "--group-size", "3"), "group_size=3 needs at least 3"),
                         (("--function-prefix", "sion-", "--function-memory-mb", "512"), "have 256 MB in Lambda")]:
        with pytest.raises(serve_daemon.ServeDaemonError, match=match):
            serve_daemon.build(_args(*base, *extra), warn=lambda _: None)
    store = serve_daemon.build(_args(*base, "--function-prefix", "sion-"), warn=lambda _: None)
    try:
        assert store.config.advertise == "127.0.0.1:7000" and store.config.port == 7000  # binds the advertised port
        assert store.config.dial_address(("127.0.0.1", 7000)) == ("127.0.0.1", 7000)
        with pytest.raises(COSConfigError, match="bucket 'b' does not exist"):
            store.start()
    finally:
        store.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("bucket,endpoint,match", [
    ("nope", None, "COS s3://nope/p/: bucket 'nope' does not exist (s3:PutObject said NoSuchBucket): create it"),
    ("funcsion-cos", "closed", "COS s3://funcsion-cos/p/: S3 is not reachable at http://127.0.0.1:"),
])
def test_serve_daemon_aws_probes_its_cos_prefix_and_fails_in_one_line(
        moto_endpoint: str, bucket: str, endpoint: str | None, match: str, capsys: pytest.CaptureFixture[str]) -> None:
    """At start the daemon writes, reads and deletes one object under its prefix; what fails is one
    line naming the bucket/prefix, the action and the fix, and exit code 2."""
    import boto3

    from sdk.cli import main

    _deploy(moto_endpoint, 2).close()
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="funcsion-cos")
    cos_endpoint = f"http://127.0.0.1:{_free_port()}" if endpoint == "closed" else moto_endpoint
    argv = ["serve", "daemon", "--invoker", "aws", "--region", REGION, "--endpoint-url", moto_endpoint,
            "--function-prefix", "sion-", "--group-size", "2", "--advertise", "127.0.0.1",
            "--cos", f"s3://{bucket}/p?endpoint_url={cos_endpoint}"]
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if "warning:" not in ln]
    assert len(err) == 1 and match in err[0], err
    if endpoint == "closed":
        assert "(EndpointConnectionError on s3:PutObject)" in err[0] and "S3 gateway endpoint" in err[0]
    assert "Contents" not in s3.list_objects_v2(Bucket="funcsion-cos")
    s3.close()


@pytest.fixture
def iam_enforcing_s3() -> Iterator[str]:
    """moto's server as a process of its own that checks IAM after its first 4 requests (the
    bucket, a user, its policy, its key: see the test)."""
    import socket
    import subprocess
    import sys

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, **CREDS, "INITIAL_NO_AUTH_ACTION_COUNT": "4"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.05)  # polling a port that is not open yet: nothing to wait on
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_daemon_aws_names_a_denied_write_and_the_policy_it_needs(
        moto_endpoint: str, iam_enforcing_s3: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The server's credentials may read and delete under the prefix, not write: the probe's
    PUT is denied by IAM (moto checks the user's policy) and the line names the grant."""
    import boto3

    from sdk.cli import main

    _deploy(moto_endpoint, 2).close()
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=iam_enforcing_s3)
    iam = boto3.client("iam", region_name=REGION, endpoint_url=iam_enforcing_s3)
    s3.create_bucket(Bucket="funcsion-cos")
    iam.create_user(UserName="server")
    iam.put_user_policy(UserName="server", PolicyName="cos", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:DeleteObject"],
                                                "Resource": "arn:aws:s3:::funcsion-cos/p/*"}]}))
    key = iam.create_access_key(UserName="server")["AccessKey"]
    s3.close()
    iam.close()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it caches the credentials it first read
    assert main(["serve", "daemon", "--invoker", "aws", "--region", REGION, "--endpoint-url", moto_endpoint,
                 "--function-prefix", "sion-", "--group-size", "2", "--advertise", "127.0.0.1",
                 "--cos", f"s3://funcsion-cos/p?endpoint_url={iam_enforcing_s3}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if "warning:" not in ln]
    assert len(err) == 1 and "COS s3://funcsion-cos/p/: s3:PutObject was denied (AccessDenied" in err[0], err
    assert "s3:PutObject, s3:GetObject and s3:DeleteObject on arn:aws:s3:::funcsion-cos/p/*" in err[0]


def test_the_cos_probe_leaves_nothing_behind(moto_endpoint: str) -> None:
    import boto3

    from storage_functions.daemon import AwsStore

    _deploy(moto_endpoint, 2).close()
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="funcsion-cos")
    store = AwsStore(f"s3://funcsion-cos/p?endpoint_url={moto_endpoint}", function_prefix="sion-",
                     region_name=REGION, endpoint_url=moto_endpoint, group_size=2)
    puts: list[str] = []
    store.cos.client.meta.events.register("provide-client-params.s3.PutObject",
                                          lambda params, **_: puts.append(params["Key"]))
    with store:
        assert len(puts) == 1 and puts[0].startswith("p/.funcsion-probe-")  # under the prefix the role is given
    assert "Contents" not in s3.list_objects_v2(Bucket="funcsion-cos")
    s3.close()


@pytest.mark.parametrize("argv,match", [
    (["--invoker", "aws"], "--invoker aws needs --cos s3://bucket/prefix"),
    (["--invoker", "aws", "--cos", "file:///tmp/cos"], "--invoker aws needs --cos s3://bucket/prefix"),
    (["--invoker", "aws", "--cos", "s3://b/p"], "pass --advertise HOST:PORT"),
    (["--invoker", "aws", "--cos", "s3://b/p", "--advertise", "10.0.0.5:7000"], "bind --host 10.0.0.5"),
    (["--invoker", "aws", "--cos", "s3://b/p", "--advertise", "10.0.0.5:99999", "--host", "0.0.0.0"],
     "port must be a number"),
    (["--region", REGION], "--region is only for --invoker aws"),
])
def test_serve_daemon_bad_arguments_exit_2_with_one_line(argv: list[str], match: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    assert main(["serve", "daemon", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err


def test_serve_daemon_local_is_still_the_default(tmp_path: Path) -> None:
    from sdk.cli import serve_daemon
    from storage_functions.daemon import LocalStore

    store = serve_daemon.build(_args("--root", str(tmp_path)), warn=lambda _: None)
    try:
        assert isinstance(store, LocalStore) and store.daemon.invoker is store.platform
        from sdk import Config

        assert (store.config.max_functions, store.config.function_memory_mb, store.config.host) == (
            48, Config().function_memory_mb, "127.0.0.1")
        assert store.config.cos_url == f"file://{tmp_path}/cos" and store.config.advertise == ""
    finally:
        store.stop()


def test_serve_daemon_aws_process_prints_where_functions_dial_and_stops_on_sigterm(moto_endpoint: str) -> None:
    import select
    import signal
    import subprocess
    import sys

    import boto3

    _deploy(moto_endpoint, 2).close()
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="funcsion-cos")
    s3.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", "daemon", "--invoker", "aws", "--region", REGION,
         "--endpoint-url", moto_endpoint, "--function-prefix", "sion-", "--group-size", "2",
         "--cos", f"s3://funcsion-cos/p?endpoint_url={moto_endpoint}", "--advertise", "127.0.0.1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "serve daemon printed nothing in 60 s"
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        host, port = info["address"].rsplit(":", 1)
        assert host == "127.0.0.1" and info["advertise"] == f"127.0.0.1:{port}" and info["invoker"] == "aws"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "loopback" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
