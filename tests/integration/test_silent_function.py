"""A storage function that stops answering (its process stopped, its connections open)
under the metadata server's placement: the PUT whose chunk it holds waits ``put_timeout_s``
once, gives up exactly that chunk's place and goes on degraded (parity covers it); the
function is silent from then on, so later PUTs do not wait for it and GETs do not ask it
first; once it answers again it is used again."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from sdk._config import Config
from sdk.local._stack import Stack

MiB = 1 << 20
TIMEOUT_S = 1.0
WDS = {"app": "silent", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon={"put_timeout_s": TIMEOUT_S, "parity_upload_delay_s": 0.0}) as st:
        yield st


def test_a_stopped_function_costs_one_timeout_then_puts_go_on_degraded_at_once(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
    first = os.urandom(3 * MiB)
    run.put("first", first, codec="bytes", adhoc=True)      # 10 + 2 chunks, one per function
    obj = d.table.latest(f"{run.run_id}/first")
    assert obj is not None and all(pl is not None for st in obj.stripes for pl in st.places)
    victim = obj.stripes[0].places[0][0]                     # holds a data chunk
    h = d.handles[victim]
    pids = [i.pid for i in stack.platform.instances(h.name)]
    assert pids
    degraded = d.counters.get("degraded_puts", 0)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        data = {k: os.urandom(3 * MiB) for k in ("second", "third", "fourth")}
        t = time.monotonic()
        run.put("second", data["second"], codec="bytes", adhoc=True)  # its chunk there: one timeout
        assert TIMEOUT_S * 0.9 <= time.monotonic() - t
        assert h.silent and d.counters["silent_functions"] == 1
        second = d.table.latest(f"{run.run_id}/second")
        assert second is not None
        assert all(pl is None or pl[0] != victim for st in second.stripes for pl in st.places)
        assert sum(pl is None for st in second.stripes for pl in st.places) == 1  # exactly that chunk
        for k in ("third", "fourth"):                        # placed there too: not waited for
            t = time.monotonic()
            run.put(k, data[k], codec="bytes", adhoc=True)
            assert time.monotonic() - t < TIMEOUT_S / 2
        assert d.counters["degraded_puts"] - degraded == 3
        assert d.counters.get("chunks_not_sent_to_silent", 0) >= 2
        assert d.wait_uploads(30)                            # out of the buffer: GETs read the functions
        hits = d.counters.get("buffer_hits", 0)
        for k in data:                                       # first-d: parity instead of the silent one
            t = time.monotonic()
            assert run.get(k) == data[k]
            assert time.monotonic() - t < d.config.get_straggler_s
        t = time.monotonic()                                 # its data chunk 0 is on the silent one
        assert run.get("first") == first
        assert time.monotonic() - t < d.config.get_straggler_s
        assert d.counters.get("buffer_hits", 0) == hits
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    d.function_memory(h.name, timeout_s=10)                  # answered after its late replies
    assert not h.silent
    run.put("after", b"a" * 1000, codec="bytes", adhoc=True)
    assert run.get("after") == b"a" * 1000
    run.end_run("aborted")
    run.close()
    driver.close()
