"""The journal replays into exactly the state that wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import errors as E
from metadata_server import (BeginPut, CoreDriver, FinishPut, Get, Journal, MetadataHandler, MetadataState,
                             RegisterCapacity, RegisterWorkflow, StartRun)


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
             StartRun(1.0, "2", "fig9/9", "t", "funcstore", 10.0)])
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
