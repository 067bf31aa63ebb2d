"""The cost account's arithmetic (``storage_functions.cost``): each line priced from the one
table, invocations shared between runs by time, SION's overhead ratio, the static-pool and
always-on baselines, and the collector's parts that need no stack (``sdk.local._cost``)."""

from __future__ import annotations

import pytest

from sdk.local._cost import StoreSnapshot, cos_byte_seconds, run_cost
from storage_functions import pricing
from storage_functions.cost import (
    DEFAULT_WARMUP_MS,
    CostInputs,
    Invocation,
    StorageUsage,
    cache_nodes,
    cost_account,
    format_cost,
    window_usage,
)
from storage_functions.local import _pricing

GiB = 1 << 30


def test_one_price_table_feeds_the_lambda_meter() -> None:
    assert _pricing.PRICE_PER_GB_SECOND_USD == pricing.LAMBDA_GB_SECOND_USD
    assert _pricing.PRICE_PER_REQUEST_USD == pricing.LAMBDA_REQUEST_USD
    assert pricing.PRICES_AS_OF in _pricing.PRICING_SOURCE
    table = pricing.price_table()
    assert table["as_of"] == pricing.PRICES_AS_OF and "cache.r6g.large" in table["elasticache_nodes"]


def test_window_counts_an_invocation_where_it_started_and_its_time_where_it_ran() -> None:
    invs = [
        Invocation("sion-0", 100.0, 4.0, 4000, 1024),               # 100..104: half inside [102, 110]
        Invocation("sion-1", 103.0, 2.0, 2000, 2048),               # wholly inside
        Invocation("sion-2", 105.0, 0.01, 10, 1024, warmup=True, cos_puts=2),
        Invocation("sion-3", 111.0, 1.0, 1000, 1024),               # after the window
    ]
    u = window_usage(invs, 102.0, 110.0)
    assert u.io_invocations == 1  # sion-0 started before the window: its request is the earlier run's
    assert u.io_billed_ms == pytest.approx(2000 + 2000)
    assert u.io_gb_s == pytest.approx(1.0 * 2.0 + 2.0 * 2.0)
    assert (u.warmups, u.warmup_billed_ms, u.cos_puts) == (1, pytest.approx(10), 2)
    assert u.functions == {"sion-0", "sion-1", "sion-2"}


def test_account_prices_each_line() -> None:
    usage = StorageUsage(io_invocations=10, io_billed_ms=20_000, io_gb_s=30.0, warmups=4, warmup_billed_ms=40,
                         warmup_gb_s=0.06, cos_puts=6, functions={"a", "b"})
    m = CostInputs(wall_s=60.0, task_invocations=8, task_gb_s=2.0, storage=usage, cos_puts=100, cos_gets=50,
                   cos_lists=1, cos_byte_s=GiB * 3600.0 * pricing.HOURS_PER_MONTH, recovery_cos_gets=10,
                   functions_lost=1, chunks_recovered=10, peak_live_bytes=100 << 20, functions=2,
                   function_memory_mb=1536)
    a = cost_account(m)
    ln = a["lines"]
    gbs, req = pricing.LAMBDA_GB_SECOND_USD, pricing.LAMBDA_REQUEST_USD
    assert ln["tasks"]["usd"] == pytest.approx(8 * req + 2.0 * gbs)
    assert ln["storage_io"]["usd"] == pytest.approx(10 * req + 30.0 * gbs)
    assert ln["warmups"]["usd"] == pytest.approx(4 * req + 0.06 * gbs)
    assert ln["recovery"]["usd"] == pytest.approx(10 * pricing.S3_GET_USD)
    # PUTs: the daemon's 100 + 1 LIST + the functions' own 6; GETs: 50 less the 10 recovery reads
    assert (ln["cos_requests"]["puts"], ln["cos_requests"]["gets"]) == (107, 40)
    assert ln["cos_requests"]["usd"] == pytest.approx(107 * pricing.S3_PUT_USD + 40 * pricing.S3_GET_USD)
    assert ln["cos_storage"]["gb_months"] == pytest.approx(1.0)
    assert ln["cos_storage"]["usd"] == pytest.approx(pricing.S3_GB_MONTH_USD)
    total = sum(v["usd"] for v in ln.values())
    assert a["total_usd"] == pytest.approx(total)
    assert a["storage_usd"] == pytest.approx(total - ln["tasks"]["usd"])
    assert a["per_hour"]["total_usd"] == pytest.approx(total * 60)  # a 60 s run, at its rate for an hour
    ppa = ln["storage_io"]["usd"] + ln["cos_requests"]["usd"] + ln["cos_storage"]["usd"]
    assert a["overhead"] == pytest.approx((ln["warmups"]["usd"] + ln["recovery"]["usd"]) / ppa)


