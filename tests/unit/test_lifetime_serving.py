"""Lifetime prediction in the metadata core: predictions made at registration and run
start and journaled with the run, grouping by lifetime or by predicted expiry, measured
lifetimes recorded for the datasets, and the handler's run observers."""

from __future__ import annotations

from pathlib import Path

import pytest

import hdag
from funcsion_rpc import errors as E
from metadata_server import (CoreDriver, HeuristicPredictor, MetadataHandler, MetadataState, Placed, StartRun,
                             group_key, parse_policy, pool_key, reply, rows_of_run)
from metadata_server import _events as ev


class ByName:
    """Predicts from a table by object name; ``revision`` says which table."""

    def __init__(self, table: dict[str, float], rev: str = "t1") -> None:
        self.table, self.rev = table, rev

    def predict(self, obj: hdag.ObjectInfo) -> float:
        return self.table.get(obj.name, 0.0)

    def revision(self, category: str) -> str:
        return self.rev


def block_of(out) -> tuple[str, int]:
    e = reply(out, Placed).placement.extents[0]
    return (e.function, e.block)


# -- policies ---------------------------------------------------------------------------
def test_grouping_policies_parse_and_round_trip():
    assert parse_policy("funcstore").grouping == "lifetime"
    p = parse_policy("funcstore:expiry")
    assert (p.grouping, p.window_s, p.spec) == ("expiry", 0.25, "funcstore:expiry:250")
    assert parse_policy("FUNCSTORE:EXPIRY:1000").window_s == 1.0
    nog = parse_policy("funcstore:nogroup")
    assert not nog.lifetime_pools and nog.frees_on_commit and nog.spec == "funcstore:nogroup"
    for bad in ("funcstore:expiry:0", "funcstore:expiry:x", "funcstore:bogus"):
        with pytest.raises(E.InvalidRequest, match="funcstore:expiry"):
            parse_policy(bad)


def test_group_key_by_lifetime_expiry_or_none():
    life, exp, none = parse_policy("funcstore"), parse_policy("funcstore:expiry:1000"), parse_policy("funcstore:nogroup")
    assert group_key(life, 3.0, 0.0) == group_key(life, 3.0, 50.0) == pool_key(3.0)
    assert group_key(exp, 5.0, 0.2) == group_key(exp, 1.0, 4.5) == 5          # both expire at ~5 s
    assert group_key(exp, 5.0, 0.0) != group_key(exp, 5.0, 3.0)
    assert group_key(none, 0.1, 0.0) == group_key(none, 90.0, 7.0) == 0


# -- predictions at registration and run start ------------------------------------------------
def test_predictions_at_registration_and_again_at_start_when_the_model_changed(fig9_path: Path):
    p = ByName({"a": 4.0, "d": 1.0})
    d = CoreDriver(block_size=1000, predictor=p)
    key = d.register(fig9_path)
    entry = d.state.workflows[key]
    assert entry.lifetimes["a"] == 4.0 and entry.revision == "t1"
    r1 = d.start(key)
    assert d.state.runs[r1].predicted["a"] == 4.0
    p.table, p.rev = {"a": 9.0}, "t2"                     # a new model: no re-registration, no restart
    r2 = d.start(key)
    assert d.state.runs[r2].predicted["a"] == 9.0 and d.state.runs[r1].predicted["a"] == 4.0
    start = [e for e in d.log if isinstance(e, StartRun)]
    assert start[0].lifetimes["a"] == 4.0 and start[1].lifetimes["a"] == 9.0   # journaled with the run


class ByWave:
    """A model-like predictor: seconds from the wave features of the run's concurrency."""

    def predict(self, obj: hdag.ObjectInfo) -> float:
        return 0.0

    def revision(self, category: str) -> str:
        return "waves"

    def predict_graph(self, graph: hdag.HDAG, concurrency: int = 0) -> dict[str, float]:
        return {n: 1.0 + f.W_write + 10 * f.W_read for n, f in graph.features_at(concurrency).items()}


