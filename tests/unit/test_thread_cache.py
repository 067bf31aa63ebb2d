"""``storage_functions.threads.ThreadCache``: a finished thread runs the next job, jobs never
wait for each other, idle threads end after ``idle_s`` or at ``close``."""

from __future__ import annotations

import threading

import pytest

from storage_functions.threads import ThreadCache
from tests._waiting import wait_for


def test_a_finished_thread_runs_the_next_job() -> None:
    cache = ThreadCache("t", keep=4, idle_s=30)
    ran: list[str] = []
    done = threading.Event()
    cache.submit(lambda: (ran.append(threading.current_thread().name), done.set()))
    assert done.wait(5)
    wait_for(lambda: cache.idle() == 1, 5, "the thread waits for the next job")
    done.clear()
    cache.submit(lambda: (ran.append(threading.current_thread().name), done.set()))
    assert done.wait(5)
    assert (cache.started, cache.reused) == (1, 1)
    assert ran == ["t", "t"]
    cache.close()


def test_jobs_never_wait_for_each_other() -> None:
    """Connections last as long as their peers: ten blocked jobs, ten threads."""
    cache = ThreadCache("t", keep=2, idle_s=30)
    release = threading.Event()
    started = threading.Semaphore(0)

    def job() -> None:
        started.release()
        release.wait(10)

    for _ in range(10):
        cache.submit(job)
    for _ in range(10):
        assert started.acquire(timeout=5)
    release.set()
    wait_for(lambda: cache.idle() == 2, 5, "at most keep=2 threads stay")
    assert cache.started == 10
    cache.close()


def test_idle_threads_end_after_idle_s_and_at_close() -> None:
    cache = ThreadCache("t-idle", keep=8, idle_s=0.2)
    for _ in range(3):
        cache.submit(lambda: None)
    wait_for(lambda: cache.idle() == 0 and not _alive("t-idle"), 10, "idle threads end after idle_s")
    cache2 = ThreadCache("t-close", keep=8, idle_s=60)
    gate = threading.Barrier(4)
    for _ in range(3):
        cache2.submit(gate.wait, 5)
    gate.wait(5)
    wait_for(lambda: cache2.idle() == 3, 5, "three threads wait")
    cache2.close()
    wait_for(lambda: not _alive("t-close"), 5, "close ends the waiting threads")
    ran = threading.Event()
    cache2.submit(ran.set)  # a submit after close still runs
    assert ran.wait(5)


def test_a_failing_job_is_logged_and_the_thread_serves_on(caplog: pytest.LogCaptureFixture) -> None:
    cache = ThreadCache("t", keep=2, idle_s=30)
    cache.submit(lambda: 1 / 0)
    wait_for(lambda: cache.idle() == 1, 5, "the thread is back")
    assert "a job failed" in caplog.text
    ran = threading.Event()
    cache.submit(ran.set)
    assert ran.wait(5) and cache.reused == 1
    cache.close()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="keep"):
        ThreadCache("t", keep=-1)
    with pytest.raises(ValueError, match="idle_s"):
        ThreadCache("t", idle_s=0)


def _alive(name: str) -> bool:
    return any(t.name == name and t.is_alive() for t in threading.enumerate())
