"""Release policies side by side on one trace, the predictor, and policy parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

import hdag
import wds
from funcsion_rpc import errors as E
from metadata_server import CoreDriver, Freed, HeuristicPredictor, parse_policy, pool_key


def trace(d: CoreDriver, r: str, step: float = 1.0, scale: int = 1) -> dict[str, float]:
    """Fig. 9 run, one operation per ``step`` seconds; returns when each object went."""
    gone: dict[str, float] = {}

    def do(out):
        for i in out:
            if isinstance(i, Freed):
                gone[i.object] = d.now
        d.advance(step)

    do(d.put(r, "", "in1", 100 * scale))
    do(d.put(r, "", "in2", 100 * scale))
    do(d.get(r, "F1", "in1"))
    do(d.put(r, "F1", "a", 300 * scale))
    do(d.get(r, "F2", "in2"))
    do(d.put(r, "F2", "b1", 100 * scale))
    do(d.put(r, "F2", "b2", 100 * scale))
    do(d.get(r, "F3", "a"))
    do(d.put(r, "F3", "c", 100 * scale))
    do(d.get(r, "F4", "b1"))
    do(d.put(r, "F4", "d", 100 * scale))
    do(d.get(r, "F5", "b2"))
    do(d.get(r, "F5", "d"))
    do(d.put(r, "F5", "e", 100 * scale))
    for o in "ace":
        do(d.get(r, "F6", o))
    do(d.put(r, "F6", "result", 100 * scale))
    do(d.end(r))
    d.state.validate_state()
    return gone


@pytest.fixture
def mk(fig9_path: Path):
    def make() -> tuple[CoreDriver, str]:
        d = CoreDriver(block_size=1000)
        key = d.register(fig9_path)
        d.capacity("s0", 32)
        return d, key
    return make


def test_pocket_frees_only_at_run_end(mk):
    d, key = mk()
    r = d.start(key, policy="pocket")
    gone = trace(d, r)
    assert len(set(gone.values())) == 1 and set(gone) >= {"in1", "a", "b1"}
    assert d.state.runs[r].summary()["kept"] == ["result"]


def test_funcstore_frees_at_commit_and_beats_pocket(mk):
    d, key = mk()
    r = d.start(key)
    gone = trace(d, r, scale=4)
    assert gone["in1"] < gone["a"] < gone["result"]
    d2, key2 = mk()
    r2 = d2.start(key2, policy="pocket")
    trace(d2, r2, scale=4)
    fs, pk = d.state.runs[r].summary(), d2.state.runs[r2].summary()
    assert fs["allocated_mb_s"] < pk["allocated_mb_s"]
    assert fs["live_mb_s"] < pk["live_mb_s"]


def test_oracle_frees_at_last_read_and_charges_exact_bytes(mk):
    d, key = mk()
    r = d.start(key, policy="oracle")
    d.put(r, "", "in1", 100)
    out = d.get(r, "F1", "in1")                      # the only declared read: gone now, no commit
    assert [i.object for i in out if isinstance(i, Freed)] == ["in1"]
    d.put(r, "", "in2", 100)
    run = d.state.runs[r]
    assert run.alloc_bytes == run.live_bytes == 100
    with pytest.raises(E.ObjectExpired, match="last read"):
        d.get(r, "F1", "in1")                        # a retry before the commit fails under oracle
    d.put(r, "F1", "a", 10)
    d.state.validate_state()
    d2, key2 = mk()
    r2 = d2.start(key2, policy="oracle")
    d3, key3 = mk()
    r3 = d3.start(key3)
    trace(d2, r2)
    trace(d3, r3)
    assert d2.state.runs[r2].summary()["allocated_mb_s"] <= d3.state.runs[r3].summary()["allocated_mb_s"]


def test_jiffy_lease_renewed_on_access(mk):
    d, key = mk()
    r = d.start(key, policy="jiffy:2000")
    d.put(r, "", "in1", 100)
    d.put(r, "", "in2", 100)
    d.advance(1.5)
    d.get(r, "F1", "in1")                 # renews in1
    d.advance(1.0)
    out = d.tick()
    assert [i.object for i in out if isinstance(i, Freed)] == ["in2"]
    d.advance(1.1)
    assert [i.object for i in d.tick() if isinstance(i, Freed)] == ["in1"]
    with pytest.raises(E.ObjectExpired, match="lease expired"):
        d.get(r, "F2", "in2")
    d.state.validate_state()


def test_jiffy_lease_keeps_outputs_in_cos(mk):
    d, key = mk()
    r = d.start(key, policy="jiffy:100")
    d.put(r, "F6", "result", 10)
    d.advance(1)
    out = d.tick()
    assert [(i.object, i.reason) for i in out if isinstance(i, Freed)] == [("result", "lease expired")]
    assert d.state.lookup(r, "result")["state"] == "kept"


def test_parse_policy():
    assert parse_policy("").name == "funcstore"
    assert parse_policy("Pocket").name == "pocket"
    j = parse_policy("jiffy:1500")
    assert (j.name, j.lease_s, j.spec) == ("jiffy", 1.5, "jiffy:1500")
    for bad in ("jiffy", "jiffy:0", "jiffy:x", "lru"):
        with pytest.raises(E.InvalidRequest):
            parse_policy(bad)


def test_heuristic_predictor_orders_by_distance(fig9_path: Path):
    h = hdag.build(wds.load(fig9_path))
    p = HeuristicPredictor()
    assert p.predict(h.objects["a"]) > p.predict(h.objects["d"])      # a lives to stage M+2, d to M+1
    assert pool_key(p.predict(h.objects["a"])) != pool_key(p.predict(h.objects["d"]))
    assert pool_key(0) == 0 and pool_key(-1) == 0


def test_custom_predictor_through_the_protocol(fig9_path: Path):
    class Const:
        def predict(self, obj: hdag.ObjectInfo) -> float:
            return 0.0

    d = CoreDriver(block_size=1000, predictor=Const())
    key = d.register(fig9_path)
    d.capacity("s0", 4)
    r = d.start(key)
    d.put(r, "", "in1", 10)
    d.put(r, "F1", "a", 10)
    assert list(d.state.allocator.pools) == [(r, 0)]
