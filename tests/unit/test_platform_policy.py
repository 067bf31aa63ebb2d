"""Pure parts of the local platform: billing math, the meter, settings and
their precedence, reclaim times and kill decisions with a seeded rng. No
processes."""

from __future__ import annotations

import random

import pytest

import storage_functions.cos as cos_pkg
import storage_functions.local as local_pkg
from storage_functions.exceptions import PlatformConfigError
from storage_functions.local import PlatformConfig, billed_ms, gb_seconds
from storage_functions.local._policy import kill_delay, matches, reclaim_at
from storage_functions.local._pricing import (
    PRICE_PER_GB_SECOND_USD, PRICE_PER_REQUEST_USD, BillingMeter, cost_usd,
)


@pytest.mark.parametrize("seconds,ms", [
    (0.0, 1), (0.0000001, 1), (0.001, 1), (0.0011, 2), (0.1, 100), (0.1234, 124), (1.0, 1000), (899.9999, 900000),
])
def test_billed_ms_rounds_up_to_whole_ms_at_least_one(seconds: float, ms: int) -> None:
    assert billed_ms(seconds) == ms


def test_billed_ms_refuses_negative_time() -> None:
    with pytest.raises(ValueError):
        billed_ms(-0.1)


def test_prices_are_awss_public_x86_prices() -> None:
    assert PRICE_PER_GB_SECOND_USD == 0.0000166667 and PRICE_PER_REQUEST_USD == pytest.approx(2e-7)
    # one million 1-second invocations at 1 GB: 1e6 GB-s and 1e6 requests
    assert cost_usd(1_000_000, gb_seconds(1024, 1000) * 1_000_000) == pytest.approx(16.6667 + 0.20)
    assert gb_seconds(128, 100) == pytest.approx(0.0125)


def test_meter_sums_exactly_across_memory_sizes_and_counts_init() -> None:
    m = BillingMeter()
    m.record("f", 1024, 0.5, init_s=0.2, cold=True, bill_init=True, max_memory_used_mb=50)
    m.record("f", 2048, 0.25, error=True, max_memory_used_mb=80)
    m.record("f", 2048, 0.25, init_s=0.3, cold=True, bill_init=False)
    m.record("g", 128, 0.0)
    r = m.report()
    f = r.functions["f"]
    assert (f.invocations, f.cold_starts, f.errors, f.billed_ms) == (3, 2, 1, 700 + 250 + 250)
    assert f.gb_seconds == pytest.approx(1.0 * 0.7 + 2.0 * 0.25 + 2.0 * 0.25)
    assert f.init_ms == pytest.approx(500) and f.max_memory_used_mb == 80
    assert r.invocations == 4 and r.cost_usd == pytest.approx(cost_usd(4, r.gb_seconds))
    assert r.to_dict()["pricing"]["source"].startswith("https://aws.amazon.com/lambda/pricing")  # type: ignore[index]
    m.record("g", 128, 1.0)
    assert r.functions["g"].invocations == 1  # a report is a snapshot


def test_config_defaults() -> None:
    c = PlatformConfig().resolve({})
    assert c.idle_reclaim_s == (600.0, 1800.0) and c.concurrency_limit == 64 and c.on_limit == "queue"
    assert c.kill_rate == 0.0 and c.kill_functions == "*" and c.enforce_memory is True and c.bill_init is True


def test_config_explicit_beats_environment_beats_default() -> None:
    env = {"FUNCSION_KILL_RATE": "0.25", "FUNCSION_IDLE_RECLAIM_S": "1,2", "FUNCSION_CONCURRENCY_LIMIT": "3",
           "FUNCSION_ENFORCE_MEMORY": "off", "FUNCSION_KILL_FILE": "/tmp/k"}
    c = PlatformConfig(concurrency_limit=9).resolve(env)
    assert (c.kill_rate, c.idle_reclaim_s, c.concurrency_limit, c.enforce_memory, c.kill_file) == (
        0.25, (1.0, 2.0), 9, False, "/tmp/k")
    assert PlatformConfig().resolve({"FUNCSION_IDLE_RECLAIM_S": "5"}).idle_reclaim_s == (5.0, 5.0)


