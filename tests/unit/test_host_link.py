"""``storage_functions.throttle.HostLink``: a host's modelled full-duplex NIC. A request's
bytes are booked from when it arrived (the host's own work overlaps the transfer), the two
directions are booked apart, and the link's rate bounds what threads sharing it move."""

from __future__ import annotations

import threading
import time

from storage_functions.throttle import HostLink, Throttle


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reserve_books_from_since_and_queues_behind_earlier_bookings() -> None:
    link = Throttle(10.0, clock=_Clock())  # 10 MB/s: 1 MB is 0.1 s
    assert link.reserve(1_000_000, 100.0) == 100.1
    assert abs(link.reserve(1_000_000, 100.0) - 100.2) < 1e-9  # behind the first
    assert abs(link.reserve(1_000_000, 105.0) - 105.1) < 1e-9  # the link was idle since 100.2
    assert Throttle(0.0).reserve(10**9, 7.0) == 7.0  # unlimited


def test_carry_waits_for_the_slower_direction_and_not_for_time_already_spent() -> None:
    clock = _Clock()
    link = HostLink(10.0, clock=clock, burst_s=0.0)
    clock.now = 100.5  # the request took 0.5 s of the host's own work: its 1 MB (0.1 s) is through
    assert link.carry(1_000_000, 1_000_000, since=100.0) == 0.0
    link = HostLink(10.0, burst_s=0.0)
    t0 = time.monotonic()
    waited = link.carry(100_000, 2_000_000, since=t0)  # 0.01 s in, 0.2 s out
    took = time.monotonic() - t0
    assert 0.19 <= took < 0.6 and waited > 0.15, (took, waited)
    assert link.waited_s == waited
    assert HostLink(0.0).carry(10**9, 10**9, since=time.monotonic()) == 0.0


def test_threads_sharing_a_link_move_no_more_than_its_rate() -> None:
    link = HostLink(20.0)  # 20 MB/s
    t0 = time.monotonic()

    def request() -> None:
        for _ in range(5):
            link.carry(200_000, 200_000, since=time.monotonic())

    threads = [threading.Thread(target=request) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    took = time.monotonic() - t0
    assert took >= 4 * 5 * 200_000 / 20e6 - link.burst_s, took  # 4 MB at 20 MB/s: 0.2 s, less the bucket's depth


def test_the_bucket_makes_up_an_overslept_turn_but_no_more_than_its_depth() -> None:
    link = Throttle(1.0, clock=_Clock())  # 1 MB/s: 1000 bytes is 1 ms
    assert abs(link.reserve(1000, 100.0, burst_s=0.01) - 99.991) < 1e-9  # an idle link: 10 ms of tokens
    assert abs(link.reserve(1000, 100.0, burst_s=0.01) - 99.992) < 1e-9  # then back to back
    assert abs(link.reserve(1000, 100.5, burst_s=0.01) - 100.491) < 1e-9  # idle again: no more than the depth
