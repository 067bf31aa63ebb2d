"""Word count on an embedded stack with two metadata shards (issue 31 item 2): runs start on
both shards and each is served by the shard its id hashes to, the daemon follows both shards'
control planes (each shard places only into the function groups it owns), and every run ends
with the right output and nothing leaked."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import routing
from sdk._config import Config
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

from .test_wordcount_e2e import WC, check_freeing, expected_counts, output


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory):
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, metadata_shards=2,
               daemon={"max_functions": 10 * (cfg.ec_data + cfg.ec_parity)}) as st:
        yield st


def test_the_stack_runs_two_shards_each_with_its_own_function_groups(sharded: Stack) -> None:
    assert len(sharded.metadata_servers) == 2 and len(sharded.followers) == 2
    ep = sharded.endpoints
    assert ep.metadata_shards == tuple(f"{m.host}:{m.port}" for m in sharded.metadata_servers)
    group = sharded.config.ec_data + sharded.config.ec_parity
    registered = [set(h.state.allocator.functions) for h in sharded.handlers]
    assert all(registered) and not registered[0] & registered[1]       # no function at two shards
    for k, names in enumerate(registered):
        assert all(routing.shard_of_function(n, 2, group) == k for n in names)


def test_word_count_on_two_shards(sharded: Stack, tmp_path: Path) -> None:
    text = "the quick brown fox jumps over the lazy dog\n" * 400 + "It's a dog's life\n" * 60
    src = tmp_path / "book.txt"
    src.write_text(text)
    reports = [run_workflow(WC, config=sharded.config, stack=sharded, inputs={"raw_text": str(src)},
                            params={"mappers": 3, "reducers": 2}, options=ExecutorOptions(progress=False))
               for _ in range(2)]
    owners = set()
    for report in reports:
        assert report.status == "succeeded", report.error
        assert output(sharded, report, "word_counts") == expected_counts(text)
        check_freeing(report)                          # leaked_bytes == 0 among the rest
        owner = routing.shard_of_run(report.run_id, 2)
        owners.add(owner)
        # the run lived on its owner only, and its objects were placed in its owner's functions
        assert report.run_id in sharded.handlers[owner].state.runs
        assert report.run_id not in sharded.handlers[1 - owner].state.runs
    assert owners == {0, 1}                            # both shards carried a run
    sharded.drain()
    for h in sharded.handlers:
        assert h.state.stats()["live_bytes"] == 0


@pytest.mark.slow
def test_funcsion_up_with_two_shards_then_run(tmp_path: Path) -> None:
    """`funcsion up --metadata-shards 2` lists both shards in stack.json; `funcsion run` on it
    routes each run to its shard: two runs, both shards, right outputs, nothing leaked."""
    import json
    import os
    import subprocess
    import sys

    from sdk.cli._common import stack_endpoints
    from sdk.local._stack import read_stack_file

    from .examples import REPO, check_freed
    from .examples import output as saved

    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNCSION_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True,
                              timeout=240, cwd=tmp_path, env=env)

    up = cli("up", "--state-dir", str(state), "--metadata-shards", "2")
    assert up.returncode == 0, up.stderr
    try:
        info = read_stack_file(state)
        assert info is not None
        ep = stack_endpoints(info)
        assert len(ep.metadata_shards) == 2
        text = "the quick brown fox jumps over the lazy dog\n" * 200
        src = tmp_path / "book.txt"
        src.write_text(text)
        owners = set()
        for _ in range(2):
            run = cli("run", str(WC), "--json", "--state-dir", str(state), "--input", f"raw_text={src}")
            assert run.returncode == 0, run.stderr[-3000:]
            report = json.loads(run.stdout.strip().splitlines()[-1])
            assert report["status"] == "succeeded", report.get("error")
            assert json.loads(saved(ep.cos_url or str(info["cos_url"]), report, "word_counts")) == \
                expected_counts(text)
            check_freed(report)
            owners.add(routing.shard_of_run(report["run_id"], 2))
        assert owners == {0, 1}
    finally:
        cli("down", "--state-dir", str(state))


def test_a_daemon_process_follows_both_shards(tmp_path: Path) -> None:
    """The daemon in its own process (``_daemon_proc``: what a split deployment runs) registers
    each shard's groups with that shard and carries out both shards' drops."""
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, metadata_shards=2, daemon_process=True,
               daemon={"max_functions": 10 * (cfg.ec_data + cfg.ec_parity)}) as st:
        group = cfg.ec_data + cfg.ec_parity
        for k, h in enumerate(st.handlers):
            names = set(h.state.allocator.functions)
            assert names and all(routing.shard_of_function(n, 2, group) == k for n in names)
        text = "a daemon in a process of its own\n" * 300
        src = tmp_path / "book.txt"
        src.write_text(text)
        report = run_workflow(WC, config=st.config, stack=st, inputs={"raw_text": str(src)},
                              params={"mappers": 2, "reducers": 2}, options=ExecutorOptions(progress=False))
        assert report.status == "succeeded", report.error
        assert output(st, report, "word_counts") == expected_counts(text)
        check_freeing(report)
