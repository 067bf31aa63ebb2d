"""Retry with capped exponential backoff and full jitter, as a pure policy.

``RetryPolicy`` only computes delays from an attempt number, the elapsed time
and a random source; ``call_with_retries`` runs a callable under a policy with
an injected ``sleep``, ``clock`` and ``rng`` so tests never wait. Which errors
are transient is the caller's decision (a predicate), not this module's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = ["RetryPolicy", "call_with_retries", "RetryExhausted"]

T = TypeVar("T")


class _Rng(Protocol):
    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` counts the first call; ``deadline_s`` bounds the total
    time spent (calls plus sleeps); the n-th retry (n >= 1) sleeps a uniform
    draw in ``[0, min(max_delay_s, base_delay_s * multiplier**(n-1))]``
    ("full jitter"), or exactly that cap with ``jitter=False``."""

    max_attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    multiplier: float = 2.0
    deadline_s: float = 60.0
    jitter: bool = True

    def __post_init__(self) -> None:
        for name in ("base_delay_s", "max_delay_s", "deadline_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"RetryPolicy.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts!r}")
        if self.multiplier < 1:
            raise ValueError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier!r}")

    def next_delay(self, attempt: int, elapsed_s: float, rng: _Rng) -> float | None:
        """Delay before attempt ``attempt + 1`` after ``attempt`` failed calls,
        or None to give up (attempts used up, or the sleep would cross the
        deadline)."""
        if attempt >= self.max_attempts:
            return None
        cap = min(self.max_delay_s, self.base_delay_s * self.multiplier ** (attempt - 1))
        delay = cap * rng.random() if self.jitter else cap
        if elapsed_s + delay > self.deadline_s:
            return None
        return delay


NO_RETRY = RetryPolicy(max_attempts=1)


class RetryExhausted(Exception):
    """Internal: carries the last transient error and the attempt count."""

    def __init__(self, last: BaseException, attempts: int) -> None:
        super().__init__(last)
        self.last = last
        self.attempts = attempts


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: _Rng | None = None,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Call ``fn`` until it returns, raises a non-transient error (re-raised
    as is), or the policy gives up (``RetryExhausted`` from the last error)."""
    rng = rng if rng is not None else random.Random()
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = policy.next_delay(attempt, clock() - start, rng)
            if delay is None:
                raise RetryExhausted(exc, attempt) from exc
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            sleep(delay)
