"""``funcsion bench scale --quick --json``: one JSON object as the last line with every
key of issue 31's "Numbers" (1, 2 and 4 daemons and shards, physical and modelled), the
figures positive, the ratios computed from the figures as printed, and the modelled
per-host cap honoured: N daemons each capped at C MB/s move at most N x C (within the
token bucket's depth over a short phase). Behaviour, not speed: nothing here is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CAP_MBPS = 20.0  # low enough that 2 MiB GETs bind on it even on a loaded machine
DATA = {"get_mib_s", "put_mib_s", "get_4k_ops_s", "put_4k_ops_s", "client_cpu_cores", "daemon_cpu_cores"}
PHASES = {"put_large", "get_large", "put_small", "get_small"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_scale_reports_every_configuration_and_honours_the_modelled_cap(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "bench", "scale", "--quick", "--host-bandwidth-mbps",
                           str(CAP_MBPS), "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc["daemons"]) == {"1", "2", "4"} and set(doc["shards"]) == {"1", "2", "4"}
    assert doc["model"]["host_bandwidth_mbps"] == CAP_MBPS and "token bucket" in doc["model"]["text"]
    d, p = (int(x) for x in doc["shape"]["code"].split("+"))
    for n, row in doc["daemons"].items():
        for kind in ("physical", "modelled"):
            assert DATA <= set(row[kind]), (n, kind)
            assert all(row[kind][k] > 0 for k in ("get_mib_s", "put_mib_s", "get_4k_ops_s", "put_4k_ops_s")), row
            assert set(row[kind]["client_cpu_cores"]) == PHASES and set(row[kind]["daemon_cpu_cores"]) == PHASES
            assert set(row[kind]["link_held_share"]) == PHASES
            assert row[kind]["client_cpu_cores"]["get_large"] > 0
        # the cap: a GET's bytes cross each daemon's NIC once, a PUT's coded bytes (d+p over d)
        cap_mib = CAP_MBPS * 1e6 / (1 << 20) * int(n)
        assert row["modelled"]["get_mib_s"] <= cap_mib * 1.25, (n, row["modelled"], cap_mib)
        assert row["modelled"]["put_mib_s"] <= cap_mib * d / (d + p) * 1.25, (n, row["modelled"], cap_mib)
        assert row["physical"]["link_held_share"]["get_large"] == 0  # no model, nothing held
    for m, row in doc["shards"].items():
        for kind in ("physical", "modelled"):
            assert row[kind]["ops_s"] > 0 and row[kind]["clients"] == 2 * int(m), (m, kind, row)
            assert row[kind]["client_cpu_cores"] > 0
    dm, sm = doc["daemons"], doc["shards"]
    assert doc["efficiency_4_daemons"] == round(dm["4"]["modelled"]["get_mib_s"] / (4 * dm["1"]["modelled"]["get_mib_s"]), 3)
    assert doc["efficiency_4_shards"] == round(sm["4"]["modelled"]["ops_s"] / (4 * sm["1"]["modelled"]["ops_s"]), 3)
    assert doc["physical_2_daemons_get_ratio_table"] == round(dm["2"]["physical"]["get_mib_s"]
                                                              / dm["1"]["physical"]["get_mib_s"], 3)
    # the headline ratio is the median of rounds alternating a 1- and a 2-daemon set (one in --quick)
    assert len(doc["physical_2_daemons_get_ratios"]) == 1
    assert doc["physical_2_daemons_get_ratio"] == doc["physical_2_daemons_get_ratios"][0] > 0
    assert set(doc["efficiency_4_daemons_by_metric"]) == {"get_mib_s", "put_mib_s", "get_4k_ops_s", "put_4k_ops_s"}
    assert set(doc["targets"]) == {"efficiency_4_daemons", "efficiency_4_shards", "physical_2_daemons_get_ratio"}
