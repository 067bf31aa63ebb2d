"""GC compaction moves what the metadata server placed (SION Sec. 5.3.3, issue 33 item 3), on
the real stack with a short window: objects read again and again across GC rounds are moved,
each time their functions turn degraded, to the newest bucket's functions (the metadata
server's allocator takes the new extents and frees the old, the daemon loads the chunks there
from COS and drops the old copies); the functions they left are emptied and released; no
read within H is served from COS; nothing is lost; and when the moves have landed, the
allocator's extents are where the daemon's table and its ledger say the bytes are."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._config import Config
from sdk.local._stack import Stack
from storage_functions.daemon._objects import chunk_key
from tests._waiting import wait_for

MiB = 1 << 20
# rounds every second; a bucket stays active 1 round, then degraded 2 (H = 3 s); six groups of
# 4+2 functions to move into (a move that finds none asks a scale-out)
GC = {"gc_interval_s": 1.0, "gc_active": 1, "gc_degraded": 2, "parity_upload_delay_s": 0.0, "group_size": 6,
      "max_functions": 36}
ROUNDS = 7
WDS = {"app": "moves", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={}, ec_data=4, ec_parity=2,
                      function_memory_mb=256)
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=GC) as st:
        yield st


def _functions(run: Any, name: str) -> frozenset[str]:
    return frozenset(e.function_name for e in run.lookup(name).placement.extents)


def _extents_match_the_daemon(stack: Stack, run: Any, name: str) -> None:
    """Every chunk of ``name`` is where the metadata server's extents say: the daemon's table
    places each stripe's chunk there and its ledger holds it there."""
    d = stack.store.daemon
    bs = d.config.block_size
    pl = run.lookup(name).placement
    starts: dict[int, tuple[str, int, int]] = {}
    for e in sorted(pl.extents, key=lambda e: (e.chunk, e.block)):
        starts.setdefault(int(e.chunk), (e.function_name, int(e.block), int(e.offset)))
    obj = d.table.latest(f"{run.run_id}/{name}")
    assert obj is not None and obj.alloc is not None
    for i, (fn, block, off) in starts.items():
        at = off
        for s, st in enumerate(obj.stripes):
            want = (int(fn.rsplit("-", 1)[1]), block + at // bs, at % bs)
            assert st.places[i] == want, (name, s, i, st.places[i], want)
            entry = d.ledger.entries.get((fn, chunk_key(obj.key, obj.version, s, i)))
            assert entry is not None and entry.start == want[1] * bs + want[2], (name, s, i, entry)
            at += st.cl
    # a restarted daemon restores the version where the moves put it (its durable table's image)
    logged = d.durable.log.image.live[obj.key][obj.version]
    assert [[tuple(pl) if pl is not None else None for pl in st["places"]] for st in logged["stripes"]] == [
        list(st.places) for st in obj.stripes], name


def test_objects_read_across_rounds_move_forward_and_their_old_functions_are_released(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=6)
    wait_for(lambda: len(driver.metadata.stats()["functions"]) >= 6, 30, "a function group registered")

    def rounds() -> int:
        return int((d.stats()["gc"] or {}).get("rounds", 0))

    hot = {"hot-big": os.urandom(3 * MiB), "hot-mid": os.urandom(2 * MiB), "hot-small": os.urandom(200_000)}
    cold = {f"cold-{i}": os.urandom(2 * MiB) for i in range(2)}
    for name, v in {**hot, **cold}.items():
        run.put(name, v, codec="bytes", adhoc=True)
    assert d.wait_uploads(60)
    first = {name: _functions(run, name) for name in hot}
    homes: dict[str, set[frozenset[str]]] = {name: {fns} for name, fns in first.items()}
    fallbacks = d.counters["cos_fallbacks"]
    def read_hot() -> None:
        for name, v in hot.items():
            assert run.get(name) == v
            homes[name].add(_functions(run, name))
        assert d.counters["cos_fallbacks"] == fallbacks, "an object read within H was read from COS"

    def carried_out() -> bool:                            # the daemon did what the reads asked
        return int(driver.metadata.stats()["pending_instructions"]) == 0

    for _ in range(ROUNDS):                               # reads in every round: H is 3 rounds
        seen = rounds()
        wait_for(lambda seen=seen: rounds() > seen, 20, "the next GC round")   # type: ignore[misc]
        wait_for(lambda: driver.metadata.stats()["buckets"] == d.function_buckets(), 20,
                 "the metadata server to hear of the round")
        read_hot()                                        # moves, or scale-outs to move into
        wait_for(carried_out, 20, "the daemon to carry out the moves and scale-outs")
        read_hot()
    moved = driver.metadata.stats()["counters"].get("objects_moved", 0)
    assert moved >= len(hot), moved
    for name in hot:                                      # each moved at least once, to other functions
        assert len(homes[name]) >= 2 and _functions(run, name) != first[name], (name, homes[name])
    # the functions the hot objects started on were emptied (moved away, or released with the cold
    # data after H) and released, while the hot objects stay in memory
    left = frozenset().union(*first.values()) - frozenset().union(*(_functions(run, n) for n in hot))

    def emptied() -> bool:
        fs: list[dict[str, Any]] = d.stats()["functions"]
        return all(f["chunks"] == 0 for f in fs if f["name"] in left)

    wait_for(emptied, 30, "the functions the hot objects left to be emptied")
    assert d.counters.get("gc_released_functions", 0) >= 1
    assert d.counters["cos_fallbacks"] == fallbacks
    # once every move landed, the allocator's extents are where the daemon holds the bytes
    wait_for(lambda: d.state.gc is not None and not d.state.gc.migrating, 20, "the moves in flight to land")
    with d._state_lock:                                   # no move starts while the extents are compared
        for name in hot:
            _extents_match_the_daemon(stack, run, name)
    assert d.state.gc is not None and d.state.gc.moved >= len(hot)
    for name, v in {**hot, **cold}.items():               # nothing lost (the cold ones from COS)
        assert run.get(name) == v
    d.validate_state()
    with stack.handler.lock:
        stack.handler.state.validate_state()
    run.end_run("succeeded")
    run.close()
    driver.close()
