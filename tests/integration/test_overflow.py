"""Overflow never fails a put: on a tiny storage pool (12 functions of two 1 MiB blocks,
no room to scale out) an object larger than any function holds goes to the COS tier, the
run succeeds with the right output, and the report says which objects went to COS and why."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk._config import Config
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos

WF = Path(__file__).resolve().parent / "overflowwf" / "overflow.wds.json"
TINY = {"max_functions": 12, "group_size": 12, "function_memory_mb": 128, "runtime_overhead_mb": 126}


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=TINY) as st:
        yield st


def _expected(seed: bytes, tag: bytes, n: int) -> list[object]:
    block = hashlib.sha256(seed + tag).digest() * 32
    data = (block * (n // len(block) + 1))[:n]
    return [n, hashlib.sha256(data).hexdigest()]


def test_objects_larger_than_the_pool_go_to_cos_and_the_run_succeeds(tiny: Stack, tmp_path: Path) -> None:
    seed = tmp_path / "seed.txt"
    seed.write_text("overflow")
    assert tiny.stats()["total_blocks"] == 24
    r = run_workflow(WF, config=tiny.config, stack=tiny, inputs={"seed": str(seed)},
                     options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    big = r.objects["too_big"]
    assert big["tier"] == "cos"
    assert big["tier_reason"].startswith("no room in the storage functions' pool (24 blocks of 1,048,576 bytes "
                                         "needed"), big
    assert r.objects["fits"]["tier"] == "memory" and r.objects["fits"]["tier_reason"] is None
    assert r.memory["leaked_bytes"] == 0
    with open_cos(tiny.config.resolved_cos_url) as cos:
        result = json.loads(cos.get(f"outputs/{r.run_id}/result"))
        assert cos.list(f"tier/{r.run_id}/") == []          # the COS-tier copy went with the object
    task_seed = b"overflow"                                # what the handler derives its bytes from
    assert result == {"fits": _expected(task_seed, b"a", 3_000_000),
                      "too_big": _expected(task_seed, b"b", 20_000_000)}
    assert tiny.groups_registered == 1                    # scale-out asked, but the pool is at its size
