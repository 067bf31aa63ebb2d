"""``funcsion bench recovery`` at a small size (the figures are the benchmark's, not a test's):
one JSON object as the last line with the recovery times, the best group and GET latency under
kills with no error; bad arguments are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "recovery", *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300, check=False)


@pytest.mark.slow
def test_a_small_recovery_bench_reports_every_figure(tmp_path: Path) -> None:
    p = _bench(tmp_path, "--size-mib", "8", "--chunk-mib", "1", "--groups", "2,4", "--cos", "local",
               "--latency-s", "1", "--kill-every-s", "0.5", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    row = r["cos"]["local"]
    assert r["bandwidth_mbps"] == 50.0 and row["chunks"] == 8
    assert row["recover_1gib_s"] > 0 and row["recover_1gib_parallel_s"] > 0
    assert row["group_size"] in (2, 4) and set(row["parallel_s"]) == {"2", "4"}
    assert row["errors"] == 0 and row["kills"] >= 1 and row["p99_before_us"] > 0 and row["p99_during_us"] > 0


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    p = _bench(tmp_path, "--cos", "ftp", "--json")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--cos" in p.stderr and "Traceback" not in p.stderr
