"""Modelled network links: token buckets kept as a virtual clock of when the link is
next free, for the places where a benchmark stands a bandwidth model in for a network
that one loaded machine does not have.

- ``Throttle``: one direction of one link. ``take(n)`` waits for ``n`` bytes' turn,
  reserved ``QUANTUM`` bytes at a time so that the flows sharing it interleave as
  packets do (a storage function's per-instance bandwidth: its COS downloads and its
  GET replies, ``runtime._handler``); ``reserve(n, since)`` books ``n`` bytes whole and
  returns when they are through, without waiting.
- ``HostLink``: a host's full-duplex NIC, ``mbps`` each way (one ``Throttle`` per
  direction). ``carry(rx, tx, since)`` books a request's received and sent bytes from
  ``since`` (when the request arrived, so the host's own work overlaps its transfer) and
  waits until both are through. ``funcsion bench scale`` gives one to each daemon process
  and each metadata shard process (``--host-bandwidth-mbps``, ``--shard-bandwidth-mbps``)
  to stand for one VM each on a host whose cores they share.

Rates are in MB/s (10^6 bytes a second), as every ``*_mbps`` setting of funcsion; 0 or
less is unlimited. Threads share a link. Not here: where the bytes are counted (the
daemon's GET and PUT paths, the metadata server's loop), nor any real socket pacing.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["HostLink", "Throttle"]


class Throttle:
    """One direction of a modelled link of ``mbps`` MB/s (0: unlimited)."""

    QUANTUM = 64 * 1024
    #: a debt shorter than this is slept with the next piece's (fewer, longer sleeps: each
    #: sleep overshoots a little, more so on a loaded machine)
    SLACK_S = 0.002

    def __init__(self, mbps: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = mbps * 1e6
        self.free_at = 0.0
        self.lock = threading.Lock()
        self.clock = clock

    def take(self, n: int) -> None:
        """Wait for ``n`` bytes' turn: a 4 KiB reply waits for at most one quantum of a large
        transfer already under way, not for the whole of it."""
        if self.rate <= 0:
            return
        while True:
            piece = min(n, self.QUANTUM)
            with self.lock:
                now = self.clock()
                self.free_at = max(self.free_at, now) + piece / self.rate
                wait = self.free_at - now
            n -= piece
            if wait > (0 if n <= 0 else self.SLACK_S):
                time.sleep(wait)  # the modelled transfer time so far (a short debt waits for the next piece)
            if n <= 0:
                return

    def reserve(self, n: int, since: float, burst_s: float = 0.0) -> float:
        """Book ``n`` bytes whole, starting no earlier than ``since`` (this link's clock)
        less ``burst_s``: a bucket that holds ``burst_s`` seconds of tokens, so that time a
        waiter lost oversleeping is made up while the link stays busy. When they are
        through; does not wait; unlimited: ``since``."""
        if self.rate <= 0 or n <= 0:
            return since
        with self.lock:
            self.free_at = max(self.free_at, since - burst_s) + n / self.rate
            return self.free_at


class HostLink:
    """A host's full-duplex NIC of ``mbps`` MB/s each way (0: unlimited), a token bucket
    ``burst_s`` seconds deep: over any span T it carries at most ``mbps`` x (T + ``burst_s``)
    each way. The depth makes up what sleeping past a turn loses (a process woken on a
    loaded machine waits its turn for a core: milliseconds, which would otherwise cost a link
    of small requests half its rate)."""

    BURST_S = 0.05

    def __init__(self, mbps: float, clock: Callable[[], float] = time.monotonic, burst_s: float = BURST_S) -> None:
        self.mbps = mbps
        self.burst_s = burst_s
        self.rx = Throttle(mbps, clock)
        self.tx = Throttle(mbps, clock)
        self.clock = clock
        self.waited_s = 0.0  # total time callers were held (how much the model bound)

    def carry(self, rx: int, tx: int, since: float) -> float:
        """Book ``rx`` bytes received and ``tx`` sent by a request that arrived at ``since``,
        and wait until both are through: the seconds waited (0 when the host was slower
        than its link)."""
        if self.mbps <= 0:
            return 0.0
        done = max(self.rx.reserve(rx, since, self.burst_s), self.tx.reserve(tx, since, self.burst_s))
        wait = done - self.clock()
        if wait <= 0:
            return 0.0
        time.sleep(wait)
        self.waited_s += wait
        return wait
