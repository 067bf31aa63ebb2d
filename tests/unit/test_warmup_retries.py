"""A storage function's warm-up whose instance dies before it connects (``--kill-rate`` during
a stack's start-up) is invoked again at once, a bounded number of times, and then the handle
says it failed, so the stack's start-up stops waiting for it (it waited its whole 20 s before,
issue 30, 3). Driven with an invoker whose invocations end at once, never connecting."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from storage_functions.daemon._functions import WARMUP_RETRIES, FunctionHandle


class _DyingInvoker:
    """Each invocation's instance is killed before it dials the daemon."""

    def __init__(self) -> None:
        self.calls = 0
        self.cond = threading.Condition()

    def __call__(self, name: str, event: dict[str, Any]) -> Any:
        fut: Future[Any] = Future()

        class Ret:
            future = fut

        with self.cond:
            self.calls += 1
            self.cond.notify_all()
        fut.set_result(None)  # add_done_callback on a done future calls back at once
        return Ret()


def test_a_killed_warm_up_is_retried_then_given_up() -> None:
    invoker = _DyingInvoker()
    h = FunctionHandle(0, "sion-0", invoke=invoker, event=lambda h, warmup: {"secret": h.secret, "warmup": warmup},
                       invoke_timeout_s=30.0, on_lost=lambda h: None, on_mem=lambda h, m: None)
    h.warm()
    with h.cond:
        assert h.cond.wait_for(lambda: h.warm_failed, timeout=10)  # no wait for invoke_timeout_s
        assert h.state == "sleeping"
    assert invoker.calls == 1 + WARMUP_RETRIES
    h.warm()  # asked again later: a fresh round of tries
    with h.cond:
        assert h.cond.wait_for(lambda: invoker.calls == 2 * (1 + WARMUP_RETRIES) and h.warm_failed, timeout=10)
