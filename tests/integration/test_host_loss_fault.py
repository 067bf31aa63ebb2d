"""Issue 31's host-loss fault test: word count and the gg compile example run at once on one
embedded stack with 2 metadata shards (and ``DAEMONS`` daemons); once each run has committed a
task, one shard and one daemon lose their hosts (kill -9 / abrupt close, state directories
deleted) and replacements start at the same addresses against the same COS. Checked: both
outputs right, no handler saw an error (every task ran once), nothing leaked, the journal and
the daemon's table were restored from COS, and the other shard's run did not pause for the
lost shard (it committed again, or finished, while that shard was down).

Control state is shipped synchronously (``control_in_cos=0``) and the daemon answers a PUT once
its version is in COS (``durable_puts``), so the daemon is killed at any moment: no answered
version lives only in the memory of the functions that die with it.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from funcsion_rpc import routing
from sdk._config import Config
from sdk._store_client import StoreClient
from sdk.local._executor import ExecutorOptions
from sdk.local._inputs import prepare_run
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from tests._waiting import wait_for

from .examples import EXAMPLES, check_freed, load, require_tools
from .examples import output as saved
from .test_wordcount_e2e import WC, expected_counts, output

GG = EXAMPLES / "gg_compile" / "gg_compile.wds.json"
#: daemons of the stack: one, and two (each owning half the functions; daemon 0 is lost)
DAEMONS = [1, 2]


def _committed_runs(stack: Stack) -> dict[int, tuple[str, int]]:
    """Per shard: (run id, tasks committed) of its running run that committed a task."""
    found = {}
    for k, h in enumerate(stack.handlers):
        with h.lock:
            for run in h.state.runs.values():
                if run.state == "running" and run.committed:
                    found[k] = (run.run_id, len(run.committed))
    return found


def _progress(stack: Stack, shard: int, run_id: str) -> tuple[str, int]:
    h = stack.handlers[shard]
    with h.lock:
        run = h.state.runs[run_id]
        return run.state, len(run.committed)


def lose_hosts(stack: Stack) -> None:
    """Mid-run (each shard's run has committed a task): lose shard 0's host, see shard 1's run go
    on, lose the daemon's host, then start all replacements."""
    committed = wait_for(lambda: (c := _committed_runs(stack)) and len(c) == 2 and c, 120.0,
                         "a first commit of a run on each shard", 0.005)
    lost, other = 0, 1
    stack.kill_metadata(lost)
    other_run, before = committed[other]
    # the other shard's run does not notice: it commits again (or ends) while the lost one is down
    wait_for(lambda: _progress(stack, other, other_run) != ("running", before), 120.0,
             "the other shard's run to go on")
    assert not stack._journal_path(lost).exists()
    stack.kill_daemon(0)        # at any moment: every PUT it answered is in COS (durable_puts)
    stack.start_daemon(0)
    stack.start_metadata(lost)


@pytest.mark.slow   # two examples cold-start their workers, and two replacements: ~45 s on 2 loaded cores
@pytest.mark.parametrize("daemons", DAEMONS)
def test_word_count_and_gg_survive_losing_a_shard_and_a_daemon(tmp_path: Path, daemons: int) -> None:
    require_tools("gg-compile", "gcc", "ar")
    text = "the quick brown fox jumps over the lazy dog\nIt's a dog's life, isn't it?\n" * 40_000
    (tmp_path / "book.txt").write_text(text)
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={}, ec_data=2, ec_parity=1)
    extra: dict[str, Any] = {"daemons": daemons} if daemons > 1 else {}
    opts = ExecutorOptions(progress=False, seed=3)
    with Stack(cfg, metadata_port=0, daemon_port=0, metadata_shards=2, daemon_process=True, control_in_cos=0.0,
               daemon={"max_functions": 12}, **extra) as stack:
        preps = {"gg": prepare_run(GG, options=opts, limits=cfg.wds_limits()),
                 "wc": prepare_run(WC, inputs={"raw_text": str(tmp_path / "book.txt")}, params={"mappers": 4},
                                   options=opts, limits=cfg.wds_limits())}
        reports: dict[str, Any] = {}
        failure: list[BaseException] = []

        def job(name: str) -> None:
            try:
                reports[name] = run_workflow(preps[name], config=cfg, stack=stack, options=opts)
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                failure.append(exc)

        jobs = [threading.Thread(target=job, args=(name,), daemon=True) for name in preps]
        jobs[0].start()
        # one run per shard: word count (quick) starts once gg (slow) has committed a task, so both
        # run at once, and a start goes to the least loaded shard
        wait_for(lambda: _committed_runs(stack), 120.0, "gg's first commit", 0.005)
        jobs[1].start()
        lose_hosts(stack)
        for t in jobs:
            t.join(240.0)
        assert not failure and not any(t.is_alive() for t in jobs), failure
        lost = 0
        wc, gg = reports["wc"], reports["gg"]
        assert {routing.shard_of_run(r.run_id, 2) for r in (wc, gg)} == {0, 1}
        for r in (wc, gg):
            assert r.status == "succeeded", (r.error, [(n, e) for n, t in r.tasks.items() for e in t["errors"]])
            assert all(t["attempts"] == 1 and not t["errors"] for t in r.tasks.values()), r.tasks  # no handler saw an error
            assert r.memory["leaked_bytes"] == 0
        assert output(stack, wc, "word_counts") == expected_counts(text)
        if daemons > 1:     # the runs' objects lived on both daemons, the lost one's share among them
            held = {o.get("daemon") for r in (wc, gg) for o in r.to_dict()["objects"].values() if o["tier"] == "memory"}
            assert {"daemon-0", "daemon-1"} <= held, held
        check_freed(gg.to_dict())
        binary = saved(cfg.resolved_cos_url, gg.to_dict(), "program")
        exe = tmp_path / "program"
        exe.write_bytes(binary)
        exe.chmod(0o755)
        printed = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30).stdout
        assert printed == load("gg_compile", "cproject").expected_output(8, 12)
        restored = stack.metadata_restores[lost]
        assert restored is not None and restored.generation and restored.pieces >= 1   # the journal, from COS
        with StoreClient(stack.store.address, stack.store.token) as c:
            assert c.stats()["table_restored_from_cos_bytes"] > 0                      # the table, from COS
        assert stack.metadata_replacements == [1, 0]