def test_a_runs_predictions_and_rows_use_its_concurrency_and_survive_replay(fig9_path: Path):
    """b2: F2 (index 1 of stage M) writes it, F5 (index 2 of stage M+1) reads it. With 1 task
    at once they run in waves 1 and 2, with 2 in waves 0 (slot 1) and 1; unknown: the widest
    stage (3) is one wave."""
    d = CoreDriver(block_size=1000, predictor=ByWave())
    key = d.register(fig9_path)
    assert d.state.workflows[key].lifetimes["b2"] == pytest.approx(1.0 + 0.333 + 10 * 0.667)  # widest: 3
    one, two = d.start(key, max_concurrency=1), d.start(key, max_concurrency=2)
    assert d.state.runs[one].predicted["b2"] == pytest.approx(1.0 + 1.0 + 10 * 2.0)
    assert d.state.runs[two].predicted["b2"] == pytest.approx(1.0 + 0.5 + 10 * 1.0)
    assert d.state.runs[one].concurrency == 1
    d.capacity("s0", 64)
    d.put(one, "", "in2", 100)
    d.get(one, "F2", "in2")
    d.put(one, "F2", "b1", 70)
    d.put(one, "F2", "b2", 80)
    d.get(one, "F4", "b1")
    d.put(one, "F4", "d", 10)                                                     # b1 freed: measured
    (b1,) = rows_of_run(d.state.runs[one], "s")
    assert b1.features[5:] == (1.0, 1.0)                                         # F2 and F4: index 1 of 1 at once
    replayed = MetadataState(block_size=1000, predictor=HeuristicPredictor())
    for e in d.log:
        replayed.handle(e)
    assert replayed.runs[one].concurrency == 1 and replayed.runs[one].predicted == d.state.runs[one].predicted
    assert rows_of_run(replayed.runs[one], "s") == [b1]


def test_replay_places_with_the_journaled_predictions_not_todays_model(fig9_path: Path):
    """A replayed journal must rebuild the placements the daemon holds, whatever model
    serves at replay time."""
    d = CoreDriver(block_size=1000, predictor=ByName({"a": 40.0, "b1": 0.1, "b2": 0.1}))
    key = d.register(fig9_path)
    d.capacity("s0", 64)
    r = d.start(key)
    d.put(r, "", "in1", 100)
    d.put(r, "", "in2", 100)
    d.get(r, "F1", "in1")
    placed = {"a": block_of(d.put(r, "F1", "a", 900))}    # too big for the inputs' block: a block of its own
    d.get(r, "F2", "in2")
    placed["b1"] = block_of(d.put(r, "F2", "b1", 100))    # short: the inputs' pool (a's block has room too)
    placed["b2"] = block_of(d.put(r, "F2", "b2", 100))
    assert placed["a"] != placed["b1"] == placed["b2"]    # today's model would put b1 beside a
    replayed = MetadataState(block_size=1000, predictor=ByName({"a": 0.1, "b1": 40.0, "b2": 0.1}, "other"))
    for e in d.log:
        replayed.handle(e)
    again = {n: replayed.runs[r].objects[n].placement.extents[0] for n in placed}
    assert {n: (x.function, x.block) for n, x in again.items()} == placed
    replayed.validate_state()


