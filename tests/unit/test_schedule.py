"""The executor's pure scheduling policy: dependency order and retries."""

from __future__ import annotations

import random

import pytest

from sdk.local._schedule import RetryPolicy, RunSchedule

DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def test_dependency_order() -> None:
    s = RunSchedule(DIAMOND)
    assert s.ready(0) == ["a"]
    s.started("a", 0)
    assert s.ready(0) == []
    assert s.succeeded_task("a", 1) == ["b", "c"]
    for n in ("b", "c"):
        s.started(n, 1)
    assert s.succeeded_task("b", 2) == []
    assert s.succeeded_task("c", 3) == ["d"]
    s.started("d", 3)
    s.succeeded_task("d", 4)
    assert s.finished and s.succeeded
    assert s.tasks["d"].duration_s == 1


def test_retry_with_exponential_backoff() -> None:
    s = RunSchedule({"a": []}, RetryPolicy(max_attempts=2, interval_s=1, backoff_rate=2))
    s.started("a", 0)
    assert s.failed_task("a", 0.5, "boom") == 1.5
    assert s.ready(1.0) == [] and s.next_wakeup() == 1.5
    assert s.ready(1.5) == ["a"]
    assert s.started("a", 1.5) == 2
    assert s.failed_task("a", 2, "boom") == 4.0
    s.ready(4)
    assert s.started("a", 4) == 3
    assert s.failed_task("a", 5, "boom") is None
    assert s.finished and not s.succeeded
    assert s.first_failure is not None and s.first_failure.errors == ["boom"] * 3


def test_a_failure_skips_everything_not_started_and_waits_for_running() -> None:
    s = RunSchedule(DIAMOND, RetryPolicy(max_attempts=0))
    s.started("a", 0)
    s.succeeded_task("a", 1)
    s.started("b", 1)
    s.started("c", 1)
    assert s.failed_task("b", 2, "x") is None
    assert not s.finished  # c still runs
    assert s.tasks["d"].state == "skipped"
    s.succeeded_task("c", 3)
    assert s.finished and not s.succeeded
    assert s.ready(10) == []


def test_full_jitter_stays_within_the_bound() -> None:
    p = RetryPolicy(interval_s=2, backoff_rate=3, jitter="FULL")
    rng = random.Random(1)
    delays = [p.delay(3, rng) for _ in range(100)]
    assert all(0 <= d <= 18 for d in delays) and len(set(delays)) > 50
    assert RetryPolicy(interval_s=1, backoff_rate=10, max_delay_s=5).delay(4) == 5


def test_cannot_start_a_task_twice() -> None:
    s = RunSchedule({"a": []})
    s.started("a", 0)
    with pytest.raises(ValueError):
        s.started("a", 0)


def test_a_tasks_own_retry_count_overrides_the_policy() -> None:
    # a WDS entry's max_attempts, less the first try: 1 try for "a", 4 for "b", the policy's 3 for "c"
    def tries(task: str) -> int:
        s = RunSchedule({task: []}, RetryPolicy(max_attempts=2, interval_s=1, backoff_rate=1),
                        max_retries={"a": 0, "b": 3})
        now = 0.0
        s.started(task, now)
        while (at := s.failed_task(task, now, "boom")) is not None:
            now = at
            assert s.ready(now) == [task]
            s.started(task, now)
        assert s.finished and s.tasks[task].state == "failed"
        return s.tasks[task].attempts

    assert [tries(t) for t in ("a", "b", "c")] == [1, 4, 3]
