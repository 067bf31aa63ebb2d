"""The local executor's scheduling policy, pure: which task may start, and
when a failed one is retried (Step Functions ``Retry`` semantics).

``RunSchedule`` takes the function graph (an edge wherever one function must
finish before another starts) and events with explicit times; it never reads
a clock or touches a process. The executor asks ``ready(now)``, reports
``started``/``succeeded``/``failed``, and sleeps until ``next_wakeup()``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["RetryPolicy", "TaskState", "TaskRecord", "RunSchedule"]

TaskState = Literal["waiting", "ready", "running", "backoff", "succeeded", "failed", "skipped", "aborted"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Like a Step Functions Retrier: ``max_attempts`` counts retries after the first try."""

    max_attempts: int = 2
    interval_s: float = 1.0
    backoff_rate: float = 2.0
    max_delay_s: float = 60.0
    jitter: Literal["NONE", "FULL"] = "NONE"

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds before retry number ``retry`` (1-based)."""
        d = min(self.max_delay_s, self.interval_s * self.backoff_rate ** (retry - 1))
        if self.jitter == "FULL":
            d = (rng or random.Random()).uniform(0, d)
        return d


@dataclass(slots=True)
class TaskRecord:
    name: str
    state: TaskState = "waiting"
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    retry_at: float | None = None
    errors: list[str] = field(default_factory=list)
    result: object = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


class RunSchedule:
    def __init__(self, preds: Mapping[str, Iterable[str]], retry: RetryPolicy | None = None,
                 rng: random.Random | None = None, max_retries: Mapping[str, int] | None = None) -> None:
        """``max_retries`` overrides ``retry.max_attempts`` per task (a WDS entry's ``max_attempts`` - 1)."""
        self.preds = {n: set(p) for n, p in preds.items()}
        self.succ: dict[str, set[str]] = {n: set() for n in self.preds}
        for n, ps in self.preds.items():
            for p in ps:
                self.succ[p].add(n)
        self.retry = retry or RetryPolicy()
        self.rng = rng or random.Random(0)
        self.tasks = {n: TaskRecord(n) for n in self.preds}
        for n, ps in self.preds.items():
            if not ps:
                self.tasks[n].state = "ready"
        self.first_failure: TaskRecord | None = None
        self.max_retries = dict(max_retries or {})

    # -- questions -------------------------------------------------------------------
    def ready(self, now: float) -> list[str]:
        """Tasks that may start now (in a stable order), backoffs that have elapsed included."""
        out = []
        for t in self.tasks.values():
            if t.state == "backoff" and t.retry_at is not None and t.retry_at <= now:
                t.state = "ready"
            if t.state == "ready":
                out.append(t.name)
        return out

    def next_wakeup(self) -> float | None:
        times = [t.retry_at for t in self.tasks.values() if t.state == "backoff" and t.retry_at is not None]
        return min(times) if times else None

    @property
    def finished(self) -> bool:
        return all(t.state in ("succeeded", "failed", "skipped", "aborted") for t in self.tasks.values()) or (
            self.first_failure is not None and not any(t.state == "running" for t in self.tasks.values()))

    @property
    def succeeded(self) -> bool:
        return all(t.state == "succeeded" for t in self.tasks.values())

    @property
    def running(self) -> list[str]:
        return [t.name for t in self.tasks.values() if t.state == "running"]

    # -- events ----------------------------------------------------------------------
    def started(self, name: str, now: float) -> int:
        """Mark a task running; returns its attempt number (1-based)."""
        t = self.tasks[name]
        if t.state != "ready":
            raise ValueError(f"task {name!r} is {t.state}, not ready")
        t.state = "running"
        t.attempts += 1
        if t.started_at is None:
            t.started_at = now
        return t.attempts

    def succeeded_task(self, name: str, now: float, result: object = None) -> list[str]:
        """Mark success; returns the tasks this made ready."""
        t = self.tasks[name]
        t.state, t.finished_at, t.result = "succeeded", now, result
        newly = []
        if self.first_failure is None:
            for s in sorted(self.succ[name]):
                if self.tasks[s].state == "waiting" and all(self.tasks[p].state == "succeeded" for p in self.preds[s]):
                    self.tasks[s].state = "ready"
                    newly.append(s)
        return newly

    def failed_task(self, name: str, now: float, error: str, *, retryable: bool = True) -> float | None:
        """Record a failure; returns the retry time, or None when the task gave up
        (then nothing new starts and the run fails once running tasks end)."""
        t = self.tasks[name]
        t.errors.append(error)
        retries_done = t.attempts - 1
        allowed = self.max_retries.get(name, self.retry.max_attempts)
        if retryable and retries_done < allowed and self.first_failure is None:
            t.state = "backoff"
            t.retry_at = now + self.retry.delay(retries_done + 1, self.rng)
            return t.retry_at
        t.state, t.finished_at = "failed", now
        if self.first_failure is None:
            self.first_failure = t
        for other in self.tasks.values():
            if other.state in ("waiting", "ready", "backoff"):
                other.state = "skipped"
        return None

    def abort(self, now: float, reason: str) -> list[str]:
        """The run stops from outside (Ctrl-C, an error of the driver): running tasks end
        ``aborted`` with ``reason`` (they did not fail: they were stopped), the rest are skipped;
        ``first_failure`` stays as it was (no task caused it). Returns the tasks that were running."""
        running = []
        for t in self.tasks.values():
            if t.state == "running":
                t.state, t.finished_at = "aborted", now
                t.errors.append(reason)
                running.append(t.name)
            elif t.state in ("waiting", "ready", "backoff"):
                t.state = "skipped"
        return running
