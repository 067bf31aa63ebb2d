"""A split deployment of two daemons and two metadata shards as processes (issue 31 item 1):
``funcsion serve metadata --shard 0/2`` and ``1/2``; ``funcsion serve daemon --daemon-id
daemon-0`` and ``daemon-1``, the same store token and COS, each following both shards; and
``funcsion run --stack metadata=..,metadata=..,daemon=A,daemon=B`` twice. Each daemon registers its
own functions, named by its id, the runs' objects land on both daemons, the outputs are right and
nothing is left on either daemon or shard."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from funcsion_rpc import MetadataClient
from sdk._store_client import StoreClient
from storage_functions.cos import open_cos
from tests._waiting import wait_for

from .test_split_deployment import TEXT, WC, Proc, _env, _free_port, procs  # noqa: F401 - procs: fixture


@pytest.mark.slow
def test_two_daemons_and_two_shards_as_processes_run_word_count(tmp_path: Path, procs: list[Proc]) -> None:  # noqa: F811
    admin_token, store_token = "split-admin-token", "split-store-token-0123456789abcdef"
    ports = [_free_port(), _free_port()]
    shards = ";".join(f"127.0.0.1:{p}" for p in ports)
    cos_url = (tmp_path / "cos").as_uri()
    for k, port in enumerate(ports):
        md = Proc(["serve", "metadata", "--port", str(port), "--json", "--shard", f"{k}/2", "--journal",
                   str(tmp_path / f"metadata-{k}.journal")], tmp_path / f"metadata-{k}.log",
                  _env(FUNCSION_ADMIN_TOKEN=admin_token))
        procs.append(md)
        md.first_line()
    daemons = []
    for k in range(2):
        d = Proc(["serve", "daemon", "--port", "0", "--metadata", shards, "--json", "--daemon-id", f"daemon-{k}",
                  "--token", store_token, "--cos", cos_url, "--max-functions", "24", "--root",
                  str(tmp_path / f"daemon-{k}")], tmp_path / f"daemon-{k}.log", _env(FUNCSION_ADMIN_TOKEN=admin_token))
        procs.append(d)
        daemons.append(d.first_line())
    admins = [MetadataClient(port=p, admin_token=admin_token) for p in ports]
    try:
        def registered() -> set[str]:
            return {f for admin in admins for f in admin.stats()["functions"]}

        wait_for(lambda: {f.rsplit("-", 1)[0] for f in registered()} == {"sion-daemon-0", "sion-daemon-1"}, 30.0,
                 "both daemons to register their functions", 0.1)
        src = tmp_path / "book.txt"
        src.write_text(TEXT)
        stack = ",".join([*(f"metadata=127.0.0.1:{p}" for p in ports), *(f"daemon={d['address']}" for d in daemons)])
        held: set[str] = set()
        for _ in range(2):
            run = subprocess.run(
                [sys.executable, "-m", "sdk.cli", "run", str(WC), "--input", f"raw_text={src}", "--json",
                 "--state-dir", str(tmp_path / "driver"), "--stack", stack],
                capture_output=True, text=True, timeout=240, cwd=tmp_path,
                env=_env(FUNCSION_ADMIN_TOKEN=admin_token, FUNCSION_STORE_TOKEN=store_token))
            assert run.returncode == 0, run.stderr
            report = json.loads(run.stdout.splitlines()[-1])
            assert report["status"] == "succeeded" and report["memory"]["leaked_bytes"] == 0, report
            with open_cos(cos_url) as cos:
                counts = json.loads(cos.get(f"outputs/{report['run_id']}/word_counts"))
            assert counts == dict(Counter(re.findall(r"[a-z0-9']+", TEXT.lower())))
            held |= {o["daemon"] for o in report["objects"].values() if o["tier"] == "memory"}
        assert held == {"daemon-0", "daemon-1"}
        for k, admin in enumerate(admins):     # every daemon carried out every instruction
            wait_for(lambda admin=admin: admin.stats()["pending_instructions"] == 0, 30.0,
                     f"shard {k}'s instructions to be acknowledged by both daemons", 0.1)
        for d in daemons:
            with StoreClient(d["address"], store_token) as store:
                assert not store.stats().get("runs"), d          # each dropped its share
    finally:
        for admin in admins:
            admin.close()
    assert all(p.stop() == 0 for p in reversed(procs))
