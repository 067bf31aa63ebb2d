"""kill -9 the metadata server in the middle of a run, restart it on its journal,
and the run finishes with correct counts and no leak. Also: SIGTERM is clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import hdag
import wds
from funcsion_rpc import MetadataClient
from funcsion_rpc import errors as E

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount" / "wordcount.wds.json"
ADMIN = "restart-admin"


def launch(journal: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", "metadata", "--port", "0", "--admin-token", ADMIN,
         "--journal", str(journal), "--block-size", "4096", "--data-chunks", "2", "--parity-chunks", "1",
         "--tick", "0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line + proc.stderr.read() if proc.stderr else line
    port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
    return proc, port


def stop(proc: subprocess.Popen[str], sig: int) -> int:
    proc.send_signal(sig)
    rc = proc.wait(20)
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
    return rc


def put(c: MetadataClient, run: str, fn: str, obj: str, size: int) -> None:
    c.begin_put(run, fn, obj, size, f"sum-{obj}")
    c.finish_put(run, fn, obj)


def test_kill_9_mid_run_then_finish_after_restart(tmp_path):
    graph = hdag.build(wds.load(WORDCOUNT))
    order = list(nx.topological_sort(graph.function_graph()))
    journal = tmp_path / "metadata.db"
    proc, port = launch(journal)
    try:
        admin = MetadataClient(port=port, admin_token=ADMIN)
        for i in range(4):
            admin.register_capacity(f"s{i}", 32)
        key = admin.register_workflow(WORDCOUNT.read_text(), {}, str(WORDCOUNT)).key
        info = admin.start_run(key)
        c = admin.for_run(info.token)
        r = info.run_id
        for o in graph.inputs:
            put(c, r, "", o, 3000)
        half = order[: len(order) // 2 + 1]
        for fn in half:
            f = graph.functions[fn]
            for o in f.inputs:
                c.get(r, fn, o)
            for o in f.outputs:
                put(c, r, fn, o, 1000 + len(o))
        crashed = order[len(half)]                    # reads its inputs, then the server dies
        for o in graph.functions[crashed].inputs:
            c.get(r, crashed, o)
        before = {o: (s.state, s.remaining) for o in graph.objects for s in [c.lookup(r, o)]}
        stats_before = admin.stats()
        c.close()
        admin.close()
    finally:
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL

    proc, port = launch(journal)
    try:
        admin = MetadataClient(port=port, admin_token=ADMIN)
        c = MetadataClient(port=port, token=info.token)
        after = {o: (s.state, s.remaining) for o in graph.objects for s in [c.lookup(r, o)]}
        assert after == before
        st = admin.stats()
        assert (st["live_bytes"], st["allocated_bytes"]) == (stats_before["live_bytes"],
                                                            stats_before["allocated_bytes"])
        # the crashed task is retried: its reads were recorded before the crash and count once
        for fn in order[len(half):]:
            f = graph.functions[fn]
            for o in f.inputs:
                c.get(r, fn, o)
            for o in f.outputs:
                put(c, r, fn, o, 1000 + len(o))
        for o in graph.objects:
            s = c.lookup(r, o)
            if graph.objects[o].readers:
                assert (s.state, s.remaining, sorted(s.committed_by)) == (
                    "freed", 0, sorted(graph.objects[o].readers)), o
        summary = c.end_run(r)
        assert summary["kept"] == sorted(graph.outputs)
        st = admin.stats()
        assert st["live_bytes"] == 0 and st["allocated_bytes"] == 0          # no leak
        drops = admin.fetch_instructions(0, 10_000)
        dropped = {i.object_name for i in drops if i.kind == "drop" and not i.keep_cos}
        assert dropped == set(graph.objects) - set(graph.outputs)
        with pytest.raises(E.RunEnded):
            c.get(r, order[0], graph.inputs[0])
        c.close()
        admin.close()
    finally:
        assert stop(proc, signal.SIGTERM) == 0


def test_sigterm_shuts_down_cleanly(tmp_path):
    proc, port = launch(tmp_path / "j.db")
    with MetadataClient(port=port, admin_token=ADMIN) as c:
        assert c.health().status == "ok"
    assert stop(proc, signal.SIGTERM) == 0
    assert os.path.exists(tmp_path / "j.db")
