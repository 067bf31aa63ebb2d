"""The storage runtime's modelled link (``_Throttle``): a small reply's turn comes after at
most a quantum of a large one in flight, not after the whole large transfer (SION's small
requests never queue behind large ones), and the modelled rate still holds."""

from __future__ import annotations

import threading
import time

from storage_functions.runtime._handler import _Throttle
from tests._waiting import wait_for


def test_a_small_take_finishes_before_a_large_one_already_under_way() -> None:
    link = _Throttle(10.0)  # 10 MB/s: 4 MB is 0.4 s of modelled transfer
    large_done = threading.Event()

    def large() -> None:
        link.take(4_000_000)
        large_done.set()

    t = threading.Thread(target=large, daemon=True)
    t.start()
    wait_for(lambda: link.free_at > 0, 10, "the large transfer's first reservation")
    t0 = time.monotonic()
    link.take(4096)
    waited = time.monotonic() - t0
    small_first = not large_done.is_set()
    t.join(10)
    assert small_first, "the 4 KiB take waited for the whole 4 MB one"
    assert waited < 0.2, f"the 4 KiB take waited {waited:.3f} s behind a 0.4 s transfer"


def test_the_modelled_rate_holds_for_one_large_take() -> None:
    link = _Throttle(20.0)
    t0 = time.monotonic()
    link.take(2_000_000)  # 0.1 s at 20 MB/s
    took = time.monotonic() - t0
    assert 0.095 <= took < 0.5, took
    unlimited = _Throttle(0.0)
    t0 = time.monotonic()
    unlimited.take(10**9)
    assert time.monotonic() - t0 < 0.05
