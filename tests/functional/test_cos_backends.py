"""One COS test suite, run against the local directory and against S3 through
moto's server mode on loopback (a real HTTP endpoint, boto3 end to end)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_functions.cos import COS, LocalCOS, S3COS, open_cos
from storage_functions.exceptions import COSError, COSNotFound, InvalidKey

CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        if server._server is not None:  # stop() leaves the listening socket open
            server._server.server_close()


@pytest.fixture
def s3_client(moto_endpoint: str) -> Iterator[Any]:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, **CREDS)
    yield client
    client.close()


@pytest.fixture(params=["local", "s3"])
def cos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[COS]:
    if request.param == "local":
        store: COS = open_cos(f"file://{tmp_path}/cos")
    else:
        client = request.getfixturevalue("s3_client")
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        store = open_cos(f"s3://{bucket}/run-1", client=client)
    with store:
        yield store


def test_put_get_roundtrip_of_every_bytes_like(cos: COS) -> None:
    cos.put("a", b"bytes")
    cos.put("b", bytearray(b"bytearray"))
    cos.put("c", memoryview(b"xxmemoryviewxx")[2:-2])
    cos.put("empty", b"")
    assert [cos.get(k) for k in ("a", "b", "c", "empty")] == [b"bytes", b"bytearray", b"memoryview", b""]


def test_large_object(cos: COS) -> None:
    blob = os.urandom(3 * 1024 * 1024 + 7)
    cos.put("big/blob", blob)
    assert cos.get("big/blob") == blob
    assert cos.get_range("big/blob", 1024 * 1024, 10) == blob[1024 * 1024 : 1024 * 1024 + 10]


def test_overwrite_replaces(cos: COS) -> None:
    cos.put("k", b"old-and-longer")
    cos.put("k", b"new")
    assert cos.get("k") == b"new"


def test_missing_key_is_cos_not_found(cos: COS) -> None:
    for call in (lambda: cos.get("no/such"), lambda: cos.get_range("no/such", 0, 4),
                 lambda: cos.get_range("no/such", 0, 0)):
        with pytest.raises(COSNotFound, match="no key 'no/such'"):
            call()
    assert not cos.exists("no/such")


@pytest.mark.parametrize("start,length,expect", [
    (0, 3, b"012"), (3, 4, b"3456"), (8, 100, b"89"), (10, 5, b""), (50, 5, b""), (4, 0, b""),
])
def test_get_range_cuts_at_the_end(cos: COS, start: int, length: int, expect: bytes) -> None:
    cos.put("r", b"0123456789")
    assert cos.get_range("r", start, length) == expect


def test_get_range_of_an_empty_object(cos: COS) -> None:
    cos.put("e", b"")
    assert cos.get_range("e", 0, 10) == b""


def test_delete_is_idempotent(cos: COS) -> None:
    cos.put("d/x", b"1")
    assert cos.exists("d/x")
    cos.delete("d/x")
    cos.delete("d/x")
    cos.delete("never/was")
    assert not cos.exists("d/x") and cos.list() == []


def test_a_key_and_keys_below_it_coexist(cos: COS) -> None:
    cos.put("a", b"1")
    cos.put("a/b", b"2")
    cos.put("a/b/c", b"3")
    assert cos.list() == ["a", "a/b", "a/b/c"]
    assert [cos.get(k) for k in cos.list()] == [b"1", b"2", b"3"]
    cos.delete("a/b")
    assert cos.list() == ["a", "a/b/c"] and cos.exists("a/b/c") and not cos.exists("a/b")


def test_list_is_a_sorted_string_prefix(cos: COS) -> None:
    keys = ["run/obj-2/c1", "run/obj-1/c0", "run/obj-10/c0", "run2/x", "other/y", "run/obj-1/c1"]
    for k in keys:
        cos.put(k, b"")
    assert cos.list() == sorted(keys)
    assert cos.list("run/") == ["run/obj-1/c0", "run/obj-1/c1", "run/obj-10/c0", "run/obj-2/c1"]
    assert cos.list("run/obj-1") == ["run/obj-1/c0", "run/obj-1/c1", "run/obj-10/c0"]
    assert cos.list("run") == sorted(k for k in keys if k.startswith("run"))
    assert cos.list("nothing/") == []


def test_odd_characters_roundtrip(cos: COS) -> None:
    keys = ["sp ace/ü-ñ", "pct%2F/x", "%obj", "%tmp/y", "a:b=c&d", "..dots../f", "tilde~/*star*"]
    for i, k in enumerate(keys):
        cos.put(k, str(i).encode())
    assert cos.list() == sorted(keys)
    assert [cos.get(k) for k in keys] == [str(i).encode() for i in range(len(keys))]


def test_delete_prefix_counts_and_spares_the_rest(cos: COS) -> None:
    for i in range(25):
        cos.put(f"runs/r1/o{i}", b"x")
    cos.put("runs/r10/o", b"x")
    cos.put("runs/r2/o", b"x")
    assert cos.delete_prefix("runs/r1/") == 25
    assert cos.list() == ["runs/r10/o", "runs/r2/o"]
    assert cos.delete_prefix("runs/r1/") == 0
    assert cos.delete_prefix("runs/r") == 2 and cos.list() == []


def test_bad_keys_fail_before_any_call(cos: COS) -> None:
    for bad in ("", "/abs", "a//b", "../up", "a\\b"):
        with pytest.raises(InvalidKey):
            cos.put(bad, b"")
    assert cos.stats.puts == 0 and cos.list() == []


def test_stats_count_calls_and_bytes(cos: COS) -> None:
    cos.put("s", b"12345")
    cos.get("s")
    cos.get_range("s", 1, 2)
    cos.list()
    cos.delete("s")
    s = cos.stats
    assert (s.puts, s.gets, s.lists, s.deletes, s.bytes_put, s.bytes_got, s.errors) == (1, 2, 1, 1, 5, 7, 0)


def test_url_reopens_the_same_store(cos: COS, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    cos.put("shared/k", b"v")
    if isinstance(cos, S3COS):  # the endpoint must travel in the URL
        again = open_cos(cos.url, endpoint_url=cos.client.meta.endpoint_url)
        assert open_cos(again.url).url == again.url and "endpoint_url=" in again.url
    else:
        again = open_cos(cos.url)
    with again:
        assert again.get("shared/k") == b"v" and again.list() == ["shared/k"]


def test_concurrent_writers_and_readers_see_whole_objects(cos: COS) -> None:
    blobs = [bytes([i]) * 200_000 for i in range(4)]
    cos.put("hot", blobs[0])
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(i: int) -> None:
        try:
            for _ in range(5):
                cos.put("hot", blobs[i])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                assert cos.get("hot") in blobs
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads[:4]:
        t.join()
    stop.set()
    threads[4].join()
    assert errors == []
    assert cos.get("hot") in blobs


# -- backend specifics ------------------------------------------------------

def test_local_leaves_no_temp_files_or_empty_dirs(tmp_path: Path) -> None:
    cos = LocalCOS(tmp_path / "c", fsync=True)
    cos.put("deep/er/key", b"1")
    cos.put("deep/other", b"2")
    assert cos.list() == ["deep/er/key", "deep/other"]
    cos.delete("deep/er/key")
    cos.delete("deep/other")
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["%tmp"]
    assert list((tmp_path / "c" / "%tmp").iterdir()) == []


def test_local_refuses_relative_or_missing_roots(tmp_path: Path) -> None:
    with pytest.raises(COSError, match="absolute"):
        LocalCOS("relative/dir")
    with pytest.raises(COSError, match="not a directory"):
        LocalCOS(tmp_path / "missing", create=False)
    assert open_cos(f"file://{tmp_path}/f?fsync=1").fsync is True  # type: ignore[attr-defined]


def test_local_refuses_a_segment_too_long_for_the_filesystem(tmp_path: Path) -> None:
    cos = LocalCOS(tmp_path)
    with pytest.raises(InvalidKey, match="too long"):
        cos.put("é" * 100, b"")  # 600 bytes once percent-encoded


def test_s3_prefixes_isolate_stores_in_one_bucket(s3_client: Any) -> None:
    s3_client.create_bucket(Bucket="shared-bkt")
    a = S3COS("shared-bkt", "run-a", client=s3_client)
    b = S3COS("shared-bkt", "/run-b/", client=s3_client)
    a.put("k", b"a")
    b.put("k", b"b")
    assert (a.get("k"), b.get("k"), a.list(), b.list()) == (b"a", b"b", ["k"], ["k"])
    assert a.delete_prefix("k") == 1 and b.get("k") == b"b"
    keys = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket="shared-bkt")["Contents"])
    assert keys == ["run-b/k"]


def test_s3_creates_a_missing_bucket_and_builds_its_own_client(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with open_cos(f"s3://fresh-bkt/p?endpoint_url={moto_endpoint}&region=us-east-1", create_bucket=True) as cos:
        cos.put("x", b"1")
        assert cos.get("x") == b"1"
        assert cos.url == f"s3://fresh-bkt/p?endpoint_url={moto_endpoint.replace(':', '%3A').replace('/', '%2F')}&region=us-east-1"


def test_s3_unreachable_endpoint_fails_after_retries() -> None:
    import socket

    from storage_functions.cos import RetryPolicy

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                          config=Config(retries={"total_max_attempts": 1}), **CREDS)
    try:
        cos = S3COS("b", client=client, retry=RetryPolicy(max_attempts=2, base_delay_s=0.01), sleep=lambda s: None)
        with pytest.raises(COSError, match="failed after 2 attempts: EndpointConnectionError"):
            cos.get("k")
    finally:
        client.close()


@pytest.mark.parametrize("offset,length", [(0, None), (1000, 70_000), (0, 0)])
def test_put_file_stores_a_file_or_its_range(cos: COS, tmp_path: Path, offset: int, length: int | None) -> None:
    body = os.urandom(9 << 20)  # past boto3's multipart threshold for the whole file
    path = tmp_path / "src.bin"
    path.write_bytes(body)
    before = cos.stats
    cos.put_file("pf/obj", path, offset, length)
    want = body[offset:] if length is None else body[offset:offset + length]
    assert cos.get("pf/obj") == want
    after = cos.stats
    assert after.puts == before.puts + 1 and after.bytes_put == before.bytes_put + len(want)
    assert path.read_bytes() == body  # the source is untouched


def test_put_file_of_a_missing_file_is_a_cos_error_and_bad_ranges_are_refused(cos: COS, tmp_path: Path) -> None:
    with pytest.raises(COSError):
        cos.put_file("pf/none", tmp_path / "absent.bin")
    with pytest.raises(ValueError, match="offset and length"):
        cos.put_file("pf/neg", tmp_path / "absent.bin", -1)


def test_local_put_file_links_a_whole_file(tmp_path: Path) -> None:
    cos = LocalCOS(tmp_path / "cos")
    src = tmp_path / "whole.bin"
    src.write_bytes(b"x" * 5000)
    cos.put_file("linked", src)
    assert os.stat(cos._path("linked")).st_ino == os.stat(src).st_ino
    cos.put_file("copied", src, 10, 100)
    assert os.stat(cos._path("copied")).st_ino != os.stat(src).st_ino and cos.get("copied") == b"x" * 100
