"""Fault injection on the local platform: instances killed mid-invocation
(on demand, at a random rate, through the kill file and the environment);
the caller always sees InvocationFailed and the platform recovers."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_functions.exceptions import InvocationFailed
from storage_functions.local import LocalPlatform, PlatformConfig
from tests.functional.test_local_platform import HANDLER_SOURCE


@pytest.fixture(scope="module")
def handler_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fault_handlers")
    (d / "fn_handlers.py").write_text(HANDLER_SOURCE)
    return d


@pytest.fixture
def seen_pids() -> Iterator[set[int]]:
    """Every pid a test records here must be gone when it ends."""
    pids: set[int] = set()
    yield pids
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    assert alive == [], f"instance processes left behind: {alive}"


def deploy(p: LocalPlatform, handler_dir: Path, name: str, fn: str, **kw: object) -> None:
    p.deploy(name, f"fn_handlers:{fn}", code_paths=[handler_dir], **kw)  # type: ignore[arg-type]


def wait_busy(p: LocalPlatform, name: str, n: int = 1) -> None:
    deadline = time.monotonic() + 10
    while sum(i.state == "busy" and i.pid > 0 for i in p.instances(name)) < n:
        assert time.monotonic() < deadline, "instances never got busy"
        time.sleep(0.01)
    time.sleep(0.05)  # let the handler start


def test_kill_now_fails_the_running_invocation_and_the_next_one_cold_starts(
        handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(), environ={}) as p:
        deploy(p, handler_dir, "slow", "sleep")
        h = p.invoke_async("slow", {"s": 30})
        wait_busy(p, "slow")
        [pid] = [i.pid for i in p.instances("slow")]
        seen_pids.add(pid)
        assert p.kill("slow") == [pid]
        exc = h.exception(timeout=10)
        assert isinstance(exc, InvocationFailed) and exc.reason == "killed"
        assert "Runtime exited with error: signal: killed (fault injection)" in str(exc)
        again = p.invoke("slow", {"s": 0})
        assert again["pid"] != pid and p.records("slow")[-1].cold
        seen_pids.add(again["pid"])


def test_kill_one_instance_by_pid_spares_the_others(handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(), environ={}) as p:
        deploy(p, handler_dir, "slow", "sleep")
        handles = [p.invoke_async("slow", {"s": 0.8}) for _ in range(3)]
        wait_busy(p, "slow", 3)
        pids = [i.pid for i in p.instances("slow")]
        seen_pids.update(pids)
        assert p.kill("slow", instance=pids[1]) == [pids[1]]
        outcomes = sorted("ok" if h.exception(timeout=10) is None else h.exception().reason  # type: ignore[union-attr]
                          for h in handles)
        assert outcomes == ["killed", "ok", "ok"]
        assert sorted(i.pid for i in p.instances("slow")) == sorted([pids[0], pids[2]])


def test_killing_idle_instances_removes_them(handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(), environ={}) as p:
        deploy(p, handler_dir, "echo", "echo")
        pid = p.invoke("echo", {})["pid"]
        seen_pids.add(pid)
        assert p.kill("echo") == [pid] and p.instances("echo") == []
        assert p.invoke("echo", {})["calls"] == 1


def test_kill_rate_one_fails_every_invocation(handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(kill_rate=1.0, seed=1), environ={}) as p:
        deploy(p, handler_dir, "echo", "echo")
        for _ in range(3):
            with pytest.raises(InvocationFailed, match="fault injection") as info:
                p.invoke("echo", {})
            assert info.value.reason == "killed"
        recs = p.records("echo")
        seen_pids.update(r.pid for r in recs)
        assert [r.outcome for r in recs] == ["killed"] * 3 and all(r.cold for r in recs)
        assert p.instances() == [] and p.billing().functions["echo"].errors == 3


def test_random_kill_rate_from_the_environment(handler_dir: Path, seen_pids: set[int]) -> None:
    env = {"FUNCSION_KILL_RATE": "0.4", "FUNCSION_PLATFORM_SEED": "11", "FUNCSION_KILL_FUNCTIONS": "victim-*"}
    with LocalPlatform(environ=env) as p:
        assert p.config.kill_rate == 0.4
        deploy(p, handler_dir, "victim-1", "echo")
        deploy(p, handler_dir, "bystander", "echo")
        ok = failed = 0
        for i in range(30):
            try:
                assert p.invoke("victim-1", {"i": i})["event"] == {"i": i}
                ok += 1
            except InvocationFailed as exc:
                assert exc.reason == "killed"
                failed += 1
            assert p.invoke("bystander", {"i": i})["calls"] == i + 1  # never a target: one warm instance
        assert ok + failed == 30 and 4 <= failed <= 20
        seen_pids.update(r.pid for r in p.records())


def test_kill_rate_under_concurrency(handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(kill_rate=0.3, kill_delay_s=0.05, seed=3, concurrency_limit=4),
                       environ={}) as p:
        deploy(p, handler_dir, "slow", "sleep")
        results: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            for _ in range(6):
                try:
                    p.invoke("slow", {"s": 0.02})
                    outcome = "ok"
                except InvocationFailed as exc:
                    outcome = exc.reason
                with lock:
                    results.append(outcome)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 24 and set(results) <= {"ok", "killed"} and "killed" in results and "ok" in results
        seen_pids.update(r.pid for r in p.records())


def test_kill_file_kills_matching_functions_now(handler_dir: Path, tmp_path: Path, seen_pids: set[int]) -> None:
    kill_file = tmp_path / "kill"
    with LocalPlatform(PlatformConfig(kill_file=str(kill_file)), environ={}) as p:
        deploy(p, handler_dir, "storage-0", "sleep")
        deploy(p, handler_dir, "storage-1", "echo")
        deploy(p, handler_dir, "task", "echo")
        h = p.invoke_async("storage-0", {"s": 30})
        seen_pids.add(p.invoke("storage-1", {})["pid"])
        task_pid = p.invoke("task", {})["pid"]
        seen_pids.add(task_pid)
        wait_busy(p, "storage-0")
        seen_pids.update(i.pid for i in p.instances("storage-0"))
        kill_file.write_text("storage-*\n")
        exc = h.exception(timeout=10)
        assert isinstance(exc, InvocationFailed) and exc.reason == "killed"
        deadline = time.monotonic() + 5
        while kill_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not kill_file.exists()
        assert [i.function_name for i in p.instances()] == ["task"] and p.instances()[0].pid == task_pid


def test_doomed_invocation_dies_within_the_kill_delay(handler_dir: Path, seen_pids: set[int]) -> None:
    with LocalPlatform(PlatformConfig(kill_rate=1.0, kill_delay_s=0.2, seed=5), environ={}) as p:
        deploy(p, handler_dir, "slow", "sleep")
        t0 = time.monotonic()
        with pytest.raises(InvocationFailed) as info:
            p.invoke("slow", {"s": 30})
        assert info.value.reason == "killed" and time.monotonic() - t0 < 5
        seen_pids.update(r.pid for r in p.records())


def test_platform_without_shutdown_leaves_no_process(handler_dir: Path, seen_pids: set[int]) -> None:
    import gc

    p = LocalPlatform(PlatformConfig(), environ={})
    deploy(p, handler_dir, "echo", "echo")
    seen_pids.add(p.invoke("echo", {})["pid"])
    del p
    gc.collect()  # the finalizer kills and reaps the instances
