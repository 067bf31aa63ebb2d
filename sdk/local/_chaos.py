"""Storage chaos for ``funcsion run --kill-storage-rate P`` (``StorageChaos``) and
``--restart-daemon-after S`` (``DaemonRestart``). ``StorageChaos``: while a run executes on an
embedded stack, every storage-function instance that holds chunks is SIGKILLed with
probability ``P`` every ``interval_s`` (100 ms), like the platform reclaiming
it; right after a kill the function is asked for its state, so a new instance answers, the
daemon sees the loss (a new instance id) and local recovery starts, as SION's periodic
warm-ups would find it. Seeded for repeatable runs. ``DaemonRestart``: S seconds into the run the daemon
process of a ``daemon_process`` stack is killed with -9 and started again
(``Stack.restart_daemon``). Not for AWS (nothing to kill there).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

__all__ = ["StorageChaos", "DaemonRestart"]

log = logging.getLogger("funcsion.chaos")


class StorageChaos:
    def __init__(self, stack: Any, rate: float, *, seed: int | None = None, interval_s: float = 0.1) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"kill_storage_rate must be within 0..1, got {rate}")
        self.stack, self.rate, self.interval_s = stack, rate, interval_s
        self.rng = random.Random(seed)
        self.kills = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StorageChaos:
        if self.rate > 0:
            self._thread = threading.Thread(target=self._loop, name="funcsion-chaos", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        daemon = self.stack.store.daemon
        p = self.rate
        while not self._stop.wait(self.interval_s):
            for h in list(daemon.handles):
                if daemon.chunks_on(h.index) <= 0 or self.rng.random() >= p:
                    continue
                try:
                    self.stack.platform.kill(h.name)
                    self.kills += 1
                    daemon.function_memory(h.name, timeout_s=10)   # a new instance answers: loss found
                except Exception as exc:  # noqa: BLE001 - chaos must never stop the run itself
                    log.info("chaos: %s: %r", h.name, exc)


class DaemonRestart:
    """``with DaemonRestart(stack, after_s):`` kill -9 and restart the stack's daemon once,
    ``after_s`` seconds in (0: never); ``restarts`` counts them."""

    def __init__(self, stack: Any, after_s: float) -> None:
        if after_s < 0:
            raise ValueError(f"restart_daemon_after_s must be >= 0, got {after_s}")
        self.stack, self.after_s = stack, after_s
        self.restarts = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DaemonRestart:
        if self.after_s > 0:
            self._thread = threading.Thread(target=self._run, name="funcsion-daemon-restart", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)  # a restart under way finishes first: the run's end needs the daemon

    def _run(self) -> None:
        if self._stop.wait(self.after_s):
            return
        try:
            self.stack.restart_daemon()
            self.restarts += 1
        except Exception as exc:  # noqa: BLE001 - the run goes on; the report shows no restart
            self.error = exc
            log.warning("chaos: restarting the daemon failed: %r", exc)
