"""The local Lambda platform over real processes: warm reuse, cold starts,
errors, JSON, timeouts, memory, limits, reclamation, billing, shutdown."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_functions.exceptions import (
    ConcurrencyLimit, FunctionNotDeployed, InvalidPayload, InvocationFailed, PlatformConfigError,
)
from storage_functions.local import LocalPlatform, PlatformConfig
from storage_functions.local._instance import read_resident_mb, read_rss_mb

HANDLER_SOURCE = textwrap.dedent('''
    import json, os, sys, time

    CALLS = 0
    LOADED_AT = time.time()

    def echo(event, context):
        global CALLS
        CALLS += 1
        return {"event": event, "calls": CALLS, "pid": os.getpid(), "loaded_at": LOADED_AT,
                "context": {"function_name": context.function_name, "memory": context.memory_limit_in_mb,
                            "arn": context.invoked_function_arn, "request_id": context.aws_request_id,
                            "remaining_ms": context.get_remaining_time_in_millis(),
                            "log_group": context.log_group_name},
                "env": {k: v for k, v in os.environ.items() if k.startswith(("AWS_LAMBDA", "APP_"))}}

    def sleep(event, context):
        time.sleep(event.get("s", 1.0))
        return {"slept": event.get("s", 1.0), "pid": os.getpid()}

    def fail(event, context):
        raise ValueError(f"bad input {event.get('x')!r}")

    def not_json(event, context):
        return {"a set": {1, 2}}

    def big(event, context):
        return "x" * event["n"]

    HOG = []
    def hog(event, context):
        for _ in range(event["mb"]):
            HOG.append(bytearray(1024 * 1024))
            time.sleep(0.002)
        return {"held_mb": len(HOG)}

    def measured(event, context):
        return {"metrics": {"warmup": 1, "cos_puts": 2, "label": "not a number", "flag": True}}

    def say(event, context):
        print("hello from", context.function_name, flush=True)
        return None

    def exit_hard(event, context):
        os._exit(3)
''')


@pytest.fixture(scope="session")
def handler_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("handlers")
    (d / "fn_handlers.py").write_text(HANDLER_SOURCE)
    (d / "broken_handlers.py").write_text("import no_such_module_here\n")
    return d


@pytest.fixture
def platform() -> Iterator[LocalPlatform]:
    with LocalPlatform(PlatformConfig(seed=7), environ={}) as p:
        yield p


def deploy(p: LocalPlatform, handler_dir: Path, name: str, fn: str, **kw: object) -> None:
    p.deploy(name, f"fn_handlers:{fn}", code_paths=[handler_dir], **kw)  # type: ignore[arg-type]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cold_then_warm_keeps_module_globals(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "echo", "echo", memory_mb=256, timeout_s=30, env={"APP_MODE": "test"})
    first = platform.invoke("echo", {"n": 1})
    second = platform.invoke("echo", {"n": 2, "nested": [1, "two", None]})
    assert first["pid"] == second["pid"] and (first["calls"], second["calls"]) == (1, 2)
    assert second["loaded_at"] == first["loaded_at"] and second["event"] == {"n": 2, "nested": [1, "two", None]}
    ctx = first["context"]
    assert ctx["function_name"] == "echo" and ctx["memory"] == "256" and ctx["log_group"] == "/aws/lambda/echo"
    assert ctx["arn"].endswith(":function:echo") and 25_000 < ctx["remaining_ms"] <= 30_000
    assert first["env"]["APP_MODE"] == "test" and first["env"]["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    recs = platform.records("echo")
    assert [r.cold for r in recs] == [True, False] and recs[0].request_id == ctx["request_id"]
    assert recs[0].init_ms > 0 and all(r.outcome == "ok" for r in recs)
    [info] = platform.instances("echo")
    assert (info.pid, info.state, info.invocations) == (first["pid"], "idle", 2) and info.rss_mb


def test_handler_error_is_reported_and_the_instance_stays_warm(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "fail", "fail")
    with pytest.raises(InvocationFailed, match=r"fail \(request .*\): ValueError: bad input 3") as info:
        platform.invoke("fail", {"x": 3})
    exc = info.value
    assert (exc.reason, exc.error_type, exc.error_message, exc.function_name) == (
        "error", "ValueError", "bad input 3", "fail")
    assert "in fail" in exc.stack_trace and "raise ValueError" in exc.stack_trace
    pid = platform.instances("fail")[0].pid
    with pytest.raises(InvocationFailed):
        platform.invoke("fail", {})
    assert [i.pid for i in platform.instances("fail")] == [pid]


def test_results_and_events_must_be_json(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "nj", "not_json")
    with pytest.raises(InvocationFailed, match="Unable to marshal response") as info:
        platform.invoke("nj", {})
    assert info.value.reason == "marshal" and info.value.error_type == "Runtime.MarshalError"
    with pytest.raises(InvalidPayload, match="not JSON"):
        platform.invoke("nj", {"when": object()})
    with pytest.raises(InvalidPayload, match="payload limit"):
        platform.invoke("nj", {"blob": "x" * (6 * 1024 * 1024)})


def test_response_over_the_payload_limit(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(max_payload_bytes=1000), environ={}) as p:
        deploy(p, handler_dir, "big", "big")
        assert len(p.invoke("big", {"n": 900})) == 900
        with pytest.raises(InvocationFailed, match="exceeded maximum allowed payload size") as info:
            p.invoke("big", {"n": 2000})
        assert info.value.error_type == "Function.ResponseSizeTooLarge"


def test_timeout_kills_the_instance(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "slow", "sleep", timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(InvocationFailed, match="Task timed out after 0.30 seconds") as info:
        platform.invoke("slow", {"s": 30})
    assert time.monotonic() - t0 < 5 and info.value.reason == "timeout"
    assert platform.instances("slow") == []
    rec = platform.records("slow")[-1]
    assert not pid_alive(rec.pid) and rec.outcome == "timeout" and rec.billed_ms >= 300
    assert platform.invoke("slow", {"s": 0.01})["slept"] == 0.01  # a fresh, cold instance


def test_memory_size_is_enforced(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "hog", "hog", memory_mb=128)
    assert platform.invoke("hog", {"mb": 20})["held_mb"] == 20  # within its size: fine, and warm
    with pytest.raises(InvocationFailed, match=r"signal: killed \(out of memory: Max Memory Used \d+ MB of 128 MB\)") as info:
        platform.invoke("hog", {"mb": 400})
    assert info.value.reason == "oom" and info.value.error_type == "Runtime.OutOfMemory"
    assert platform.instances("hog") == []
    assert platform.billing().functions["hog"].max_memory_used_mb > 128


def test_import_errors_fail_the_invocation(platform: LocalPlatform, handler_dir: Path) -> None:
    platform.deploy("broken", "broken_handlers:main", code_paths=[handler_dir])
    with pytest.raises(InvocationFailed, match="cannot load handler .*ImportModuleError: No module named .no_such_module_here.") as info:
        platform.invoke("broken", {})
    assert info.value.reason == "init" and info.value.error_type == "Runtime.ImportModuleError"
    deploy(platform, handler_dir, "noattr", "nope")
    with pytest.raises(InvocationFailed, match="Runtime.HandlerNotFound"):
        platform.invoke("noattr", {})
    assert platform.instances() == []


def test_crash_of_the_process_is_an_exit_error(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "crash", "exit_hard")
    with pytest.raises(InvocationFailed, match="Runtime exited with error: exit status 3") as info:
        platform.invoke("crash", {})
    assert info.value.reason == "killed"


def test_unknown_function_and_bad_deploys(platform: LocalPlatform, handler_dir: Path) -> None:
    with pytest.raises(FunctionNotDeployed, match="'ghost' is not deployed"):
        platform.invoke("ghost", {})
    with pytest.raises(FunctionNotDeployed):
        platform.invoke_async("ghost", {})
    for kwargs, match in [
        ({"name": "bad name"}, "function name"), ({"handler": "nodots"}, "handler"),
        ({"memory_mb": 64}, "memory_mb"), ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": 901}, "timeout_s"),
        ({"code_paths": ["/no/such/dir"]}, "code path"), ({"env": {"A": 1}}, "env"),
        ({"reserved_concurrency": 0}, "reserved_concurrency"),
    ]:
        args = {"name": "f", "handler": "m:f", **kwargs}
        with pytest.raises(PlatformConfigError, match=match):
            platform.deploy(args.pop("name"), args.pop("handler"), **args)  # type: ignore[arg-type]


def test_invoke_async_returns_at_once(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "slow", "sleep")
    deploy(platform, handler_dir, "fail", "fail")
    t0 = time.monotonic()
    handles = [platform.invoke_async("slow", {"s": 0.3}) for _ in range(3)]
    bad = platform.invoke_async("fail", {"x": 1})
    assert time.monotonic() - t0 < 0.25 and not handles[0].done()
    assert len({h.result(timeout=10)["pid"] for h in handles}) == 3  # ran concurrently on 3 instances
    assert isinstance(bad.exception(timeout=10), InvocationFailed)
    assert {h.request_id for h in handles} <= {r.request_id for r in platform.records()}
    with pytest.raises(InvalidPayload):
        platform.invoke_async("slow", {"s": {1}})


def test_redeploy_retires_old_instances(platform: LocalPlatform, handler_dir: Path) -> None:
    deploy(platform, handler_dir, "echo", "echo", env={"APP_V": "1"})
    first = platform.invoke("echo", {})
    deploy(platform, handler_dir, "echo", "echo", env={"APP_V": "2"}, memory_mb=512)
    second = platform.invoke("echo", {})
    assert second["pid"] != first["pid"] and second["env"]["APP_V"] == "2" and second["context"]["memory"] == "512"
    assert not pid_alive(first["pid"])
    platform.remove("echo")
    assert platform.instances() == [] and "echo" not in platform.functions()


def test_concurrency_limit_raise_and_queue(handler_dir: Path) -> None:
    for mode in ("raise", "queue"):
        with LocalPlatform(PlatformConfig(concurrency_limit=2, on_limit=mode, queue_timeout_s=10), environ={}) as p:
            deploy(p, handler_dir, "slow", "sleep")
            running = [p.invoke_async("slow", {"s": 0.5}) for _ in range(2)]
            deadline = time.monotonic() + 5
            while sum(i.state == "busy" for i in p.instances()) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            if mode == "raise":
                with pytest.raises(ConcurrencyLimit, match="concurrency limit 2 reached"):
                    p.invoke("slow", {"s": 0})
            else:
                assert p.invoke("slow", {"s": 0})["slept"] == 0  # waited for one to finish
            for h in running:
                h.result(timeout=10)
            assert len(p.instances()) <= 2


def test_reserved_concurrency_caps_one_function(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(on_limit="raise"), environ={}) as p:
        deploy(p, handler_dir, "one", "sleep", reserved_concurrency=1)
        h = p.invoke_async("one", {"s": 0.4})
        while not p.instances("one") or p.instances("one")[0].state != "busy":
            time.sleep(0.01)
        with pytest.raises(ConcurrencyLimit, match="reserved concurrency 1 of one"):
            p.invoke("one", {"s": 0})
        queued = p.invoke_async("one", {"s": 0})  # asynchronous invokes wait their turn
        assert queued.result(timeout=10)["pid"] == h.result(timeout=10)["pid"]


def test_idle_instances_of_other_functions_make_room(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(concurrency_limit=2), environ={}) as p:
        for name in ("a", "b", "c"):
            deploy(p, handler_dir, name, "echo")
        pa = p.invoke("a", {})["pid"]
        p.invoke("b", {})
        p.invoke("c", {})  # reclaims a, the least recently used idle instance
        assert sorted(i.function_name for i in p.instances()) == ["b", "c"] and not pid_alive(pa)


def test_idle_instances_are_reclaimed_after_a_random_time(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(idle_reclaim_s=(0.2, 0.4)), environ={}) as p:
        deploy(p, handler_dir, "echo", "echo")
        pid = p.invoke("echo", {})["pid"]
        assert p.invoke("echo", {})["pid"] == pid
        deadline = time.monotonic() + 5
        while (p.instances("echo") or pid_alive(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.instances("echo") == [] and not pid_alive(pid)
        assert p.invoke("echo", {})["calls"] == 1  # cold again: its globals are new


def test_many_threads_share_the_platform(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(concurrency_limit=4), environ={}) as p:
        deploy(p, handler_dir, "echo", "echo")
        errors: list[BaseException] = []

        def worker(k: int) -> None:
            try:
                for i in range(15):
                    assert p.invoke("echo", {"k": k, "i": i})["event"] == {"k": k, "i": i}
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and 1 <= len(p.instances()) <= 4
        assert p.billing().functions["echo"].invocations == 120


def test_billing_in_gb_seconds_and_dollars(handler_dir: Path) -> None:
    with LocalPlatform(PlatformConfig(bill_init=False), environ={}) as p:
        deploy(p, handler_dir, "slow", "sleep", memory_mb=2048)
        for _ in range(3):
            p.invoke("slow", {"s": 0.05})
        bill = p.billing().functions["slow"]
        recs = p.records("slow")
        assert bill.invocations == 3 and bill.cold_starts == 1 and bill.errors == 0
        assert bill.billed_ms == sum(r.billed_ms for r in recs) and all(50 <= r.billed_ms < 200 for r in recs)
        assert bill.gb_seconds == pytest.approx(2.0 * bill.billed_ms / 1000)
        assert bill.cost_usd == pytest.approx(3 * 0.20 / 1e6 + bill.gb_seconds * 0.0000166667)
        report = p.billing().to_dict()
        assert json.loads(json.dumps(report))["invocations"] == 3 and "slow" in p.billing().format_text()


def test_records_keep_the_numbers_a_handler_reports_under_metrics(handler_dir: Path) -> None:
    with LocalPlatform(environ={}) as p:
        deploy(p, handler_dir, "m", "measured")
        deploy(p, handler_dir, "e", "echo")
        p.invoke("m", {})
        p.invoke("e", {"metrics": {"x": 1}})  # an echo returns them under "event", not "metrics"
        assert dict(p.records("m")[0].metrics) == {"warmup": 1.0, "cos_puts": 2.0}
        assert dict(p.records("e")[0].metrics) == {}


def test_logs_go_to_the_log_dir(handler_dir: Path, tmp_path: Path) -> None:
    with LocalPlatform(PlatformConfig(log_dir=str(tmp_path / "logs")), environ={}) as p:
        deploy(p, handler_dir, "say", "say")
        assert p.invoke("say", {}) is None
    assert "hello from say" in (tmp_path / "logs" / "say.log").read_text()


def test_shutdown_kills_everything_and_fails_waiters(handler_dir: Path) -> None:
    p = LocalPlatform(PlatformConfig(concurrency_limit=1), environ={})
    deploy(p, handler_dir, "slow", "sleep")
    deploy(p, handler_dir, "echo", "echo")
    running = p.invoke_async("slow", {"s": 30})
    queued = p.invoke_async("slow", {"s": 30})  # either may be the one queued: neither may finish
    while not p.instances():
        time.sleep(0.01)
    time.sleep(0.1)
    pids = [i.pid for i in p.instances()]
    p.shutdown()
    for h in (running, queued):
        exc = h.exception(timeout=10)
        assert isinstance(exc, InvocationFailed) and exc.reason == "shutdown"
    assert not any(pid_alive(pid) for pid in pids) and p.instances() == []
    with pytest.raises(InvocationFailed, match="shut down"):
        p.invoke("echo", {})
    p.shutdown()  # idempotent


def test_the_monitors_resident_size_is_what_status_reports() -> None:
    """The memory monitor reads ``statm`` every tick (a third of ``status``'s cost): the same
    resident size ``VmRSS`` gives, and None for a process that is gone."""
    ballast = b"\x01" * (64 << 20)  # 64 MiB written (a zeroed allocation would not be resident)
    before = read_rss_mb(os.getpid())
    resident = read_resident_mb(os.getpid())
    after = read_rss_mb(os.getpid())
    assert before is not None and after is not None and resident is not None
    assert min(before[0], after[0]) - 1 <= resident <= max(before[0], after[0]) + 1
    assert resident > 64 and len(ballast) == 64 << 20
    assert read_resident_mb(2 ** 22 + 7) is None  # above pid_max: never a process
