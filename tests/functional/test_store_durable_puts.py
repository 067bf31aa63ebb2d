"""``DaemonConfig.durable_puts``: a PUT is answered only once its version is in COS and the
table records the copy, whatever the write-behind delays say, so losing the daemon's host
(its buffer and its functions' memory) loses no answered version; pipelined PUTs upload
together. Without it the same PUT is answered while its upload still waits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

MiB = 1 << 20


@pytest.mark.parametrize("durable", [True, False])
def test_an_answered_put_is_in_cos_only_with_durable_puts(durable: bool) -> None:
    with LocalStore(upload_delay_s=5.0, parity_upload_delay_s=5.0, durable_puts=durable, idle_s=1.0) as st, \
            StoreClient(st.address, st.token, codec=Codec(4, 2)) as c:
        coded, small = os.urandom(2 * MiB + 3), b"s" * 5000
        c.put("coded", coded)
        results = c.put_many([("a", b"a" * 3000, None), ("b", b"b" * 70_000, None)])   # pipelined
        assert all(not isinstance(r, Exception) for r in results)
        c.put("small", small)
        in_cos = [st.daemon.cos_copy(k) is not None for k in ("coded", "a", "b", "small")]
        assert in_cos == [durable] * 4
        assert (st.daemon.stats()["pending_uploads"] == 0) == durable
        assert c.get("coded") == coded and c.get("small") == small
        if durable:     # what a replacement restores: the table names each copy
            table = Path(st.daemon.buffer_dir, "_table.log").read_bytes()
            assert all(k.encode() in table for k in ("coded", "a", "b", "small"))
