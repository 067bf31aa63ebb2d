"""``funcsion bench run --quick --json``: a smoke run of the command (its figures are
measurements, not checked here): one JSON object as the last line with every key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KEYS = {"cold_start_ms", "warm_overhead_ms", "import_sdk_ms", "shuffle_per_object_ms", "redis_set_get_ms",
        "cold_vs_import", "shuffle_vs_redis", "cold_start_spawn_ms", "noop_cold_attempts",
        "shuffle_uploads", "uploads_skipped_share", "cos_requests_saved", "coded_shuffle_uploads",
        "coded_shuffle_uploads_skipped", "coded_uploads_skipped_share", "coded_cos_requests_saved"}


@pytest.mark.slow
def test_bench_run_prints_its_keys_as_the_last_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "run", "--quick", "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert KEYS <= set(doc)
    assert doc["cold_start_ms"] > 0 and doc["import_sdk_ms"] > 0 and doc["shuffle_per_object_ms"] > 0
    assert doc["noop_attempts"] == 8
    # every coded object of the 4x4 shuffle (and the skipped ones only) is accounted for
    assert doc["coded_shuffle_uploads"] + doc["coded_shuffle_uploads_skipped"] >= 16
    assert doc["coded_cos_requests_saved"] == 2 * doc["coded_shuffle_uploads_skipped"]
