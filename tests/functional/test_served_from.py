"""Where the daemon served each GET, over real processes: a GET answered from the persistent
buffer (read-after-write while the upload waits) counts under ``gets_from_buffer`` and is not
a memory hit; the same object read once uploaded counts under ``gets_from_functions``. The
elasticity benchmark's ``hit_ratio`` (``sdk.local._elastic.served_reads``) is read from these
counters."""

from __future__ import annotations

import os

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from sdk.local._elastic import served_reads
from storage_functions.daemon import LocalStore

MiB = 1 << 20


def test_a_get_served_by_the_buffer_is_not_a_hit() -> None:
    with LocalStore(idle_s=30.0) as st, StoreClient(st.address, st.token, codec=Codec(4, 2)) as c:
        d = st.daemon
        data = os.urandom(2 * MiB)
        d.buffer.paused.clear()                            # the PUT stays in the persistent buffer
        try:
            c.put("raw", data)
            before = dict(d.counters)
            assert c.get("raw") == data                    # the upload still waits: from the buffer
            mid = dict(d.counters)
        finally:
            d.buffer.paused.set()
        assert mid["buffer_hits"] - before["buffer_hits"] == 1
        assert mid["gets_from_buffer"] - before["gets_from_buffer"] == 1
        assert mid["gets_from_functions"] == before["gets_from_functions"]
        r = served_reads(before, mid, reads=1)
        assert r["hit_ratio"] == 0.0 and r["buffer_hit_ratio"] == 1.0
        assert r["served"] == {"functions": 0, "cache": 0, "buffer": 1, "cos": 0}
        assert d.wait_uploads(60)
        assert c.get("raw") == data                        # now from the functions holding its chunks
        after = dict(d.counters)
        r = served_reads(mid, after, reads=1)
        assert r["served"] == {"functions": 1, "cache": 0, "buffer": 0, "cos": 0} and r["hit_ratio"] == 1.0
        assert after["gets"] - before["gets"] == 2
