"""File-like values end to end: ``put`` of an open file streams it one stripe at a
time, ``get(stream=True)`` reads it back the same way, in drivers and in tasks."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from sdk.exceptions import CodecError, DuplicateWrite
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos

WF = Path(__file__).resolve().parent / "streamwf" / "stream.wds.json"
SIZE = 20 * (1 << 20) + 3          # three stripes, the last one short


@pytest.fixture(scope="module")
def blob(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("blob") / "blob.bin"
    p.write_bytes(os.urandom(SIZE))
    return p


@pytest.fixture
def run(stack: Stack):  # type: ignore[no-untyped-def]
    with stack.client() as c:
        key = c.register_workflow(WF.read_text(), source=str(WF))
        r = c.start_run(key)
        yield r
        r.end_run("failed")
        r.close()


class Pipe(io.RawIOBase):
    """A source that cannot seek (like a socket or a process's stdout)."""

    def __init__(self, data: bytes) -> None:
        self._src = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        return self._src.readinto(b)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_file_in_stream_out_and_plain_get_agree(run, blob: Path) -> None:  # type: ignore[no-untyped-def]
    with blob.open("rb") as f:
        run.put("blob", f)
    data = blob.read_bytes()
    with run.get("blob", stream=True) as s:
        assert (s.size, s.codec) == (SIZE, "bytes")
        head = s.read(10)
        rest = b"".join(bytes(p) for p in s)
    assert head + rest == data
    assert run.get("blob") == data
    assert run.lookup("blob").size == SIZE + 1        # the codec byte


def test_retry_of_the_same_bytes_is_the_same_write_either_way(run, blob: Path) -> None:  # type: ignore[no-untyped-def]
    data = blob.read_bytes()
    run.put("blob", data)                             # in memory first
    with blob.open("rb") as f:
        run.put("blob", f)                            # then as a file: same checksum, accepted
    with pytest.raises(DuplicateWrite, match="write-once"):
        run.put("blob", io.BytesIO(data[:-1]))


def test_unseekable_source_is_spooled(run) -> None:  # type: ignore[no-untyped-def]
    data = os.urandom(3 * (1 << 20) + 5)
    run.put("blob", io.BufferedReader(Pipe(data)))
    with run.get("blob", stream=True) as s:
        assert sha(s.read()) == sha(data)


def test_bad_file_values_are_clear_errors(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "t.txt"
    p.write_text("text")
    with p.open("r") as f, pytest.raises(CodecError, match="open the file in binary mode"):
        run.put("blob", f)
    with pytest.raises(CodecError, match="drop codec='json'"):
        run.put("blob", io.BytesIO(b"x"), codec="json")
    assert run.lookup("blob").state == "pending"      # nothing was written


def test_streamed_json_object_says_its_codec(run) -> None:  # type: ignore[no-untyped-def]
    run.put("blob", {"a": 1})
    with run.get("blob", stream=True) as s:
        assert s.codec == "json" and json.loads(s.read()) == {"a": 1}


def test_cos_tier_streams_too(stack: Stack, blob: Path) -> None:
    with stack.client() as c:
        key = c.register_workflow(WF.read_text(), source=str(WF))
        r = c.start_run(key, latency_sensitive=False)
        try:
            with blob.open("rb") as f:
                r.put("blob", f)
            assert r.lookup("blob").placement.tier == "cos"
            with r.get("blob", stream=True) as s:
                assert sha(b"".join(bytes(p) for p in s)) == sha(blob.read_bytes())
        finally:
            r.end_run("failed")
            r.close()


def test_a_task_streams_its_input_and_puts_a_file(stack: Stack, blob: Path) -> None:
    report = run_workflow(WF, config=stack.config, stack=stack, inputs={"blob": str(blob)},
                          options=ExecutorOptions(progress=False))
    assert report.status == "succeeded", report.error
    assert report.memory["leaked_bytes"] == 0
    with open_cos(stack.config.resolved_cos_url) as cos:
        copy = cos.get(f"outputs/{report.run_id}/copy")
    assert sha(copy) == sha(blob.read_bytes())
