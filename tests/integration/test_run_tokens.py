"""A task of a real run holds its run's tokens only: its event carries a
run-scoped store token (no store-wide or admin token), and with it the task
can neither read, overwrite, delete nor free another run's object, nor read
that run's persisted COS copy, which stays readable."""

from __future__ import annotations

import json
from pathlib import Path

from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.auth import token_scope
from storage_functions.cos import open_cos

WF = Path(__file__).resolve().parent / "tokenwf" / "token.wds.json"


def test_a_task_gets_only_its_runs_tokens_and_cannot_reach_another_run(stack: Stack, tmp_path: Path) -> None:
    with stack.client() as c:
        victim = c.start_run(c.register_workflow(WF.read_text(), {}, str(WF)))
        victim.put("target", "the victim's bytes", persist=True)
        target = tmp_path / "target.txt"
        target.write_text(f"{victim.run_id}/target")

        r = run_workflow(WF, config=stack.config, stack=stack, inputs={"target": str(target)},
                         options=ExecutorOptions(progress=False))
        assert r.status == "succeeded", r.error
        with open_cos(stack.config.resolved_cos_url) as cos:
            seen = json.loads(cos.get(f"outputs/{r.run_id}/seen"))

        ctx = seen["context"]
        assert token_scope(ctx["store_token"], stack.store.token) == f"{r.run_id}/"
        assert "admin_token" not in ctx
        assert stack.store.token not in json.dumps(ctx) and stack.admin_token not in json.dumps(ctx)
        assert seen["tried"] == {op: "refused" for op in ("get", "put", "delete", "free", "cos_get")}
        # the victim's object and its persisted copy are whole, and its metadata is true
        assert victim.lookup("target").state == "readable"
        assert victim.get("target") == "the victim's bytes"
        assert victim.fetch("target") == "the victim's bytes"
        victim.end_run("succeeded")
        victim.delete("target")
        victim.close()