def test_expiry_grouping_puts_objects_that_die_together_in_one_block(fig9_path: Path):
    """b1 lives 5 s from t=0 and d lives 1 s from t=4: by lifetime d joins a's pool (also
    1 s), by predicted expiry (both ~5 s) b1's, so each shares that pool's block."""
    blocks = {}
    for spec in ("funcstore", "funcstore:expiry:1000"):
        d = CoreDriver(block_size=1000, predictor=ByName({"a": 1.0, "b1": 5.0, "b2": 5.0, "d": 1.0}))
        key = d.register(fig9_path)
        d.capacity("s0", 64)
        r = d.start(key, policy=spec)
        d.put(r, "", "in1", 100)
        d.put(r, "", "in2", 100)
        d.get(r, "F1", "in1")
        a = block_of(d.put(r, "F1", "a", 950))            # a block of its own, 50 bytes left
        d.get(r, "F2", "in2")
        b1 = block_of(d.put(r, "F2", "b1", 600))
        d.put(r, "F2", "b2", 100)
        d.advance(4.0)
        d.get(r, "F4", "b1")
        blocks[spec] = (a, b1, block_of(d.put(r, "F4", "d", 40)))
        d.state.validate_state()
    a, b1, by_lifetime = blocks["funcstore"]
    assert a != b1 and by_lifetime == a
    a, b1, by_expiry = blocks["funcstore:expiry:1000"]
    assert a != b1 and by_expiry == b1


def test_nogroup_puts_every_slice_in_one_pool(fig9_path: Path):
    d = CoreDriver(block_size=1000, predictor=ByName({"a": 40.0, "b1": 0.1}))
    key = d.register(fig9_path)
    d.capacity("s0", 64)
    r = d.start(key, policy="funcstore:nogroup")
    d.put(r, "", "in1", 100)
    d.put(r, "", "in2", 100)
    d.get(r, "F1", "in1")
    a = block_of(d.put(r, "F1", "a", 100))
    d.get(r, "F2", "in2")
    assert block_of(d.put(r, "F2", "b1", 100)) == a


# -- measured lifetimes -----------------------------------------------------------------
def test_measured_lifetimes_become_dataset_rows(fig9_path: Path):
    d = CoreDriver(block_size=1000)
    key = d.register(fig9_path)
    d.capacity("s0", 64)
    r = d.start(key)
    d.put(r, "", "in2", 100)
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 70)           # readable at t=0
    d.put(r, "F2", "b2", 80)
    d.advance(2.5)
    d.get(r, "F4", "b1")
    d.put(r, "F4", "d", 10)            # F4 commits: b1 freed at 2.5 s
    run = d.state.runs[r]
    assert run.measured["b1"] == (2.5, 70)
    rows = rows_of_run(run, "sess")
    (b1,) = [x for x in rows if x.object == "b1"]
    g = run.graph.objects["b1"]
    assert (b1.run, b1.workflow, b1.size, b1.lifetime_ms) == (f"sess/{r}", key, 70, 2500.0)
    assert b1.features == g.features.vector()
    assert "in2" in run.measured and all(x.object != "in2" for x in rows)    # an input has no features


def test_run_observers_see_live_finished_runs_not_replayed_ones(fig9_path: Path, tmp_path: Path):
    from metadata_server import Journal

    seen: list[str] = []
    j = Journal(str(tmp_path / "j"))
    h = MetadataHandler(MetadataState(), journal=j, clock=lambda: 1.0)
    h.add_run_observer(lambda run: seen.append(run.run_id))
    (reg,) = h.apply([ev.RegisterWorkflow(1.0, "q1", fig9_path.read_text(), {})])
    h.apply([ev.StartRun(1.0, "q2", reg[0].key, "0" * 64)])
    assert seen == []
    h.apply([ev.EndRun(2.0, "q3", "r-1", "succeeded")])
    assert seen == ["r-1"]
    j.close()
    seen2: list[str] = []
    h2 = MetadataHandler(MetadataState(), journal=Journal(str(tmp_path / "j")))
    h2.add_run_observer(lambda run: seen2.append(run.run_id))
    assert h2.state.runs["r-1"].state == "ended" and seen2 == []
    h2.journal.close()


def test_heuristic_serves_without_a_model(fig9_path: Path):
    d = CoreDriver(block_size=1000)
    key = d.register(fig9_path)
    r = d.start(key)
    g = d.state.runs[r].graph
    assert d.state.runs[r].predicted["a"] == HeuristicPredictor().predict(g.objects["a"])
