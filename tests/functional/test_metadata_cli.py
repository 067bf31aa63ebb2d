"""``funcsion serve metadata`` and ``funcsion bench metadata`` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.cli import main

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"single_op_rps", "batched_ops_per_s", "p50_us", "p99_us", "record_read_us", "commit10_us",
        "bytes_per_object"}


def test_serve_rejects_bad_arguments(capsys):
    assert main(["serve", "metadata", "--port", "70000"]) == 2
    assert "--port must be 0..65535" in capsys.readouterr().err
    assert main(["serve", "metadata", "--port", "0", "--ttl", "-1"]) == 2


def test_bench_core_only_json(capsys):
    assert main(["bench", "metadata", "--skip-rpc", "--json", "--objects", "500"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["record_read_us"] > 0 and doc["commit10_us"] > 0 and doc["bytes_per_object"] > 0


@pytest.mark.slow
def test_bench_end_to_end_json():
    res = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "metadata", "--json", "--seconds", "0.3",
                          "--clients", "1,2", "--batch", "50", "--objects", "500", "--rounds", "2"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert KEYS <= set(doc) and doc["single_op_rps"] > 0 and doc["batched_ops_per_s"] > 0
    # the peer from the same run, and how the server compares (issue 12)
    assert doc["thrift_baseline_rps"] > 0 and doc["one_client_rps"] > 0 and doc["journaled_one_client_rps"] > 0
    assert doc["one_client_vs_thrift"] == pytest.approx(doc["one_client_rps"] / doc["thrift_baseline_rps"], rel=0.5)
    assert doc["batched_read_ops_per_s"] > 0          # read_batch, the call get_many makes
