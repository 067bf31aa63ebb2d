"""A daemon with a modelled host NIC (``DaemonConfig.host_bandwidth_mbps``,
``serve daemon --host-bandwidth-mbps``): a GET's reply and a PUT's answer wait until the
request's coded bytes are through the link, so back-to-back requests move no more than
its rate; without it nothing waits. What ``funcsion bench scale`` models one VM per
daemon with."""

from __future__ import annotations

import os
import time

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

MiB = 1 << 20


def _timed_puts_and_gets(mbps: float, data: bytes, n: int) -> tuple[float, float, dict[str, float]]:
    with LocalStore(max_functions=3, group_size=3, idle_s=30.0, host_bandwidth_mbps=mbps) as st, \
            StoreClient(st.address, st.token, codec=Codec(2, 1)) as c:
        c.put("warm", data)  # the functions' cold starts are not the link's
        assert c.get("warm") == data
        st.daemon.host_link.waited_s = 0.0
        t0 = time.monotonic()
        for i in range(n):
            c.put(f"k{i}", data)
        put_s = time.monotonic() - t0
        t0 = time.monotonic()
        for i in range(n):
            assert c.get(f"k{i}") == data
        get_s = time.monotonic() - t0
        return put_s, get_s, c.stats()["host_link"]


def test_requests_hold_to_the_modelled_link_and_nothing_waits_without_one() -> None:
    data, n, mbps = os.urandom(4 * MiB), 4, 20.0
    put_s, get_s, link = _timed_puts_and_gets(mbps, data, n)
    # 2+1: a PUT's 6 MiB of chunks, a GET's 4 MiB, at 20 MB/s (less the bucket's 50 ms depth)
    assert put_s >= n * len(data) * 3 / 2 / (mbps * 1e6) - 0.05, put_s
    assert get_s >= n * len(data) / (mbps * 1e6) - 0.05, get_s
    assert link["mbps"] == mbps and link["waited_s"] > 0
    _, _, unlimited = _timed_puts_and_gets(0.0, data, 1)
    assert unlimited == {"mbps": 0.0, "waited_s": 0.0}