@pytest.mark.parametrize("env,match", [
    ({"FUNCSION_KILL_RATE": "often"}, r"FUNCSION_KILL_RATE='often'.*kill_rate"),
    ({"FUNCSION_KILL_RATE": "1.5"}, r"FUNCSION_KILL_RATE='1.5'.*kill_rate must be a probability"),
    ({"FUNCSION_IDLE_RECLAIM_S": "9,1"}, "idle_reclaim_s must be"),
    ({"FUNCSION_IDLE_RECLAIM_S": "1,2,3"}, "lo,hi"),
    ({"FUNCSION_ON_CONCURRENCY_LIMIT": "drop"}, "on_limit must be 'queue' or 'raise'"),
    ({"FUNCSION_BILL_INIT": "maybe"}, "bill_init"),
    ({"FUNCSION_CONCURRENCY_LIMIT": "0"}, "concurrency_limit must be an int >= 1"),
])
def test_bad_environment_values_name_the_variable_and_field(env: dict[str, str], match: str) -> None:
    with pytest.raises(PlatformConfigError, match=match):
        PlatformConfig().resolve(env)


def test_bad_explicit_values_name_the_field() -> None:
    with pytest.raises(PlatformConfigError, match=r"PlatformConfig.kill_rate: .* got -1"):
        PlatformConfig(kill_rate=-1).resolve({})
    with pytest.raises(ValueError, match="monitor_interval_s"):
        PlatformConfig(monitor_interval_s=0).resolve({})


def test_reclaim_time_is_uniform_in_the_range() -> None:
    c = PlatformConfig(idle_reclaim_s=(10.0, 20.0)).resolve({})
    rng = random.Random(3)
    draws = [reclaim_at(c, 100.0, rng) - 100.0 for _ in range(2000)]
    assert 10.0 <= min(draws) < 10.5 and 19.5 < max(draws) <= 20.0
    assert sum(draws) / len(draws) == pytest.approx(15.0, abs=0.3)
    assert reclaim_at(PlatformConfig(idle_reclaim_s=(5, 5)).resolve({}), 1.0, rng) == 6.0


def test_kill_decisions() -> None:
    rng = random.Random(0)
    never = PlatformConfig().resolve({})
    assert all(kill_delay(never, "f", rng) is None for _ in range(100))
    always = PlatformConfig(kill_rate=1.0, kill_delay_s=0.5, kill_functions="storage-*,x").resolve({})
    delays = [kill_delay(always, "storage-3", rng) for _ in range(100)]
    assert all(d is not None and 0 <= d <= 0.5 for d in delays)
    assert kill_delay(always, "task-1", rng) is None and kill_delay(always, "x", rng) is not None
    half = PlatformConfig(kill_rate=0.5, seed=1).resolve({})
    hits = sum(kill_delay(half, "f", random.Random(i)) is not None for i in range(1000))
    assert 420 < hits < 580


def test_glob_matching() -> None:
    assert matches("*", "anything") and matches("a-*\nb", "b") and not matches("a-*, b", "c")
    assert not matches("", "f")


def test_exported_names_are_pinned() -> None:
    assert sorted(local_pkg.__all__) == sorted([
        "LocalPlatform", "PlatformConfig", "ENV", "FunctionSpec", "InstanceInfo", "InvocationHandle",
        "InvocationRecord", "BillingReport", "FunctionBilling", "LambdaContext", "billed_ms", "gb_seconds",
        "PRICE_PER_GB_SECOND_USD", "PRICE_PER_REQUEST_USD", "PRICING_SOURCE"])
    assert sorted(cos_pkg.__all__) == sorted([
        "COS", "COSStats", "LocalCOS", "S3COS", "RetryPolicy", "open_cos", "validate_key", "MAX_KEY_BYTES"])


def test_lambda_context_matches_the_aws_runtime() -> None:
    import time

    from storage_functions.local import LambdaContext

    ctx = LambdaContext("rid-1", int(time.time() * 1000) + 5000, {
        "function_name": "f", "invoked_function_arn": "arn:aws:lambda:local:0:function:f", "memory_mb": 256})
    assert ctx.memory_limit_in_mb == "256" and ctx.aws_request_id == "rid-1" and ctx.function_version == "$LATEST"
    assert 4000 < ctx.get_remaining_time_in_millis() <= 5000 and ctx.log_group_name == "/aws/lambda/f"
