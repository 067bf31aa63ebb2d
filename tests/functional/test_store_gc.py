"""SION's sliding-window GC on real storage functions (local platform, COS in a
local directory): a sealed bucket degrades, the chunks GETs read there move to the
newest bucket in compaction rounds, the bucket is released after H and its unread
data is read from COS; a function whose chunks were all freed leaves at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore
from tests._waiting import wait_for

MiB = 1 << 20


@pytest.fixture
def store() -> Iterator[LocalStore]:
    # 64 MiB functions with a 3 MiB HARDCAP: one 7 MiB object (7 stripes of 4+2 chunks of
    # 256 KiB + a header, three to a block) fills a group of 6 to the HARDCAP and seals it; GC rounds every 2 s,
    # a bucket active for 1 round and degraded for 3 (H = 8 s: compaction has time on a loaded machine)
    with LocalStore(function_memory_mb=128, hardcap_fraction=0.046875, group_size=6, max_functions=24, idle_s=1.0,
                    gc_interval_s=2.0, gc_active=1, gc_degraded=3, compact_fraction=0.5, compact_max=64,
                    check_state=True) as st:
        yield st


def fn_stats(store: LocalStore) -> list[dict[str, Any]]:
    return list(store.daemon.stats()["functions"])


def test_degrade_compact_release(store: LocalStore) -> None:
    d = store.daemon
    hot, cold = os.urandom(7 * MiB), os.urandom(7 * MiB)
    with StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=MiB)) as c:
        c.put("hot", hot)
        c.put("cold", cold)
        assert d.wait_uploads(30)
        first = {f["name"] for f in fn_stats(store) if f["chunks"]}
        cold_obj = d.table.latest("cold")
        assert cold_obj is not None
        cold_fns = sorted({d.handles[pl[0]].name for st in cold_obj.stripes for pl in st.places if pl})
        assert len(first) == 12 and all(f["sealed"] for f in fn_stats(store) if f["chunks"])
        wait_for(lambda: all(f["bucket"] == "degraded" for f in fn_stats(store) if f["name"] in first),
                 what="the sealed bucket to degrade")
        assert c.get("hot") == hot  # read on degraded functions: its chunks are marked
        wait_for(lambda: d.counters.get("compacted_chunks", 0) >= 28, what="compaction of the 28 chunks read")
        moved = {f["name"] for f in fn_stats(store) if f["chunks"] and f["bucket"] == "active"}
        assert moved and not moved & first  # into the newest bucket's new functions


        def released_reading_hot() -> bool:  # hot data is read on: it follows the newest bucket
            assert c.get("hot") == hot
            obj = d.table.latest("cold")
            assert obj is not None
            return all(pl is None for st in obj.stripes for pl in st.places)

        wait_for(released_reading_hot, what="the old bucket's release after H")  # (functions are reused)
        assert d.counters.get("gc_released_functions", 0) >= 6
        # physically: a released function's instance deleted the cold chunks (on its next
        # invocation, here the STAT's: a released function is not invoked for them)
        for name in cold_fns:
            assert not any(k.endswith("/cold") for k in d.function_memory(name)["entries"]), name
        before = dict(d.counters)
        assert c.get("hot") == hot  # from the newest bucket's memory
        assert d.counters["cos_fallbacks"] == before["cos_fallbacks"]
        assert c.get("cold") == cold  # released: from COS
        assert d.counters["cos_fallbacks"] > before["cos_fallbacks"]
        cold_obj = d.table.latest("cold")
        assert cold_obj is not None
        # read again: loaded into the newest bucket on demand (d chunks a stripe), then from memory

        def restored() -> bool:
            assert c.get("cold") == cold
            return all(sum(1 for pl in st.places if pl is not None) >= st.d for st in cold_obj.stripes)

        wait_for(restored, what="the on-demand migration of the cold object")
        fallbacks = d.counters["cos_fallbacks"]
        assert c.get("cold") == cold and d.counters["cos_fallbacks"] == fallbacks
        c.delete("hot")
        c.delete("cold")
        wait_for(lambda: not any(f["chunks"] for f in fn_stats(store)), what="the frees")
    d.validate_state()


def test_a_function_emptied_by_frees_leaves_without_waiting_for_h(store: LocalStore) -> None:
    d = store.daemon
    with StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=MiB)) as c:
        c.put("a", os.urandom(7 * MiB))  # seals its group: it stays in the first bucket
        held = {f["name"] for f in fn_stats(store) if f["chunks"]}
        wait_for(lambda: (d.stats()["gc"] or {}).get("rounds", 0) >= 1, what="a GC round")
        c.delete("a")
        wait_for(lambda: all(f["bucket"] == "released" for f in fn_stats(store) if f["name"] in held),
                 timeout_s=4.0, what="release at the free")  # before H (8 s), and counted as emptied:
        assert d.counters.get("gc_emptied_functions", 0) == len(held)
    d.validate_state()


WDS = {"app": "gc-stack", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "f", "input": ["x"], "output": [], "next": []}]}}}
# H = 1 s: rounds every 0.5 s, one active, one degraded; a 6 MiB HARDCAP the puts fill; coded
# versions go to COS at once (a parity delay of 2 s, longer than H, would pass with nothing read
# and their functions would leave before the test's reads begin)
STACK_GC = {"function_memory_mb": 128, "hardcap_fraction": 0.05, "gc_interval_s": 0.5, "gc_active": 1,
            "gc_degraded": 1, "parity_upload_delay_s": 0.0}


def test_the_embedded_stack_releases_cold_data_after_h_and_reads_it_from_cos(tmp_path: Any) -> None:
    """Under the metadata server's placement (the embedded stack): functions filled to the
    HARDCAP age through the window and are released after H; the run's objects stay
    readable (from COS), new puts land again, and the run ends leaving nothing."""
    import json

    from sdk._config import Config
    from sdk.local._stack import Stack

    cfg = Config.load(state_dir=str(tmp_path / "state"), env={}, function_memory_mb=128)
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=STACK_GC) as stack, stack.client() as driver:
        d = stack.store.daemon
        run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
        values = {f"o{i}": os.urandom(4 * MiB) for i in range(12)}
        for name, v in values.items():
            run.put(name, v, codec="bytes", adhoc=True)
        assert d.wait_uploads(60)
        wait_for(lambda: d.counters.get("gc_released_functions", 0) >= 1
                 and not any(f["chunks"] for f in fn_stats(stack.store)), what="the release after H")
        fallbacks = d.counters["cos_fallbacks"]
        for name, v in values.items():
            assert run.get(name) == v
        assert d.counters["cos_fallbacks"] > fallbacks  # released: read from COS
        run.put("late", b"x" * MiB, codec="bytes", adhoc=True)
        assert run.get("late") == b"x" * MiB
        run_id = run.run_id
        run.end_run("succeeded")
        run.close()
        wait_for(lambda: not [k for k in d.table.keys() if k.startswith(run_id + "/")], what="the run's end")
        d.validate_state()


def test_in_the_embedded_stack_data_read_within_h_stays_in_memory(tmp_path: Any) -> None:
    """The metadata server's chunks move when read on a degraded function (its ``move``
    instruction: a new home in the newest bucket, loaded from COS), so an object read more
    often than H never leaves memory."""
    import json

    from sdk._config import Config
    from sdk.local._stack import Stack

    cfg = Config.load(state_dir=str(tmp_path / "state"), env={}, function_memory_mb=128)
    # six degraded rounds (H = 3.5 s): a read that comes a round late, or a move whose COS load
    # lands rounds later (the machine busy with the rest of the suite: three rounds were not
    # enough in a full run), still finds its function degraded, not released
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon={**STACK_GC, "gc_degraded": 6}) as stack, \
            stack.client() as driver:
        d = stack.store.daemon
        run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
        values = {f"o{i}": os.urandom(4 * MiB) for i in range(12)}  # fills the functions to the HARDCAP
        for name, v in values.items():
            run.put(name, v, codec="bytes", adhoc=True)
        assert d.wait_uploads(60)
        fallbacks = d.counters["cos_fallbacks"]
        def rounds() -> int:
            return int((d.stats()["gc"] or {}).get("rounds", 0))

        for _ in range(8):  # a read in each of eight GC rounds: twice H
            seen = rounds()
            wait_for(lambda seen=seen: rounds() > seen, what="the next GC round")
            assert run.get("o0") == values["o0"]
        assert d.counters["cos_fallbacks"] == fallbacks
        assert d.state.gc is not None and d.state.gc.moved > 0 and (d.stats()["gc"] or {}).get("rounds", 0) >= 6
        hot = d.table.latest(f"{run.run_id}/o0")
        assert hot is not None and all(pl is not None for st in hot.stripes for pl in st.places[:st.d])
        # (functions holding only what nobody read, o0's parity among it, may have left meanwhile)
        run.end_run("succeeded")
        run.close()
