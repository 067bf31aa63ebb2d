"""Word count on an embedded stack with two daemons and two metadata shards (issue 31 item 1):
every object of a run lives on one daemon's functions, the run's objects spread over both
daemons, each PUT and GET went to the daemon its grant named, and every run ends with the right
output and nothing leaked on either daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk._config import Config
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

from .test_wordcount_e2e import WC, check_freeing, expected_counts, output


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory):
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, metadata_shards=2, daemons=2,
               daemon={"max_functions": 8 * (cfg.ec_data + cfg.ec_parity)}) as st:
        yield st


def test_the_stack_runs_two_daemons_with_disjoint_functions(two: Stack) -> None:
    assert len(two.stores) == 2 and len(two.followers) == 4        # each daemon follows both shards
    ids = [s.config.daemon_id for s in two.stores]
    assert ids == ["daemon-0", "daemon-1"]
    assert [i for i, _ in two.endpoints.daemons] == ids
    owner: dict[str, str] = {}
    for h in two.handlers:
        a = h.state.allocator
        for name in a.functions:
            assert owner.setdefault(name, a.daemon_of(name)) == a.daemon_of(name)
    assert set(owner.values()) == set(ids)                        # both daemons registered capacity
    for name, d in owner.items():                                  # each daemon's functions carry its id
        assert name.startswith(f"sion-d{ids.index(d)}-")


def test_word_count_on_two_daemons_and_two_shards(two: Stack, tmp_path: Path) -> None:
    text = "the quick brown fox jumps over the lazy dog\n" * 400 + "It's a dog's life\n" * 60
    src = tmp_path / "book.txt"
    src.write_text(text)
    puts_before = [s.daemon.counters.get("puts", 0) for s in two.stores]
    reports = [run_workflow(WC, config=two.config, stack=two, inputs={"raw_text": str(src)},
                            params={"mappers": 4, "reducers": 3}, options=ExecutorOptions(progress=False))
               for _ in range(2)]
    held: set[str] = set()
    for report in reports:
        assert report.status == "succeeded", report.error
        assert output(two, report, "word_counts") == expected_counts(text)
        check_freeing(report)                                      # leaked_bytes == 0 among the rest
        d = report.to_dict()
        held |= {o["daemon"] for o in d["objects"].values() if o["tier"] == "memory"}
        per = d["memory"].get("daemons") or {}
        assert sum(p["peak_bytes"] > 0 for p in per.values()) >= 1
    assert held == {"daemon-0", "daemon-1"}                        # the runs' objects spread over both
    assert all(s.daemon.counters.get("puts", 0) > b for s, b in zip(two.stores, puts_before))
    two.drain()
    for s in two.stores:                                           # each daemon dropped its share
        held_runs = s.daemon.stats().get("runs", {})
        assert not any(r.run_id in held_runs for r in reports), held_runs
        assert s.daemon.ledger.allocated_bytes() == 0


@pytest.mark.slow
def test_funcsion_up_with_two_daemons_and_two_shards_runs_the_examples(tmp_path: Path) -> None:
    """`funcsion up --daemons 2 --metadata-shards 2` (a daemon process each) lists both daemons in
    stack.json; `funcsion run` on it runs word count (twice), the gg compile and the video examples
    with the right outputs and nothing leaked, and the runs' objects lived on both daemons."""
    import json
    import os
    import subprocess
    import sys

    from sdk.cli._common import stack_endpoints
    from sdk.local._stack import read_stack_file

    from .examples import REPO, check_freed, load
    from .examples import output as saved
    from .test_example_gg import GG, run_program
    from .test_example_video import VIDEO

    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNCSION_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True,
                              timeout=280, cwd=tmp_path, env=env)

    def run(wds: Path, *args: str) -> dict:
        proc = cli("run", str(wds), "--json", "--no-progress", "--state-dir", str(state), *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert report["status"] == "succeeded", report.get("error")
        check_freed(report)                                            # leaked_bytes == 0 among the rest
        return report

    up = cli("up", "--state-dir", str(state), "--daemons", "2", "--metadata-shards", "2", "--timeout", "120")
    assert up.returncode == 0, up.stderr
    try:
        info = read_stack_file(state)
        assert info is not None
        ep = stack_endpoints(info)
        assert [d["id"] for d in info["daemons"]] == ["daemon-0", "daemon-1"]
        assert [i for i, _ in ep.daemons] == ["daemon-0", "daemon-1"] and len(ep.metadata_shards) == 2
        cos = ep.cos_url or str(info["cos_url"])
        text = "the quick brown fox jumps over the lazy dog\n" * 200
        src = tmp_path / "book.txt"
        src.write_text(text)
        held: set[str] = set()
        for _ in range(2):
            wc = run(WC, "--input", f"raw_text={src}")
            assert json.loads(saved(cos, wc, "word_counts")) == expected_counts(text)
            held |= {o["daemon"] for o in wc["objects"].values() if o["tier"] == "memory"}
        gg = run(GG)
        cp = load("gg_compile", "cproject")
        assert run_program(saved(cos, gg, "program"), tmp_path) == cp.expected_output(8, 12)
        video = run(VIDEO)
        assert json.loads(saved(cos, video, "summary"))["frames"] == 96
        for r in (gg, video):
            held |= {o["daemon"] for o in r["objects"].values() if o["tier"] == "memory"}
        assert held == {"daemon-0", "daemon-1"}
    finally:
        cli("down", "--state-dir", str(state))
