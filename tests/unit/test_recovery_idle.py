"""``Recovery.wait_idle`` wakes as soon as a loss whose function's list named nothing to
restore was read (it used to sleep out its whole timeout: the read's end notified no one,
and ``wait_for`` found the recovery idle only when the timeout ran out)."""

from __future__ import annotations

import threading
from typing import Any

from storage_functions.daemon._config import DaemonConfig
from storage_functions.daemon._recovery import Recovery


class _Host:
    def __init__(self) -> None:
        self.config = DaemonConfig()
        self.cos = None
        self.handles: list[Any] = []
        self.counters: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


class _Signalling(threading.Condition):
    """A condition that says when a thread starts waiting on it."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()  # (the lock is held: a notify cannot come before the wait)
        return super().wait(timeout)


def test_wait_idle_returns_once_a_loss_with_nothing_to_restore_was_read() -> None:
    r = Recovery(_Host(), workers=1)  # type: ignore[arg-type]
    r._idle = idle = _Signalling(r._lock)
    gate = threading.Event()

    def from_log(fn: int, known: set[str]) -> list[Any]:  # the function's log, read from COS
        gate.wait(30)
        return []

    r._from_log = from_log  # type: ignore[method-assign]
    try:
        r.lost([], fn=0)
        result: list[bool] = []
        done = threading.Event()
        threading.Thread(target=lambda: (result.append(r.wait_idle(60)), done.set()), daemon=True).start()
        assert idle.waiting.wait(10)  # the waiter sleeps while the log is read
        gate.set()
        assert done.wait(10), "wait_idle slept on after the loss was read"
        assert result == [True]
    finally:
        gate.set()
        r.stop()
