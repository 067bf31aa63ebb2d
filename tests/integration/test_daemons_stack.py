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
