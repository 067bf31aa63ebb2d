"""The run report's ``objects`` table shows when every object was freed under every
release policy: ``funcstore`` and ``oracle`` free at the last reader's commit, ``pocket``
and ``jiffy`` (a lease longer than the run) only when the run ends, and the report must
show that end's time, not ``null`` (the metadata server forgets freed objects at the end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


@pytest.mark.parametrize("policy", ["pocket", "jiffy:600000", "funcstore", "oracle"])
def test_every_object_shows_when_it_was_freed(stack: Stack, policy: str) -> None:
    r = run_workflow(WC, config=stack.config, stack=stack, policy=policy, options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    assert r.memory["leaked_bytes"] == 0
    d = r.to_dict()
    assert len(d["objects"]) == 16
    for name, obj in d["objects"].items():
        assert obj["freed_at"] is not None, (policy, name, obj)
        assert obj["state"] == ("kept" if name == "word_counts" else "freed"), (policy, name, obj)
        assert obj["written_at"] <= obj["freed_at"] <= d["wall_s"], (policy, name, obj)
        if policy != "oracle":  # the oracle frees at the last read itself, before its commit
            commits = [d["tasks"][t]["committed_at"] for t in obj["reads"]]
            assert all(c <= obj["freed_at"] for c in commits), (policy, name)  # never early
    at_end = {n for n, o in d["objects"].items() if o["freed_reason"] == "run ended"}
    if policy in ("pocket", "jiffy:600000"):  # nothing is freed before the run ends
        assert at_end == set(d["objects"])
        assert len({o["freed_at"] for o in d["objects"].values()}) == 1
    else:  # only the output waits for the end; the rest went at their last reader's commit
        assert at_end == {"word_counts"}
