"""A metadata server's host lost mid-run: kill -9 ``funcsion serve metadata``, delete its
state directory, start a replacement with an empty one against the same COS and state id;
it restores its journal (snapshot + log) from COS and the run finishes with correct counts,
nothing freed resurrected, no block handed out twice and no leak. Over the local-directory
COS and over moto's S3 server (the real boto3 path)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

import hdag
import wds
from funcsion_rpc import MetadataClient
from sdk.cli._moto import MotoS3
from storage_functions.cos import open_cos
from tests._waiting import wait_for
from tests.integration.test_metadata_restart import ADMIN, WORDCOUNT, put, stop

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "control/metadata/meta-a"


@pytest.fixture(params=["local", "s3"])
def cos_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield (tmp_path / "cos").as_uri()
        return
    with MotoS3(prefix="deploy") as m:
        yield m.url()


def launch(state: Path, cos_url: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", "metadata", "--port", "0", "--admin-token", ADMIN,
         "--journal", str(state / "metadata.journal"), "--block-size", "4096", "--data-chunks", "2",
         "--parity-chunks", "1", "--tick", "0.1", "--state-id", "meta-a", "--cos-url", cos_url,
         "--control-ship-lag-s", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
    assert ("restored from COS control/metadata/meta-a/g" in line) == (state.name == "host2"), line
    return proc, int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])


def shipped(cos_url: str, journal: Path) -> bool:
    """Whether COS holds the whole local log (its pieces add up to the file)."""
    cos = open_cos(cos_url)
    total = sum(len(cos.get(k)) for k in cos.list(PREFIX + "/") if "/log-" in k)
    return total == journal.stat().st_size


@pytest.mark.slow
def test_kill_9_and_lose_the_state_directory_then_finish_from_cos(tmp_path: Path, cos_url: str):
    graph = hdag.build(wds.load(WORDCOUNT))
    order = list(nx.topological_sort(graph.function_graph()))
    host1 = tmp_path / "host1"
    proc, port = launch(host1, cos_url)
    try:
        admin = MetadataClient(port=port, admin_token=ADMIN)
        for i in range(4):
            admin.register_capacity(f"s{i}", 32)
        key = admin.register_workflow(WORDCOUNT.read_text(), {}, str(WORDCOUNT)).key
        info = admin.start_run(key)
        c, r = admin.for_run(info.token), info.run_id
        for o in graph.inputs:
            put(c, r, "", o, 3000)
        half = order[: len(order) // 2 + 1]
        for fn in half:
            for o in graph.functions[fn].inputs:
                c.get(r, fn, o)
            for o in graph.functions[fn].outputs:
                put(c, r, fn, o, 1000 + len(o))
        crashed = order[len(half)]
        for o in graph.functions[crashed].inputs:
            c.get(r, crashed, o)
        before = {o: (s.state, s.remaining) for o in graph.objects for s in [c.lookup(r, o)]}
        freed_before = {o for o, (state, _) in before.items() if state == "freed"}
        assert freed_before                               # something was freed before the loss
        stats_before = admin.stats()
        c.close()
        admin.close()
        wait_for(lambda: shipped(cos_url, host1 / "metadata.journal"), 20.0, "the journal in COS", 0.05)
    finally:
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    shutil.rmtree(host1)                                  # the host and its disk are gone

    proc, port = launch(tmp_path / "host2", cos_url)
    try:
        admin = MetadataClient(port=port, admin_token=ADMIN)
        c = MetadataClient(port=port, token=info.token)   # the run's token still works
        after = {o: (s.state, s.remaining) for o in graph.objects for s in [c.lookup(r, o)]}
        assert after == before                            # counts intact, nothing freed resurrected
        st = admin.stats()
        assert (st["live_bytes"], st["allocated_bytes"], st["free_blocks"]) == (
            stats_before["live_bytes"], stats_before["allocated_bytes"], stats_before["free_blocks"])
        for fn in order[len(half):]:
            for o in graph.functions[fn].inputs:
                c.get(r, fn, o)
            for o in graph.functions[fn].outputs:
                put(c, r, fn, o, 1000 + len(o))
        summary = c.end_run(r)
        assert summary["kept"] == sorted(graph.outputs)
        st = admin.stats()
        assert st["live_bytes"] == 0 and st["allocated_bytes"] == 0          # no leak
        c.close()
        admin.close()
    finally:
        assert stop(proc, signal.SIGTERM) == 0
    cos = open_cos(cos_url)
    gens = {k[len(PREFIX) + 1:].split("/")[0] for k in cos.list(PREFIX + "/")}
    assert len(gens) == 1                                 # the replacement's generation only
