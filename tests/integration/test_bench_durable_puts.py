"""``funcsion bench store --durable-puts --json``: write-behind and durable PUTs measured in
one run, one JSON object as the last line whose ratios are computed from its own figures;
``--tls`` with it is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "store", "--durable-puts", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280, check=False)


@pytest.mark.slow
def test_bench_store_durable_puts_prints_both_modes_and_their_ratios(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--sizes", "4096,1048576", "--iters", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc["sizes"]) == {"4096", "1048576"}
    for key in ("put_4k_p50_us", "put_1m_p50_us", "get_1m_mbps"):
        assert doc["plain"][key] > 0 and doc["durable"][key] > 0
        assert doc["durable_over_plain"][key] == round(doc["durable"][key] / doc["plain"][key], 3)


def test_bench_store_durable_puts_and_tls_are_refused_together(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--tls")
    assert proc.returncode != 0
    assert "--tls and --durable-puts" in proc.stderr and "Traceback" not in proc.stderr
