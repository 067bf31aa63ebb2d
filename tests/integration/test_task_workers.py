"""A run's task workers on the embedded stack: forked from a fork server that
imported ``sdk`` once, the next stage's workers started while the stage
before it runs, and nothing of one run (module state, cached clients, tokens)
in the workers of the next; a task holds its own run's store token only."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.auth import token_scope
from storage_functions.cos import open_cos

WF = Path(__file__).resolve().parent / "workerswf"


@pytest.mark.slow
def test_workers_are_forked_started_a_stage_ahead_and_hold_only_their_run(stack: Stack, tmp_path: Path) -> None:
    wf = tmp_path / "wf"
    shutil.copytree(WF, wf)
    (wf / "src.txt").write_text("payload")
    seen_by_run: dict[str, list[dict[str, object]]] = {}
    for _ in range(2):
        for marker in wf.glob("imported-*"):
            marker.unlink()
        r = run_workflow(wf / "workers.wds.json", config=stack.config, stack=stack,
                         inputs={"src": str(wf / "src.txt")}, options=ExecutorOptions(concurrency=2, progress=False))
        assert r.status == "succeeded", r.error
        # both stage-1 workers existed before stage 1 started: neither of its tasks started one
        assert [r.tasks[f"second_{i}"]["tries"][0]["cold"] for i in range(2)] == [False, False]
        with open_cos(stack.config.resolved_cos_url) as cos:
            seen_by_run[r.run_id] = [json.loads(cos.get(f"outputs/{r.run_id}/seen_{i}")) for i in range(2)]

    for run_id, seen in seen_by_run.items():
        for s in seen:
            assert s["preloaded"] is True and s["ppid"] != os.getpid()  # forked, sdk already imported
            assert s["run"] == run_id
            assert set(s["state"]) <= {run_id}                          # a warm worker of this run at most
            assert token_scope(str(s["given"]), stack.store.token) == f"{run_id}/"
            assert all(token_scope(str(t), stack.store.token) == f"{run_id}/" for t in s["cached"])  # type: ignore[union-attr]
            assert s["env"] == []                                       # no token in the worker's environment
