"""PING revalidation on the real path (INFINICACHE Sec. 3-4): a storage function's instance
frozen (its process SIGSTOPped, its connections open) while the daemon thinks it active
is found out by the PING the daemon sends before using a connection silent for
``ping_idle_s``: a GET is served first-d by the other functions and a PUT stores its
chunks without waiting for ``put_timeout_s`` (nor, for the GET, ``get_straggler_s``);
the PINGs are in the daemon's counters and in the run's cost account. A local stack
with the metadata server's placement, one process per storage function instance."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from sdk._config import Config
from sdk.local._cost import StoreSnapshot, run_cost
from sdk.local._stack import Stack
from storage_functions.cost import format_cost
from storage_functions.daemon._functions import FunctionHandle
from tests._waiting import wait_for

MiB = 1 << 20
PING_IDLE_S = 0.3
PING_TIMEOUT_S = 0.3
# long enough that only a PING can explain a fast request: without one a GET waits for its
# straggler wait before asking other chunks, a PUT for its timeout
STRAGGLER_S = 8.0
PUT_TIMEOUT_S = 30.0
BOUND_S = 3.0  # the PING's wait and a retry, with room for a loaded machine; far below both
STACK = {"put_timeout_s": PUT_TIMEOUT_S, "get_straggler_s": STRAGGLER_S, "ping_idle_s": PING_IDLE_S,
         "ping_timeout_s": PING_TIMEOUT_S, "parity_upload_delay_s": 0.0,
         "idle_s": 20.0}  # instances stay invoked through the test: a BYE cannot race the freeze
WDS = {"app": "ping", "workflow_id": 1, "category": "test",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=STACK) as st:
        yield st


def _freeze(stack: Stack, h: FunctionHandle) -> list[int]:
    """SIGSTOP every instance of ``h``'s function, once the daemon has it active, and wait
    until its connections have been silent for longer than ``ping_idle_s``."""
    wait_for(lambda: h.state == "active", what=f"{h.name} active")
    pids = [i.pid for i in stack.platform.instances(h.name)]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: time.monotonic() - h.last_heard > PING_IDLE_S * 1.5, what=f"{h.name} silent")
    assert h.state == "active" and not h.silent  # the daemon has not noticed: only a PING can tell
    return pids


def _thaw(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def test_a_frozen_instance_costs_one_ping_and_the_others_serve_the_get(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
    t0 = time.time()
    before = StoreSnapshot(stack, d.stats())
    data = os.urandom(3 * MiB)
    run.put("obj", data, codec="bytes", adhoc=True)        # 10 + 2 chunks, one per function
    assert d.wait_uploads(30)                             # out of the buffer: the GET reads the functions
    obj = d.table.latest(f"{run.run_id}/obj")
    assert obj is not None and all(pl is not None for st in obj.stripes for pl in st.places)
    h = d.handles[obj.stripes[0].places[0][0]]            # holds a data chunk: first-d asks it
    invocations = h.invocations
    pings, failed = d.counters["pings"], d.counters["pings_failed"]
    pids = _freeze(stack, h)
    try:
        t = time.monotonic()
        assert run.get("obj") == data
        took = time.monotonic() - t
        print(f"GET of 3 MiB with a frozen holder of a data chunk: {took * 1000:.0f} ms "
              f"(ping_timeout_s {PING_TIMEOUT_S}, get_straggler_s {STRAGGLER_S})")
        assert took < BOUND_S, f"the GET took {took:.2f} s: it waited for the frozen instance"
        assert h.pings_failed == 1
        assert d.counters["pings_failed"] - failed == 1
        assert d.counters["pings"] - pings >= 1           # the other functions were silent as long: pinged too
        assert d.counters.get("cos_fallbacks", 0) == 0     # first-d from the functions, not COS
        # the instance is taken as gone and the function invoked again (the local platform, like
        # Lambda under a reserved concurrency of 1, starts it once the frozen invocation ends)
        assert h.invocations == invocations + 1 and h.state == "invoking"
    finally:
        _thaw(pids)
    wait_for(lambda: h.state == "active", what=f"{h.name} invoked again")
    assert run.get("obj") == data
    t1 = time.time()
    acct = run_cost(t0=t0, t1=t1, billing={}, before=before, after=StoreSnapshot(stack, d.stats()),
                    platform=stack.platform, objects={}, peak_live_bytes=len(data),
                    function_memory_mb=d.config.function_memory_mb)
    io = acct["lines"]["storage_io"]
    assert io["pings_failed"] == 1 and io["pings"] >= 1
    assert any("found the instance gone" in line for line in format_cost(acct))
    run.end_run("aborted")
    run.close()
    driver.close()


def test_a_put_placed_on_a_frozen_instance_does_not_wait_for_its_timeout(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
    run.put("warm", os.urandom(3 * MiB), codec="bytes", adhoc=True)  # every function of the group invoked
    obj = d.table.latest(f"{run.run_id}/warm")
    assert obj is not None
    h = d.handles[obj.stripes[0].places[1][0]]
    failed, timeouts = h.pings_failed, d.counters.get("silent_functions", 0)
    pids = _freeze(stack, h)
    try:
        data = os.urandom(3 * MiB)
        t = time.monotonic()
        run.put("y", data, codec="bytes", adhoc=True)     # a chunk placed there: one PING, not a timeout
        took = time.monotonic() - t
        print(f"PUT of 3 MiB with a frozen function in its placement: {took * 1000:.0f} ms "
              f"(ping_timeout_s {PING_TIMEOUT_S}, put_timeout_s {PUT_TIMEOUT_S})")
        assert took < BOUND_S, f"the PUT took {took:.2f} s: it waited for the frozen instance"
        assert h.pings_failed == failed + 1
        assert d.counters.get("silent_functions", 0) == timeouts  # found out by its PING, not a timeout
        assert h.silent                                   # PUTs go elsewhere until its next instance
    finally:
        _thaw(pids)
    wait_for(lambda: h.state == "active" and not h.silent, what=f"{h.name}'s next instance")
    assert run.get("y") == data
    run.end_run("aborted")
    run.close()
    driver.close()
