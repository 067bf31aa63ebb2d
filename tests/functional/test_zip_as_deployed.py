"""The deployment zips tested as they deploy: each built by the code that
deploys it, alone on the path of a bare interpreter (``python -I -S``) with only
what Lambda's runtime and the documented layer give it, driven by the exact
event its caller sends (``_bare_lambda``: a real ``Invoker`` and a small Lambda
runtime).

- Storage: ``build_zip()`` + the standard library + boto3 (Lambda's Python
  runtime ships it). A real ``Daemon`` invokes the storage functions through
  ``ZipInvoker``; they dial it, store chunks, seal their insertion logs into
  moto's S3 server over HTTP; one is SIGKILLed, and its chunks come back (the
  new instance reads its log and chunks from S3 itself).
- Task: see ``tests/integration/test_zip_as_deployed_tasks.py``.

Both check the allow-list: the first-party modules the handlers imported on
the paths they ran, against the zip's modules, both ways.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk._config import Config
from sdk.cli._moto import CREDS, MotoS3
from sdk.local._stack import Stack
from storage_functions.deploy import RUNTIME_FILES, RUNTIME_HANDLER, build_zip
from storage_functions.runtime import log_key
from tests.functional._bare_lambda import (
    LAMBDA_RUNTIME_PACKAGES, ZipInvoker, check_allow_list, failures, package_dir, reachable, zip_modules,
)

@pytest.fixture(scope="module")
def moto_s3() -> Iterator[MotoS3]:
    with MotoS3(prefix="sion") as server:
        yield server


@pytest.fixture(scope="module")
def runtime_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What Lambda's Python runtime adds to the standard library: boto3 and its dependencies."""
    return package_dir(tmp_path_factory.mktemp("lambda-runtime"), *LAMBDA_RUNTIME_PACKAGES)


def test_the_allow_list_check_counts_lazy_imports_and_flags_what_nothing_imports() -> None:
    """``reachable``: a module imported in a function (COS, only when a seal or a recovery needs
    it) counts as used; one imported under ``TYPE_CHECKING`` alone, or not at all, does not."""
    z = build_zip(files=(*RUNTIME_FILES, "storage_functions/invoker.py", "storage_functions/cost.py"))
    got = reachable(z, {"storage_functions.runtime"})
    assert {"storage_functions.cos", "storage_functions.cos._s3", "storage_functions.private_files"} <= got
    # storage_functions/__init__ names .invoker under TYPE_CHECKING only; nothing imports .cost
    assert not {"storage_functions.invoker", "storage_functions.cost"} & got
    assert got == zip_modules(zipfile.ZipFile(io.BytesIO(build_zip())).namelist())


WDS = {"app": "zip-as-deployed", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


def test_storage_zip_as_deployed_seals_into_s3_and_recovers_a_killed_function(
        moto_s3: MotoS3, runtime_packages: Path, tmp_path: Path) -> None:
    import boto3

    zip_bytes = build_zip()
    zip_path = tmp_path / "storage.zip"
    zip_path.write_bytes(zip_bytes)
    url = moto_s3.url()  # s3://bucket/sion?endpoint_url=http://127.0.0.1:PORT
    bucket = url[len("s3://"):].split("/", 1)[0]
    inv = ZipInvoker(zip_path, RUNTIME_HANDLER, paths=(runtime_packages,), env=dict(CREDS), log_dir=tmp_path)
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={}, cos_url=url, ec_data=2, ec_parity=1)
    objs = {"slice": os.urandom(5000), "coded": os.urandom(3 << 20)}
    s3 = boto3.client("s3", endpoint_url=moto_s3.endpoint, region_name="us-east-1")
    try:
        with Stack(cfg, metadata_port=0, daemon_port=0, platform=inv,
                   daemon={"idle_s": 0.3, "max_functions": 3, "group_size": 3, "recovery_group_size": 0}) as st:
            d = st.store.daemon
            assert set(inv.deployed) == {h.name for h in d.handles}
            driver = st.client()
            run = driver.start_run(driver.register_workflow(json.dumps(WDS)))
            for k, v in objs.items():
                run.put(k, v, codec="bytes", adhoc=True)
            for k, v in objs.items():
                assert run.get(k) == v
            assert d.wait_uploads(30)
            placed = {k: d.table.latest(f"{run.run_id}/{k}") for k in objs}
            holders = sorted({d.handles[p[0]].name for o in placed.values() for s in o.stripes
                              for p in s.places if p is not None})
            assert len(holders) == 3
            # each function that stored a chunk says BYE when idle, its insertion log sealed into S3, and
            # returns (a warm-up before: it stored nothing, so sealed nothing)
            def sealed(out: list[tuple[str, Any]]) -> bool:
                return all(any(n == h and r is not None and r.get("result", {}).get("term") for n, r in out)
                           for h in holders)

            assert inv.wait(lambda out: sealed(out) or bool(failures(out)), 60), inv.outcomes
            assert not failures(inv.outcomes), failures(inv.outcomes)
            for h in holders:
                s3.head_object(Bucket=bucket, Key=f"sion/{log_key('sion', h, 1)}")  # the URL's prefix, then the log's
            # SIGKILL the instance holding the slice: its memory is gone; the next invocation is a new
            # process, which finds it lost its memory; the daemon reads its log from S3 and the function
            # downloads its chunk back from S3 itself (RECOVER)
            victim = d.handles[placed["slice"].stripes[0].places[0][0]]
            started = inv.started
            inv.kill(victim.name)
            assert run.get("slice") == objs["slice"]
            assert inv.started == started + 1
            assert d.recovery.wait_idle(30)
            counters = d.counters
            assert counters["lost_functions"] == 1 and counters["manifest_reads"] >= 1, counters
            assert counters["recovery_cos_reads"] >= 1 and counters["chunks_recovered"] >= 1, counters
            assert counters.get("chunks_unrecovered", 0) == 0, counters
            assert "slice" in str(d.function_memory(victim.name, run.run_id)["entries"])  # back in its memory
            for k, v in objs.items():
                assert run.get(k) == v
            run.end_run("succeeded")
            run.close()
            driver.close()
    finally:
        inv.close()
        s3.close()
    assert not failures(inv.outcomes), failures(inv.outcomes)
    replies = [r for _, r in inv.outcomes if r is not None]
    check_allow_list(zip_bytes, zip_path, replies)