def test_static_pool_keeps_the_runs_functions_warm_every_interval() -> None:
    usage = StorageUsage(io_invocations=3, io_billed_ms=3000, io_gb_s=4.5, warmups=2, warmup_billed_ms=8,
                         warmup_gb_s=0.012)
    m = CostInputs(wall_s=1800.0, storage=usage, functions=12, function_memory_mb=1536, warm_interval_s=60.0)
    a = cost_account(m)
    per_warmup = pricing.LAMBDA_REQUEST_USD + 1.5 * 0.004 * pricing.LAMBDA_GB_SECOND_USD  # 4 ms measured mean
    sp = a["static_pool"]
    assert sp["warmup_ms"] == pytest.approx(4.0)
    assert sp["usd"] == pytest.approx(a["storage_usd"] - a["lines"]["warmups"]["usd"] + 12 * 30 * per_warmup)
    assert sp["usd_per_hour"] == pytest.approx(sp["usd"] * 2)
    # no warm-up measured: the default warm-up length stands in
    b = cost_account(CostInputs(wall_s=10.0, functions=12, function_memory_mb=1024))
    assert b["static_pool"]["warmup_ms"] == DEFAULT_WARMUP_MS
    assert b["static_pool"]["usd_per_hour"] == pytest.approx(
        12 * 60 * (pricing.LAMBDA_REQUEST_USD + DEFAULT_WARMUP_MS / 1000 * pricing.LAMBDA_GB_SECOND_USD))


def test_always_on_takes_the_cheapest_nodes_that_hold_the_peak_less_reserved_memory() -> None:
    assert cache_nodes(0) == ("cache.t4g.micro", 1, 0.016)
    # 0.4 GiB does not fit a micro's 0.5 GiB less a quarter (0.375): the next type up
    assert cache_nodes(int(0.4 * GiB)) == ("cache.t4g.small", 1, 0.032)
    name, k, usd = cache_nodes(200 * GiB)  # past the largest node: several of it
    assert name == "cache.r6g.4xlarge" and k == 3 and usd == pytest.approx(3 * 1.642)
    a = cost_account(CostInputs(wall_s=900.0, peak_live_bytes=int(2 * GiB)))
    assert a["always_on"]["node"] == "cache.t4g.medium"
    assert a["always_on"]["usd"] == pytest.approx(0.065 / 4)


def test_without_platform_records_the_daemons_counts_stand_in() -> None:
    before = StoreSnapshot(None, {"uploads": 5, "cos_fallbacks": 1, "recovery_cos_reads": 0, "lost_instances": 0,
                                  "functions": [{"name": "sion-0", "invocations": 2}]})
    after = StoreSnapshot(None, {"uploads": 9, "cos_fallbacks": 3, "recovery_cos_reads": 2, "lost_instances": 1,
                                 "chunks_recovered": 2,
                                 "functions": [{"name": "sion-0", "invocations": 5}, {"name": "sion-1",
                                                                                       "invocations": 1}]})
    a = run_cost(t0=0.0, t1=10.0, billing={"invocations": 3, "gb_seconds": 0.5, "functions": {"t": {"billed_ms": 900}}},
                 before=before, after=after, platform=None, objects={}, peak_live_bytes=0, function_memory_mb=1024)
    ln = a["lines"]
    assert ln["storage_io"]["invocations"] == 4 and ln["storage_io"]["gb_s"] is None
    assert a["static_pool"]["functions"] == 2
    assert (ln["cos_requests"]["puts"], ln["cos_requests"]["gets"]) == (4, 2)  # 4 GETs less 2 recovery reads
    assert (ln["recovery"]["cos_gets"], ln["recovery"]["functions_lost"]) == (2, 1)
    assert ln["tasks"]["billed_ms"] == 900
    assert "STAT" in a["sources"]["storage_functions"]
    assert any("COS" in line for line in format_cost(a))


def test_cos_storage_counts_each_object_while_held() -> None:
    objs = {"a": {"size": 100, "written_at": 1.0, "freed_at": 3.0},
            "b": {"size": 10, "written_at": 2.0, "freed_at": None},   # kept: to the run's end
            "c": {"size": 5, "written_at": None, "freed_at": None}}   # never written
    assert cos_byte_seconds(objs, wall_s=12.0) == pytest.approx(200 + 100)
