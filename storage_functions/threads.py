"""Cached threads for work that arrives in bursts (the daemon's function invocations).
Starting a Python thread waits until the new thread has run once, which on a busy
interpreter takes milliseconds. The daemon starts a function's invocation while holding the
function's lock, which every request to that function waits for; during a GET burst that
wait let dozens of GETs be routed to a cache function whose queue still looked empty.
``ThreadCache`` keeps finished threads waiting for the next job (up to ``keep`` of them,
each for up to ``idle_s``), so a burst after a busy spell mostly finds them ready. The
daemon's authenticated connections run on one too: a connection's thread starts once the
HELLO gate (``daemon._hello``) has read its HELLO, and the gate must not wait for it.

Not a pool with a bound: a job never waits for another to end (connections last as long as
their peers), a new thread starts when none is idle.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadCache"]

log = logging.getLogger("storage_functions.threads")


class ThreadCache:
    def __init__(self, name: str, *, keep: int = 128, idle_s: float = 60.0) -> None:
        if keep < 0 or idle_s <= 0:
            raise ValueError(f"ThreadCache: keep must be >= 0 and idle_s > 0, got {keep}, {idle_s}")
        self.name = name
        self.keep = keep
        self.idle_s = idle_s
        self.started = 0  # threads started over the cache's life
        self.reused = 0  # jobs run by a thread that was waiting
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a job that no submit has claimed yet
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a waiting thread, or on a new one when none waits."""
        with self._lock:
            claimed = self._idle > 0 and not self._closed
            if claimed:
                self._idle -= 1
                self.reused += 1
            else:
                self.started += 1
        self._jobs.put((fn, args))
        if not claimed:
            threading.Thread(target=self._run, daemon=True, name=self.name).start()

    def idle(self) -> int:
        with self._lock:
            return self._idle

    def close(self) -> None:
        """End the waiting threads now (jobs still running finish; later submits each get
        a thread of their own that ends with its job)."""
        with self._lock:
            self._closed = True
            n, self._idle = self._idle, 0
        for _ in range(n):
            self._jobs.put(None)

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody claimed this thread: it ends
                        self._idle -= 1
                        return
                continue  # a submit claimed it just now: its job is on the way
            if job is None:  # closed
                return
            fn, args = job
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a bug in one job: logged, the thread serves on
                log.exception("%s: a job failed", self.name)
            with self._lock:
                if self._closed or self._idle >= self.keep:
                    return
                self._idle += 1
