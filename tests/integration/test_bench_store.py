"""``funcsion bench store --json`` on two small sizes: one JSON object as the last
line with the store's, the raw socket's and (when redis-server is installed)
Redis's keys per size, and the ratios computed from those same keys."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STORE = {"put_p50_us", "get_p50_us", "get_mbps", "put_mbps", "get_into_p50_us", "get_into_mbps", "raw_mbps",
         "put_cpu_us", "put_functions_cpu_us", "get_into_cpu_us", "get_into_functions_cpu_us"}


@pytest.mark.slow
def test_bench_store_prints_sizes_and_ratios_as_the_last_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "store", "--sizes", "4096,2097152",
                           "--iters", "3", "--no-s3", "--large-bytes", str(16 << 20), "--json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc["sizes"]) == {"4096", "2097152"}
    for row in doc["sizes"].values():
        assert STORE <= set(row)
        assert row["get_into_vs_raw"] == round(row["get_into_mbps"] / row["raw_mbps"], 3)
        if shutil.which("redis-server"):
            assert row["get_vs_redis"] == round(row["get_p50_us"] / row["redis_get_p50_us"], 3)
            assert row["put_vs_redis"] == round(row["put_p50_us"] / row["redis_put_p50_us"], 3)
    # a 4 KiB GET on a function idle and while it sends the large object (SION's two queues)
    assert doc["small_behind_large_p99_us"] > 0 and doc["small_idle_p99_us"] > 0
    assert doc["small_behind_large_ratio"] == round(doc["small_behind_large_p99_us"] / doc["small_idle_p99_us"], 3)
    assert doc["small_behind_large"]["shared_function"] and doc["small_behind_large"]["large_gets"] >= 1
    # the PUT's encoder (in place, ISA-L) against pyeclib's, measured in the same run: the
    # headline "encode ~4x cheaper" of the README holds on this machine (4 MiB: one stripe)
    ec = doc["ec"][str(4 << 20)]
    assert ec["encode_inplace_us"] * 2 < ec["encode_us"], ec
