"""Pocket's PERSIST with a timeout on the embedded stack: ``put(..., persist=<lifetime>)``
keeps a COS copy for that long after the run ends, then the daemon's sweep deletes it; the
report lists each copy's expiry, ``funcsion runs`` what a finished run still keeps, and a
copy put with ``persist=True`` follows the stack's ``persist_ttl_s`` (0: until deleted)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from sdk import ConfigError
from sdk._config import Config
from sdk.cli.runs_cmd import format_runs, keeps
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos
from tests._waiting import wait_for

WF = Path(__file__).resolve().parent / "persistwf" / "persist.wds.json"
WDS = {"app": "persist-ttl-driver", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "f", "input": ["x"], "output": [], "next": []}]}}}


def cos_has(stack: Stack, key: str) -> bool:
    with open_cos(stack.config.resolved_cos_url) as cos:
        return key in cos.list(key)


def test_a_copy_with_a_lifetime_is_deleted_by_the_sweep_after_its_run_ends(stack: Stack) -> None:
    with stack.client() as driver:
        run = driver.start_run(driver.register_workflow(json.dumps(WDS)))
        run.put("short", b"gone soon", persist=2, adhoc=True)
        run.put("kept", b"until deleted", persist=True, adhoc=True)
        short, kept = f"persisted/{run.run_id}/short", f"persisted/{run.run_id}/kept"
        assert run.persisted_lifetime("short") == {"keep_s": 2.0, "expires_at": None}  # the run runs
        assert run.persisted_lifetime("kept") is None
        with pytest.raises(ConfigError, match="persist=-1"):
            run.put("bad", b"x", persist=-1, adhoc=True)
        ended = time.time()
        run.end_run("succeeded")
        life = wait_for(lambda: (run.persisted_lifetime("short") or {}).get("expires_at"), 30,
                        "the daemon fixing the expiry at the run's end")
        assert ended <= life <= time.time() + 2.0
        assert cos_has(stack, short) and cos_has(stack, kept)
        wait_for(lambda: not cos_has(stack, short), 30, "the sweep deleting the expired copy")
        assert time.time() >= ended + 2.0  # not before its lifetime was over
        assert cos_has(stack, kept)  # persist=True with the default of 0: kept until deleted
        assert stack.store.daemon.counters["persisted_expired"] >= 1
        run.delete("kept")
        assert not cos_has(stack, kept)
        run.close()


@pytest.fixture(scope="module")
def ttl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={"FUNCSION_PERSIST_TTL_S": "3"})
    assert cfg.persist_ttl_s == 3.0
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        yield st


def test_the_report_lists_each_copys_expiry_and_runs_what_the_run_still_keeps(ttl_stack: Stack,
                                                                              tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("alpha\nbeta\n")
    r = run_workflow(WF, config=ttl_stack.config, stack=ttl_stack, inputs={"src": str(src)},
                     options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    assert set(r.persisted) == {"brief", "summary"}
    doc = r.to_dict()
    exp = doc["persisted_expiry"]
    assert set(exp) == {"brief", "summary"}  # persist=timedelta(2 s), and persist=True with the stack's 3 s
    assert exp["brief"]["keep_s"] == 2.0 and exp["summary"]["keep_s"] == 3.0
    assert exp["brief"]["location"] == r.persisted["brief"]
    now = time.time()
    assert now - 1 < exp["brief"]["expires_at"] <= now + 2.0
    held = keeps(doc, now)
    assert set(held["persisted"]) == {"brief", "summary"} and held["outputs"] == ["result"]
    assert "brief (until" in format_runs([{**doc, "tasks": 2, "peak_bytes": 0, "mb_s": 0, "keeps": held}])
    key = f"persisted/{r.run_id}/brief"
    wait_for(lambda: not cos_has(ttl_stack, key), 30, "the sweep deleting the brief")
    wait_for(lambda: not cos_has(ttl_stack, f"persisted/{r.run_id}/summary"), 30, "the sweep deleting the summary")
    assert keeps(doc, exp["summary"]["expires_at"] + 0.001)["persisted"] == {}  # runs: nothing left but outputs
    with open_cos(ttl_stack.config.resolved_cos_url) as cos:
        assert json.loads(cos.get(f"outputs/{r.run_id}/result"))["brief"] == "alpha"


def test_persist_takes_a_timedelta_seconds_or_a_flag_and_refuses_the_rest() -> None:
    from sdk._persist import persist_lifetime

    assert persist_lifetime(False) is False and persist_lifetime(True) is None
    assert persist_lifetime(timedelta(minutes=2)) == 120.0 and persist_lifetime(2) == 2.0
    for bad in (0, -1, float("inf"), "2s", timedelta(0)):
        with pytest.raises(ConfigError, match="persist="):
            persist_lifetime(bad)  # type: ignore[arg-type]
