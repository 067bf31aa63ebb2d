"""The journal replays into exactly the state that wrote it; it holds token digests, never
tokens (older journals are migrated when opened), in private files."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from funcsion_rpc import errors as E
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server import (BeginPut, CoreDriver, FinishPut, Get, Journal, MetadataHandler, MetadataState,
                             RegisterCapacity, RegisterWorkflow, StartRun, token_digest)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 0.5
        return self.t


def snapshot(state: MetadataState) -> dict:
    st = state.stats()
    st.pop("samples")
    runs = {r: {o: (rec.state, rec.remaining, rec.placement, tuple(rec.committed_by))
                for o, rec in run.objects.items()} | {"$buffers": dict(run.buffers),
                                                        "$committed": dict(run.committed)}
            for r, run in state.runs.items()}
    return {"stats": st, "runs": runs, "pending": list(state.pending), "used": sorted(state.allocator.used)}


def test_replay_rebuilds_state(tmp_path: Path, fig9_path: Path):
    clock = Clock()
    j = Journal(tmp_path / "j.db")
    h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="a", clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9"),
             RegisterCapacity(clock(), "2", "s0", 8)])
    info = h.start_run("a", "fig9/9", "funcstore", 0)
    r, tok = info.run_id, info.token
    h.apply([BeginPut(clock(), "3", r, "", "in1", 10, "x", False), FinishPut(clock(), "4", r, "", "in1")])
    h.apply([Get(clock(), "5", r, "F1", "in1")])
    with pytest.raises(Exception):        # refused events are not journaled
        h.apply([Get(clock(), "6", r, "F3", "a")])
    h.apply([BeginPut(clock(), "7", r, "F1", "a", 10, "y", False), FinishPut(clock(), "8", r, "F1", "a")])
    h.tick()
    want = snapshot(h.state)
    n = j.seq
    j.close()
    j2 = Journal(tmp_path / "j.db")
    h2 = MetadataHandler(MetadataState(block_size=1000), journal=j2, admin_token="a", clock=clock)
    assert j2.seq == n == 8
    got = snapshot(h2.state)
    assert got["runs"] == want["runs"] and got["pending"] == want["pending"] and got["used"] == want["used"]
    assert got["stats"]["counters"] == want["stats"]["counters"]
    assert h2.state.authorize(r, tok)
    h2.state.validate_state()
    j2.close()


def test_partial_batch_journals_the_applied_prefix(tmp_path: Path, fig9_path: Path):
    j = Journal(tmp_path / "j.db", sync="off")
    d = CoreDriver(block_size=1000)
    h = MetadataHandler(d.state, journal=j, admin_token="a", clock=lambda: 1.0)
    h.apply([RegisterWorkflow(1.0, "1", fig9_path.read_text(), {}, "fig9"),
             StartRun(1.0, "2", "fig9/9", token_digest("t"), "funcstore", 10.0)])
    with pytest.raises(E.UndeclaredOutput):
        h.apply([BeginPut(1.0, "3", "r-1", "", "in1", 1, "", False),
                 BeginPut(1.0, "3", "r-1", "", "a", 1, "", False)])
    assert j.seq == 3
    kinds = [type(e).__name__ for e in j.replay()]
    assert kinds == ["RegisterWorkflow", "StartRun", "BeginPut"]
    j.close()


def test_bad_sync_mode(tmp_path: Path):
    with pytest.raises(ValueError, match="sync"):
        Journal(tmp_path / "x.db", sync="sometimes")


def test_registration_applies_the_wds_limits_but_replay_does_not(tmp_path: Path, fig9_path: Path):
    """The server refuses a WDS over its limits; a workflow journaled under higher limits
    still replays after a restart with lower ones (the journal is funcsion's own text)."""
    import wds

    clock = Clock()
    tight = wds.Limits(max_functions=5)  # fig9 has 6 functions
    with pytest.raises(wds.WDSValidationError, match="expands to 6 functions, over the limit of 5"):
        MetadataState(wds_limits=tight).handle(RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9"))
    j = Journal(tmp_path / "j.db")
    h = MetadataHandler(MetadataState(), journal=j, admin_token="a", clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9")])
    j.close()
    j2 = Journal(tmp_path / "j.db")
    h2 = MetadataHandler(MetadataState(wds_limits=tight), journal=j2, admin_token="a", clock=clock)
    assert "fig9/9" in h2.state.workflows and h2.state.wds_limits == tight
    j2.close()


# -- tokens at rest and file modes ------------------------------------------------------
def journal_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_the_journal_holds_token_digests_not_tokens(tmp_path: Path, fig9_path: Path):
    path = tmp_path / "metadata.journal"
    j = Journal(path)
    h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="adm", clock=Clock())
    h.register_workflow("adm", fig9_path.read_text(), {}, "fig9")
    tokens = [h.start_run("adm", "fig9/9", "funcstore", 0).token for _ in range(3)]
    body = journal_bytes(path)
    for tok in tokens:
        assert tok.encode() not in body and token_digest(tok).encode() in body
    j.close()
    assert all(tok.encode() not in path.read_bytes() for tok in tokens)
    with Journal(path) as j2:                           # the digests replay into working runs
        h2 = MetadataHandler(MetadataState(block_size=1000), journal=j2, admin_token="adm", clock=Clock())
        assert h2.state.authorize("r-2", tokens[1]).run_id == "r-2"
        with pytest.raises(E.Unauthorized):
            h2.state.authorize("r-2", tokens[0])
        assert j2.migrated == 0


def test_an_old_journal_with_clear_tokens_replays_and_loses_them(tmp_path: Path, fig9_path: Path):
    path = tmp_path / "old.journal"
    db = sqlite3.connect(path)                          # what earlier versions wrote
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, body TEXT NOT NULL)")
    rows = [("RegisterWorkflow", {"now": 1.0, "rid": "m1", "wds_text": fig9_path.read_text(), "params": {},
                                  "source": "fig9"}),
            ("RegisterCapacity", {"now": 1.5, "rid": "m2", "function": "s0", "blocks": 8}),
            ("StartRun", {"now": 2.0, "rid": "m3", "workflow_key": "fig9/9", "token": "c1ear-t0ken-0ne",
                          "policy": "funcstore", "ttl_s": 3600.0, "max_concurrency": 0, "capacity_bytes": 0,
                          "latency_sensitive": True}),
            ("BeginPut", {"now": 3.0, "rid": "m4", "run_id": "r-1", "function": "", "object": "in1", "size": 10,
                          "checksum": "x", "persist": False, "adhoc": False}),
            ("StartRun", {"now": 4.0, "rid": "m5", "workflow_key": "fig9/9", "token": "c1ear-t0ken-two",
                          "policy": "funcstore", "ttl_s": 3600.0})]
    db.executemany("INSERT INTO events VALUES (?, ?, ?)",
                   [(i + 1, kind, json.dumps(body)) for i, (kind, body) in enumerate(rows)])
    db.commit()
    db.close()
    assert b"c1ear-t0ken-0ne" in journal_bytes(path)
    with Journal(path) as j:
        assert j.migrated == 2 and j.seq == 5
        h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="adm", clock=Clock())
        assert h.state.authorize("r-1", "c1ear-t0ken-0ne").run_id == "r-1"
        assert h.state.authorize("r-2", "c1ear-t0ken-two").run_id == "r-2"
        assert h.state.runs["r-1"].objects["in1"].size == 10
        h.state.validate_state()
    body = journal_bytes(path)
    assert b"c1ear-t0ken" not in body and token_digest("c1ear-t0ken-0ne").encode() in body
    with Journal(path) as j:                            # migrated once
        assert j.migrated == 0


