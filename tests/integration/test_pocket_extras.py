"""Pocket's extras on the embedded stack (Pocket Sec. 3.2, 4.1): ad-hoc keys freed by
get(delete=True) at the reader's commit, persist=True copies that outlive the run,
and run-start hints that reach the allocator and the storage layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk.exceptions import UnknownObject
from sdk.local._executor import ExecutorOptions
from sdk.local._run import RunHints, run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos

WF = Path(__file__).resolve().parent / "pocketwf" / "pocket.wds.json"
TEXT = "alpha\nbeta\ngamma\n"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "src.txt"
    p.write_text(TEXT)
    return p


def cos_keys(stack: Stack, prefix: str) -> list[str]:
    with open_cos(stack.config.resolved_cos_url) as cos:
        return cos.list(prefix)


def run(stack: Stack, src: Path, **kw):  # type: ignore[no-untyped-def]
    opts = kw.pop("options", ExecutorOptions(progress=False))
    return run_workflow(WF, config=stack.config, stack=stack, inputs={"src": str(src)}, options=opts, **kw)


def test_adhoc_notes_are_freed_at_the_readers_commit_even_when_it_crashes(stack: Stack, src: Path) -> None:
    # the consumer crashes after its commit on the first attempt: the retry must not fail on
    # the notes it already deleted, and nothing may be left behind
    r = run(stack, src, options=ExecutorOptions(progress=False, crash={"consumer": "end"}))
    assert r.status == "succeeded", r.error
    assert r.tasks["consumer"]["attempts"] == 2
    notes = {n: o for n, o in r.objects.items() if n.startswith("note/")}
    assert sorted(notes) == ["note/0", "note/1", "note/2"]
    committed = r.tasks["consumer"]["committed_at"]
    for o in notes.values():
        assert o["freed_reason"] == "deleted after read"
        assert o["freed_at"] == pytest.approx(committed, abs=1e-3)   # freed by the commit itself
    assert r.memory["leaked_bytes"] == 0
    with open_cos(stack.config.resolved_cos_url) as cos:
        result = json.loads(cos.get(f"outputs/{r.run_id}/result"))
    assert result["notes"] == ["ALPHA", "BETA", "GAMMA"]


def test_persisted_summary_outlives_the_run_until_deleted(stack: Stack, src: Path) -> None:
    r = run(stack, src)
    assert r.status == "succeeded", r.error
    assert set(r.persisted) == {"summary"}
    assert r.objects["summary"]["state"] == "kept"
    assert r.memory["leaked_bytes"] == 0          # its memory went back at its last read
    with stack.client() as c:
        old = c.bind(run_id=r.run_id)
        assert old.fetch("summary") == {"notes": 3, "chars": len(TEXT) - 3}
        assert json.loads(old.fetch("result")) == json.loads(open_cos(stack.config.resolved_cos_url)
                                                             .get(f"outputs/{r.run_id}/result"))
        old.delete("summary")
        with pytest.raises(UnknownObject, match="persist=True"):
            old.fetch("summary")
        assert (old.lookup("summary").state, old.lookup("summary").freed_reason) == ("freed", "deleted")
    assert cos_keys(stack, f"persisted/{r.run_id}/") == []


def test_latency_insensitive_run_keeps_its_data_in_cos_only(stack: Stack, src: Path) -> None:
    before = stack.store.daemon.stats()["puts"]
    r = run(stack, src, hints=RunHints(latency_sensitive=False))
    assert r.status == "succeeded", r.error
    assert r.plan == {"tier": "cos"}
    assert stack.store.daemon.stats()["puts"] == before      # no byte went to function memory
    assert r.memory["mb_s"] == 0 and r.memory["peak_bytes"] == 0
    assert r.memory["leaked_bytes"] == 0
    stack.drain()
    assert cos_keys(stack, f"tier/{r.run_id}/") == []         # every COS-tier object was deleted
    with open_cos(stack.config.resolved_cos_url) as cos:
        assert json.loads(cos.get(f"outputs/{r.run_id}/result"))["notes"] == ["ALPHA", "BETA", "GAMMA"]


def test_capacity_hint_scales_out_and_warms_functions_before_the_first_put(stack: Stack, src: Path) -> None:
    groups = stack.groups_registered
    dc = stack.daemon_config
    per_group = dc.group_size * (dc.capacity // dc.block_size)
    r = run(stack, src, hints=RunHints(capacity_bytes=(per_group + 1) * dc.block_size))
    assert r.status == "succeeded", r.error
    assert r.plan["budget_bytes"] == (per_group + 1) * dc.block_size
    assert r.plan.get("scale_out_blocks", 0) > 0
    assert stack.groups_registered > groups
    assert stack.store.daemon.stats()["prewarmed"] >= dc.group_size * stack.groups_registered


def test_cli_hints_reach_the_run_and_bad_sizes_are_refused(tmp_path: Path, src: Path) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(WF), "--input", f"src={src}",
                               "--state-dir", str(tmp_path / "state"), *args],
                              capture_output=True, text=True, timeout=180, cwd=tmp_path)

    proc = cli("--capacity", "3MiB", "--max-concurrency", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert doc["plan"]["budget_bytes"] == 3 << 20 and doc["plan"]["functions"] >= 2
    where = doc["persisted"]["summary"]  # the file that holds the copy (codec byte + payload)
    assert f"persisted summary: {where} (kept until deleted)" in proc.stdout and Path(where).is_file()
    bad = cli("--capacity", "lots")
    assert bad.returncode == 2 and "'lots' is not a size" in bad.stderr and "Traceback" not in bad.stderr
