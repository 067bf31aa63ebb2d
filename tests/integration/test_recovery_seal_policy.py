"""The insertion log's seal policy (``storage_functions.runtime._log``: a node only when a chunk
stored since the last one is still in memory, chunks stored and freed within one node left out,
deletes alone carried into the next node, a snapshot at an instance's first seal and every
``snapshot_every`` terms) keeps SION's recovery guarantee, over real processes: the log read back
from COS lists every chunk the function holds, and after a kill every acknowledged object that is
still live comes back into the killed function's memory and reads from there; nothing freed is
restored."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from sdk._config import Config
from sdk.local._stack import Stack
from storage_functions.daemon._manifest import parse_chunk_key, read_manifest
from storage_functions.runtime._log import snapshot_key
from tests._waiting import wait_for

MiB = 1 << 20
WDS = {"app": "seal-policy", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon={"idle_s": 0.3}) as st:
        yield st


def settle(st: Stack) -> None:
    """Every storage-function invocation returned (and sealed its log before it did)."""
    wait_for(lambda: not any(i.state == "busy" for i in st.platform.instances()))


def held(st: Stack, name: str, prefix: str) -> set[str]:
    return set(st.store.daemon.function_memory(name, prefix)["entries"])


def names(keys: set[str]) -> set[str]:
    return {p[0].rsplit("/", 1)[-1] for p in map(parse_chunk_key, keys) if p is not None}


def test_a_lazier_log_still_lists_every_held_chunk_and_a_kill_recovers_every_live_object(
        stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
    rid = run.run_id
    t0 = time.time()
    data = {k: os.urandom(12 * MiB) for k in "abcde"}  # several stripes: chunks of each on every function

    def put(k: str) -> None:
        run.put(k, data[k], codec="bytes", adhoc=True)

    put("a")                  # term 1 on every function of the group (a new chain: no snapshot)
    settle(stack)
    put("b")                  # term 2: b's chunks and a's deletes
    run.delete("a")
    settle(stack)
    put("c")                  # term 3: d's chunks and c's deletes (c's puts coalesced away)
    put("d")
    run.delete("c")
    settle(stack)
    run.delete("d")           # deletes alone: no node
    wait_for(lambda: not any("d" in names(held(stack, h.name, rid)) for h in list(d.handles)))
    settle(stack)
    put("e")                  # term 4: e's chunks and d's deferred deletes
    settle(stack)
    recs = [r for r in stack.platform.records() if r.started_at >= t0 - 1]
    seals = sum(int(r.metrics.get("seals", 0)) for r in recs)
    snapshots = sum(int(r.metrics.get("snapshots", 0)) for r in recs)
    fns = {r.function_name for r in recs if r.metrics.get("seals")}
    assert len(fns) >= 6 and seals == 4 * len(fns) and snapshots == 0   # 4 terms: below snapshot_every
    assert sum(int(r.metrics.get("seals_deferred", 0)) for r in recs) >= len(fns)
    assert sum(int(r.metrics.get("cos_puts", 0)) for r in recs) == seals + snapshots

    victim = sorted(fns)[0]
    h = d._by_name[victim]
    before = held(stack, victim, rid)
    assert names(before) == {"b", "e"} and len(before) >= 4
    m = read_manifest(d.cos, d.config.cos_prefix, victim, h.term, h.hash)
    assert m.term == h.term and before <= set(m.chunks)   # the log lists every chunk the function holds
    assert names(set(m.chunks) - before) <= {"a", "d"}     # and freed ones whose deletes were pending, never c

    recovered, lost = d.counters.get("chunks_recovered", 0), d.counters["lost_functions"]
    reads = d.counters.get("manifest_reads", 0)
    stack.platform.kill(victim)
    wait_for(lambda: _reattached(stack, victim, lost))
    assert d.recovery.wait_idle(30)
    assert d.counters.get("chunks_recovered", 0) - recovered == len(before)
    assert held(stack, victim, rid) == before              # every live chunk is back where it was
    assert d.counters.get("manifest_reads", 0) > reads and d.counters.get("manifest_errors", 0) == 0
    fallbacks = d.counters["cos_fallbacks"]
    assert bytes(run.get("b")) == data["b"] and bytes(run.get("e")) == data["e"]
    assert d.counters["cos_fallbacks"] == fallbacks        # from memory, not COS
    settle(stack)  # the new instance continued the chain with the recovered chunks: its first seal wrote a snapshot
    snap = json.loads(d.cos.get(snapshot_key(d.config.cos_prefix, victim)))
    assert snap["term"] == d._by_name[victim].term == 5 and {c[0] for c in snap["chunks"]} == before
    run.end_run("aborted")
    run.close()
    driver.close()


def _reattached(st: Stack, name: str, lost: int) -> bool:
    """Ask ``name`` (invoking a new instance once the killed one is gone) until it reported its loss."""
    try:
        st.store.daemon.function_memory(name, timeout_s=2)
    except Exception:  # noqa: BLE001 - the killed instance's connection is going away; ask the next one
        pass
    return bool(st.store.daemon.counters["lost_functions"] > lost)
