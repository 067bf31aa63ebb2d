"""The word-count workflow end to end on the embedded stack: correct output,
every object freed right when its last declared reader committed, nothing
leaked, with random crashes, named crash points and each release policy."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import RunReport, run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


def expected_counts(text: str) -> dict[str, int]:
    return dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))


def output(stack: Stack, report: RunReport, name: str) -> Any:
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        return json.loads(cos.get(f"outputs/{report.run_id}/{name}"))
    finally:
        cos.close()


def check_freeing(report: RunReport) -> None:
    d = report.to_dict()
    for name, obj in d["objects"].items():
        if obj["declared_reads"] == 0:
            continue  # workflow outputs are kept until the run ends
        assert obj["state"] == "freed", name
        readers = [d["tasks"][r] for r in obj["reads"]]
        assert len(readers) == obj["declared_reads"], name
        last_commit = max(t["committed_at"] for t in readers)
        # freed by the commit that dropped the count to zero: the same event, the same time
        assert obj["freed_at"] == pytest.approx(last_commit, abs=1e-3), name
        assert obj["freed_at"] >= obj["written_at"]
    assert d["memory"]["leaked_bytes"] == 0


def test_default_input_runs_and_matches_a_plain_count(stack: Stack) -> None:
    from pydoc_data.topics import topics

    report = run_workflow(WC, config=stack.config, stack=stack, options=ExecutorOptions(progress=False))
    assert report.status == "succeeded", report.error
    text = "\n\n".join(topics[k] for k in sorted(topics))
    assert output(stack, report, "word_counts") == expected_counts(text)
    check_freeing(report)
    assert report.memory["peak_bytes"] > 0 and report.memory["mb_s"] > 0
    assert set(report.tasks) == {"splitter", "merger", *(f"mapper_{k:02d}" for k in range(4)),
                                 "reducer_00", "reducer_01"}


def test_random_crashes_and_retries_change_nothing(stack: Stack, tmp_path: Path) -> None:
    text = ("the quick brown fox jumps over the lazy dog\n" * 300 + "It's a dog's life\n" * 50) * 3
    src = tmp_path / "book.txt"
    src.write_text(text)
    report = run_workflow(WC, config=stack.config, stack=stack, inputs={"raw_text": str(src)},
                          params={"mappers": 6, "reducers": 3},
                          options=ExecutorOptions(crash_rate=0.35, seed=7, max_attempts=6, retry_interval_s=0.05,
                                                  progress=False))
    assert report.status == "succeeded", report.error
    assert sum(t["attempts"] for t in report.tasks.values()) > len(report.tasks)  # some attempts crashed
    assert output(stack, report, "word_counts") == expected_counts(text)
    check_freeing(report)


@pytest.mark.parametrize("spec", ["mapper_01:after_commit", "reducer_00:start", "merger:end", "splitter:after_commit"])
def test_named_crash_points(stack: Stack, spec: str) -> None:
    fn, point = spec.split(":")
    report = run_workflow(WC, config=stack.config, stack=stack,
                          options=ExecutorOptions(crash={fn: point}, retry_interval_s=0.05, progress=False))
    assert report.status == "succeeded", report.error
    assert report.tasks[fn]["attempts"] == 2
    assert "process ended" in report.tasks[fn]["errors"][0]["error"]
    check_freeing(report)


def test_pocket_holds_everything_until_the_run_ends(stack: Stack) -> None:
    fs = run_workflow(WC, config=stack.config, stack=stack, options=ExecutorOptions(progress=False))
    pk = run_workflow(WC, config=stack.config, stack=stack, policy="pocket", options=ExecutorOptions(progress=False))
    assert pk.status == "succeeded" and pk.policy == "pocket"
    inter = [o for o in pk.objects.values() if o["declared_reads"]]
    assert all(o["freed_reason"] != "committed" for o in inter)
    assert pk.memory["peak_live_bytes"] > fs.memory["peak_live_bytes"]
    assert pk.memory["leaked_bytes"] == 0


@pytest.mark.parametrize("policy", ["oracle", "jiffy:2000"])
def test_every_policy_runs_correctly_and_leaks_nothing(stack: Stack, policy: str) -> None:
    from pydoc_data.topics import topics

    r = run_workflow(WC, config=stack.config, stack=stack, policy=policy, options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    assert r.policy == policy and r.memory["leaked_bytes"] == 0
    assert output(stack, r, "word_counts") == expected_counts("\n\n".join(topics[k] for k in sorted(topics)))
