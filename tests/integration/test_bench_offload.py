"""``funcsion bench offload --json`` on one payload under the 256 KiB state limit and one over
it: one JSON object as the last line, the inline peer below the limit and the S3 claim check
(moto's server) above, every figure positive, and the ratios those same figures give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIGURES = {"offload_boundary_p50_us", "offload_boundary_p99_us", "offload_write_p50_us", "offload_read_p50_us",
           "peer_boundary_p50_us", "peer_boundary_p99_us", "peer_write_p50_us", "peer_read_p50_us",
           "offload_e2e_p50_ms", "offload_e2e_p99_ms", "offload_e2e_write_p50_ms", "offload_e2e_read_p50_ms",
           "peer_e2e_p50_ms", "peer_e2e_p99_ms", "peer_e2e_write_p50_ms", "peer_e2e_read_p50_ms",
           "boundary_ratio", "e2e_ratio"}


@pytest.mark.slow
def test_bench_offload_prints_both_peers_and_ratios_as_the_last_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "offload", "--sizes", "4096,300000",
                           "--iters", "3", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["state_limit_bytes"] == 262144 and doc["threshold_bytes"] == 1024
    assert doc["s3"].startswith("moto server")
    assert set(doc["sizes"]) == {"4096", "300000"}
    assert doc["sizes"]["4096"]["peer"] == "inline" and doc["sizes"]["300000"]["peer"] == "s3"
    for row in doc["sizes"].values():
        assert FIGURES <= set(row), FIGURES - set(row)
        assert all(row[k] > 0 for k in FIGURES), row
        assert row["iters"] == 3
        assert row["offload_boundary_p99_us"] >= row["offload_boundary_p50_us"]
        assert row["boundary_ratio"] == round(row["offload_boundary_p50_us"] / row["peer_boundary_p50_us"], 3)
        assert row["e2e_ratio"] == round(row["offload_e2e_p50_ms"] / row["peer_e2e_p50_ms"], 3)
    assert doc["sizes"]["300000"]["s3_delete_p50_us"] > 0
    assert "s3_delete_p50_us" not in doc["sizes"]["4096"]


def test_bench_offload_refuses_sizes_that_would_not_be_offloaded() -> None:
    from sdk.cli import main

    with pytest.raises(SystemExit, match="larger than --threshold 1024"):
        main(["bench", "offload", "--sizes", "512"])