def test_a_new_journal_is_private_and_existing_modes_are_kept(tmp_path: Path):
    old = os.umask(0o022)
    try:
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        path = shared / "a" / "b" / "metadata.journal"
        with Journal(path) as j:
            j.append([RegisterCapacity(1.0, "1", "s0", 4)])
            assert sorted(p.name for p in path.parent.iterdir()) == ["metadata.journal"]   # no side files
            modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (shared, path.parent.parent, path.parent, path)}
        assert modes == {shared: 0o755, path.parent.parent: 0o700, path.parent: 0o700, path: 0o600}
        loose = tmp_path / "loose.journal"
        loose.touch(mode=0o644)
        Journal(loose).close()
        assert stat.S_IMODE(loose.stat().st_mode) == 0o644   # an existing file is the operator's
    finally:
        os.umask(old)


def test_non_ascii_tokens_are_unauthorized_not_internal(fig9_path: Path):
    h = MetadataHandler(MetadataState(block_size=1000), admin_token="adm", clock=Clock())
    h.register_workflow("adm", fig9_path.read_text(), {}, "fig9")
    run = h.start_run("adm", "fig9/9", "funcstore", 0).run_id
    for call in (lambda: h.lookup("\u00e9t\u00e9", run, "in1"), lambda: h.end_run("\u2603", run, ""),
                 lambda: h.stats("\u00e4dmin")):
        with pytest.raises(T.MetadataFault) as info:
            call()
        assert info.value.code == E.ErrorCode.UNAUTHORIZED, info.value.message
