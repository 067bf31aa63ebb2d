"""``funcsion bench elasticity`` end to end on a small shifting working set: one JSON object
last with the pool's size over time, the hit ratio and the cost per hour beside the static
pool and always-on memory, all from the measured cost account; bad input is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_small_replay_reports_pool_hit_ratio_and_costs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "elasticity", "--shape", "1,3,1", "--object-mb", "2",
                        "--burst", "8", "--burst-rounds", "1", "--gets-per-hour", "0", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["reads"] == 2 * 5 and [ph["objects"] for ph in r["phases"]] == [1, 3, 1]
    assert 0.0 <= r["hit_ratio"] <= 1.0
    # every read counted once where it was served: hits from function memory or cache functions only
    assert sum(r["served"].values()) == r["reads"]
    assert r["function_read_ratio"] + r["cache_read_ratio"] == pytest.approx(r["hit_ratio"], abs=1e-3)
    assert r["hit_ratio"] + r["buffer_hit_ratio"] + r["cos_read_ratio"] == pytest.approx(1.0, abs=2e-3)
    assert r["buffer_hit_ratio"] == pytest.approx(r["served"]["buffer"] / r["reads"], abs=1e-3)
    assert r["functions_peak"] >= 1 and 0 < r["functions_mean"] <= r["functions_peak"]
    cost = r["cost"]
    assert r["cost_usd_per_hour"] == cost["per_hour"]["storage_usd"] > 0
    assert r["static_cost_usd_per_hour"] == cost["static_pool"]["usd_per_hour"]
    assert r["always_on_cost_usd_per_hour"] == cost["always_on"]["usd_per_hour"] > 0
    # COS PUTs: the uploads of objects that outlived the parity delay (the write-behind skips those freed
    # within it) and the functions' log seals (none for chunks freed within an invocation), so often none
    # here; the functions' own apart: at most one node per function and invocation
    cr = cost["lines"]["cos_requests"]
    assert r["cos_requests"] == cr["puts"] + cr["gets"] >= r["cos_requests_functions"] == cr["function_puts"]
    assert cost["lines"]["storage_io"]["invocations"] >= 1
    assert r["cos_requests_functions"] <= cost["lines"]["storage_io"]["invocations"]
    assert r["cos_requests_per_object"] == round(r["cos_requests"] / 5, 3)
    assert r["gc"]["rounds"] >= 1 and r["function_mbps"] == 50.0
    assert r["burst"] == 8 and r["burst_get_p99_us"] > 0 and r["burst_get_p99_us_no_cache"] > 0
    assert r["burst_get_p99_us"] >= r["burst_get_p50_us"]
    assert r["burst_later_p99_us"] == r["burst_later_p99_us_no_cache"] == 0   # one round: no later rounds
    assert r["burst_round_p99_us"] == {"no_cache": [r["burst_get_p99_us_no_cache"]], "cache": [r["burst_get_p99_us"]]}
    # the broadcast's 8 declared readers (>= cache_prefetch_readers) readied its copies before the burst:
    # ceil(8 / depth 2) - 1 = 3 per data chunk, each loaded once, and the burst opened none of its own
    assert r["prefetch"] and r["cache"]["cache_prefetches"] == r["cache"]["cache_opened"] == 10 * 3
    assert r["cache"]["cache_loads"] == 10 * 3 and r["cache"]["cache_copies"] == 0  # freed after the burst


@pytest.mark.slow
def test_without_prefetch_the_copies_open_only_as_the_burst_queues(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "elasticity", "--shape", "1", "--object-mb", "2",
                        "--burst", "8", "--burst-rounds", "1", "--gets-per-hour", "0", "--no-prefetch", "--json"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert not r["prefetch"] and r["cache"]["cache_prefetches"] == 0
    assert r["cache"]["cache_opened"] == r["cache"]["cache_loads"]  # each opened by the burst, loaded by its GET


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "3,x"], "--shape '3,x' must list phases of at least one object"),
    (["--gets-per-hour", "-5"], "--gets-per-hour >= 0"),
])
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "elasticity", *args],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr
