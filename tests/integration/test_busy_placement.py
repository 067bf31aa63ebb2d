"""Busy-aware placement on the PUT path under the metadata server's placement (SION Fig. 5,
``TestAndPlace``'s queue test): one storage function is slow (its modelled inbound
bandwidth alone is throttled, ``recv_mbps_overrides``), concurrent PUTs queue on it, the
daemon's control loop reports its queue with the fetch of instructions, and the allocator
places chunk 0 of later objects on the next function of its stride instead. The extents
the allocator handed out still say where every byte is: each chunk is in the memory of the
function its extent names, and every object reads back."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator

import pytest

from sdk._client import Client
from sdk._config import Config
from sdk.local._stack import Stack
from tests._waiting import wait_for

MiB = 1 << 20
SLOW = "sion-0"            # chunk 0's stride: sion-0, sion-12, ...
NEXT = "sion-12"
WRITERS, EACH = 6, 8
WDS = {"app": "busy", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon={"recv_mbps_overrides": {SLOW: 2.0}}) as st:
        yield st


def test_puts_go_around_a_slow_function_and_the_extents_say_where_every_byte_is(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=24)  # two groups
    wait_for(lambda: len(driver.metadata.stats()["functions"]) >= 24, 30, "the second function group registered")
    d.prewarm(24)
    assert d.wait_warm(24, 60)
    data = {f"o{t}-{k}": os.urandom(2 * MiB) for t in range(WRITERS) for k in range(EACH)}
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            with Client(stack.endpoints, run_id=run.run_id, token=run.token) as c:
                for k in range(EACH):
                    c.put(f"o{t}-{k}", data[f"o{t}-{k}"], codec="bytes", adhoc=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    stats = driver.metadata.stats()
    assert stats["counters"].get("busy_marks", 0) >= 1      # the daemon's reports made the slow one busy
    placed = {n: run.lookup(n).placement for n in data}
    chunk0 = {n: next(e.function_name for e in p.extents if e.chunk == 0) for n, p in placed.items()}
    assert set(chunk0.values()) <= {SLOW, NEXT}             # chunk 0 stays on its stride
    # without the reports every chunk 0 goes to SLOW (the allocator probes in registration order);
    # with them, on a 2-core machine at load 30, at most 24 of 48 stayed there; at load 50 up to
    # 41 (every function queues then, and a stride all busy falls back to its first function)
    around = sum(fn == NEXT for fn in chunk0.values())
    assert around >= len(data) // 8, chunk0
    for n, p in placed.items():              # the bytes are where the extents say (a chunk over
        chunks: dict[tuple[str, int], list[tuple[int, int, int]]] = {}      # two blocks: two extents)
        for e in p.extents:
            chunks.setdefault((e.function_name, e.chunk), []).append((e.block, e.offset, e.length))
        for (fn, _), exts in chunks.items():
            start = min(exts)
            held = list(d.function_memory(fn, f"{run.run_id}/{n}")["entries"].values())
            assert held == [[start[0], start[1], sum(x[2] for x in exts)]], (n, fn, exts, held)
    for n, v in data.items():
        assert run.get(n) == v
    run.end_run("succeeded")
    run.close()
    driver.close()
