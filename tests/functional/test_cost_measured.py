"""The cost account's inputs are measured: a real daemon with storage functions on the local
platform, whose invocation records say which were warm-ups, how long each was billed and
which COS requests the functions made themselves (their insertion logs)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from sdk._store_client import StoreClient
from sdk.local._cost import StoreSnapshot, platform_invocations, run_cost
from storage_functions.cost import window_usage
from storage_functions.daemon import LocalStore
from storage_functions.protocol import Op
from tests._waiting import wait_for


@pytest.fixture
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=512, idle_s=0.3) as st:
        yield st


def test_warmups_io_and_the_functions_own_cos_puts_are_counted(store: LocalStore) -> None:
    t0 = time.time()
    before = StoreSnapshot(store, store.daemon.stats())
    store.daemon.prewarm(2)
    wait_for(lambda: sum(1 for r in store.platform.records() if r.metrics.get("warmup")) >= 2)
    with StoreClient(store.address, store.token) as c:
        c.put("r-1/x", os.urandom(100_000))
        assert len(c.get("r-1/x")) == 100_000
    # the storage function returns once idle, after sealing its insertion log in COS
    wait_for(lambda: any(r.metrics.get("cos_puts") for r in store.platform.records()))
    t1 = time.time()
    u = window_usage(platform_invocations(store.platform, t1), t0, t1)
    assert u.warmups >= 2 and u.warmup_billed_ms > 0
    assert u.io_invocations >= 1 and u.io_gb_s > 0
    assert u.cos_puts >= 1  # the insertion-log node (a new chain: no snapshot yet)
    acct = run_cost(t0=t0, t1=t1, billing={}, before=before, after=StoreSnapshot(store, store.daemon.stats()),
                    platform=store.platform, objects={}, peak_live_bytes=100_000, function_memory_mb=512)
    ln = acct["lines"]
    assert ln["warmups"]["invocations"] == u.warmups and ln["storage_io"]["gb_s"] == pytest.approx(u.io_gb_s, 1e-3)
    # the daemon's adapter uploaded the object (one PUT at least); the functions' own PUTs add up
    wait_for(lambda: store.cos.stats.puts >= 1)
    assert ln["cos_requests"]["puts"] >= u.cos_puts
    assert "COS adapter" in acct["sources"]["cos"] and "platform" in acct["sources"]["storage_functions"]


def test_an_invocation_still_running_counts_up_to_now(store: LocalStore) -> None:
    with StoreClient(store.address, store.token) as c:
        c.put("r-2/y", b"y" * 1000)
        now = time.time()
        busy = [i for i in store.platform.instances() if i.state == "busy"]
        assert busy, "the function serving the put is still invoked (idle_s not yet over)"
        running = [inv for inv in platform_invocations(store.platform, now) if inv.in_flight]
        assert {inv.function for inv in running} == {i.function_name for i in busy}
        assert all(inv.billed_ms >= 1 and inv.memory_mb == 512 for inv in running)


def test_a_warm_up_that_served_requests_is_billed_as_io(store: LocalStore) -> None:
    """The function keeps serving in the invocation a warm-up started: its billed time was
    the serving, not the warm-up (the static pool's baseline replaces only warm-ups)."""
    t0 = time.time()
    h = store.daemon._handle(5)
    h.warm()
    with h.cond:
        assert h.cond.wait_for(lambda: h.state == "active", 20)
    done = threading.Event()
    h.request(Op.PING, "", lambda f, s: done.set())  # served inside the warm-up's invocation
    assert done.wait(10)
    wait_for(lambda: any(r.function_name == h.name and r.metrics.get("warmup") and r.metrics.get("served")
                         for r in store.platform.records()))
    invs = [i for i in platform_invocations(store.platform, time.time()) if i.function == h.name and
            i.started_at >= t0 - 1]
    assert invs and not any(i.warmup for i in invs if not i.in_flight)


def test_each_invocation_reports_its_own_log_puts_and_they_are_the_puts_in_cos(store: LocalStore) -> None:
    """A warm instance keeps its COS adapter between invocations: each invocation's record counts
    the PUTs it made, not the adapter's running total, so that over two invocations of every
    function the records add up to the log objects the functions wrote to COS."""
    t0 = time.time()
    with StoreClient(store.address, store.token) as c:
        for r in range(2):  # a coded object: a chunk on every function of the group; its invocation ends
            c.put(f"r-3/obj{r}", os.urandom(3 << 20))
            wait_for(lambda: not any(i.state == "busy" for i in store.platform.instances()))
    fns = {n for n in (r.function_name for r in store.platform.records() if r.started_at >= t0)}
    assert len(fns) >= 6
    recs = [r for r in store.platform.records() if r.started_at >= t0 - 1 and r.metrics.get("cos_puts")]
    by_fn: dict[str, int] = {}
    for r in recs:
        by_fn[r.function_name] = by_fn.get(r.function_name, 0) + 1
    assert max(by_fn.values()) >= 2  # some function sealed in both invocations
    nodes = [k for k in store.cos.list(f"{store.config.cos_prefix}/functions/") if "/log/" in k]
    # each seal wrote its node (two new chains of two nodes: no snapshot yet, runtime._log)
    seals = sum(int(r.metrics.get("seals", 0)) for r in store.platform.records())
    snapshots = sum(int(r.metrics.get("snapshots", 0)) for r in store.platform.records())
    assert seals == len(nodes) and snapshots == 0
    assert sum(int(r.metrics["cos_puts"]) for r in store.platform.records()) == len(nodes) + snapshots
