"""SION's GC buckets govern the metadata server's placement (Sec. 5.3.1): the daemon's window
is reported with the control plane's fetches, at each GC round the functions that hold data
are sealed into their bucket (not carried over), new objects go to the newest bucket's
functions and never to a degraded bucket's, and so the buckets age: after H the functions
of old buckets are emptied and released, while an object read within H is never read from
COS and no object is lost."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._config import Config
from sdk.local._stack import Stack
from tests._waiting import wait_for

MiB = 1 << 20
# rounds every second; a bucket stays active 2 rounds, then degraded 2 (H = 4 s): the hot object,
# read several times a round, is read while its functions are degraded (SION's marks) even when
# the machine is slow
# six groups of 4+2 functions: a fresh group for each round's objects (released groups keep
# blocks of objects nobody freed, so none comes back within the test)
GC = {"gc_interval_s": 1.0, "gc_active": 2, "gc_degraded": 2, "parity_upload_delay_s": 0.0, "group_size": 6,
      "max_functions": 36}
ROUNDS = 4
WDS = {"app": "buckets", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={}, ec_data=4, ec_parity=2,
                      function_memory_mb=256)
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=GC) as st:
        yield st


def test_new_data_goes_to_the_newest_bucket_and_old_buckets_are_released(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=36)   # six groups
    wait_for(lambda: len(driver.metadata.stats()["functions"]) >= 36, 30, "every function group registered")

    def rounds() -> int:
        return int((d.stats()["gc"] or {}).get("rounds", 0))

    def view() -> dict[str, str]:
        buckets: dict[str, str] = driver.metadata.stats()["buckets"]
        return buckets

    def read_hot() -> None:                               # read several times a round, well within H
        fallbacks = d.counters["cos_fallbacks"]
        assert run.get("hot") == hot
        assert d.counters["cos_fallbacks"] == fallbacks, "an object read within H was read from COS"

    hot = os.urandom(2 * MiB)
    run.put("hot", hot, codec="bytes", adhoc=True)
    values: dict[str, bytes] = {}
    placed: dict[str, set[str]] = {}
    for k in range(ROUNDS):
        seen = rounds()
        wait_for(lambda seen=seen: rounds() > seen, 20, "the next GC round")   # type: ignore[misc]
        wait_for(lambda: view() == d.function_buckets(), 20, "the metadata server to hear of the round")
        for j in range(2):
            read_hot()
            name = f"r{k}-{j}"
            values[name] = os.urandom(2 * MiB)
            before = view()
            run.put(name, values[name], codec="bytes", adhoc=True)
            after = view()
            fns = {e.function_name for e in run.lookup(name).placement.extents}
            placed[name] = fns
            sealed = {fn for fn, s in before.items() if s == "degraded" and after.get(fn) == "degraded"}
            older = {fn for fn, s in before.items() if s == "active" and after.get(fn) == "active"}
            assert not fns & sealed, (name, fns & sealed)    # degraded buckets take no new data
            assert not fns & older, (name, fns & older)      # new data: the newest bucket's functions
    early = placed["r0-0"] | placed["r0-1"]
    assert not early & (placed[f"r{ROUNDS - 1}-0"] | placed[f"r{ROUNDS - 1}-1"])  # different buckets
    # the round-0 objects are cold: their functions age through the window and are released
    # (unless the hot object shares one: its reads keep that function in the newest bucket)
    hot_fns = {e.function_name for e in run.lookup("hot").placement.extents}
    cold = early - hot_fns
    assert cold

    def released() -> bool:
        fs: list[dict[str, Any]] = d.stats()["functions"]
        return all(f["chunks"] == 0 for f in fs if f["name"] in cold)

    wait_for(lambda: (read_hot(), released())[1], 30, "the cold functions' bucket to be released after H")
    assert d.counters.get("gc_released_functions", 0) >= len(cold)
    fallbacks = d.counters["cos_fallbacks"]
    for name, v in values.items():                       # nothing lost: cold objects from COS
        assert run.get(name) == v
    assert d.counters["cos_fallbacks"] > fallbacks
    run.end_run("succeeded")
    run.close()
    driver.close()
