"""A split deployment with two metadata shards: ``funcsion serve metadata --shard 0/2`` and
``--shard 1/2``, ``funcsion serve daemon --metadata 'H:P;H:P'`` following both, and ``funcsion run
--stack metadata=...,metadata=...,daemon=...`` twice. Each shard gets the daemon's function groups
it owns, the runs land on both shards, and each has the right output with nothing leaked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from funcsion_rpc import MetadataClient, routing
from storage_functions.cos import open_cos
from tests._waiting import wait_for

from .test_split_deployment import TEXT, WC, Proc, _env, _free_port, procs  # noqa: F401 - procs: fixture


@pytest.mark.slow
def test_two_shards_and_a_daemon_as_processes_run_word_count(tmp_path: Path, procs: list[Proc]) -> None:  # noqa: F811
    admin_token = "split-admin-token"
    ports = [_free_port(), _free_port()]
    shards = ";".join(f"127.0.0.1:{p}" for p in ports)
    for k, port in enumerate(ports):
        md = Proc(["serve", "metadata", "--port", str(port), "--json", "--shard", f"{k}/2", "--journal",
                   str(tmp_path / f"metadata-{k}.journal")], tmp_path / f"metadata-{k}.log",
                  _env(FUNCSION_ADMIN_TOKEN=admin_token))
        procs.append(md)
        md.first_line()
    daemon = Proc(["serve", "daemon", "--port", "0", "--metadata", shards, "--json", "--root",
                   str(tmp_path / "daemon")], tmp_path / "daemon.log", _env(FUNCSION_ADMIN_TOKEN=admin_token))
    procs.append(daemon)
    d_info = daemon.first_line()
    admins = [MetadataClient(port=p, admin_token=admin_token) for p in ports]
    try:
        for k, admin in enumerate(admins):        # each shard holds its own groups, and only those
            wait_for(lambda admin=admin: admin.stats()["functions"], 30.0, f"the daemon to register with shard {k}",
                     0.1)
            assert all(routing.shard_of_function(f, 2, 12) == k for f in admin.stats()["functions"])
        src = tmp_path / "book.txt"
        src.write_text(TEXT)
        owners = set()
        for _ in range(2):
            run = subprocess.run(
                [sys.executable, "-m", "sdk.cli", "run", str(WC), "--input", f"raw_text={src}", "--json",
                 "--state-dir", str(tmp_path / "driver"),
                 "--stack", f"metadata=127.0.0.1:{ports[0]},metadata=127.0.0.1:{ports[1]},daemon={d_info['address']}"],
                capture_output=True, text=True, timeout=240, cwd=tmp_path,
                env=_env(FUNCSION_ADMIN_TOKEN=admin_token, FUNCSION_STORE_TOKEN=d_info["token"]))
            assert run.returncode == 0, run.stderr
            report = json.loads(run.stdout.splitlines()[-1])
            assert report["status"] == "succeeded" and report["memory"]["leaked_bytes"] == 0, report
            with open_cos((tmp_path / "daemon" / "cos").as_uri()) as cos:
                counts = json.loads(cos.get(f"outputs/{report['run_id']}/word_counts"))
            assert counts == dict(Counter(re.findall(r"[a-z0-9']+", TEXT.lower())))
            owners.add(routing.shard_of_run(report["run_id"], 2))
        assert owners == {0, 1}
        for k, admin in enumerate(admins):
            wait_for(lambda admin=admin: admin.stats()["pending_instructions"] == 0, 30.0,
                     f"shard {k}'s instructions to be acknowledged", 0.1)
    finally:
        for admin in admins:
            admin.close()
    assert all(p.stop() == 0 for p in reversed(procs))
