"""PUTs pipelined on one connection (``put_many``, or any client that sends
its next request before reading a reply): the daemon sends each PUT's chunks
on without waiting for its functions' replies while the next request is
already there (at most ``PUT_WINDOW``), and answers in request order -- a
refused PUT's error in its turn, a GET after the PUTs after their replies,
and the PUTs of a peer that hangs up still become readable."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from sdk._stream import FrameReader, read_head
from storage_functions.daemon import LocalStore
from storage_functions.daemon import _session
from storage_functions.exceptions import UnknownKey
from storage_functions.protocol import Op, Status, send_frame
from tests._waiting import wait_for

MiB = 1 << 20


@pytest.fixture(scope="module")
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, group_size=6, max_functions=12, idle_s=30.0,
                    max_object_bytes=4 * MiB) as st:
        yield st


def test_pipelined_puts_overlap_and_are_answered_in_order(store: LocalStore, monkeypatch: Any) -> None:
    deepest = [0]
    finish = _session.ClientSession._finish_puts

    def spy(self: Any, **kw: Any) -> None:
        deepest[0] = max(deepest[0], len(self._puts))
        finish(self, **kw)

    monkeypatch.setattr(_session.ClientSession, "_finish_puts", spy)
    values = {f"pp/{i}": os.urandom(3000 + i if i % 4 else MiB + i) for i in range(40)}
    with StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        sock = c._borrow()
        try:
            for k, v in values.items():  # everything goes out before a reply is read
                c._send_put(sock, k, c.codec.stripes(v), len(v), None)
            too_big = os.urandom(4 * MiB + 1)
            c._send_put(sock, "pp/too-big", c.codec.stripes(too_big), len(too_big), None)
            c._send_put(sock, "pp/after", c.codec.stripes(b"after"), 5, None)
            send_frame(sock, Op.GET, key="pp/0")
            rd = FrameReader(sock, pipelined=True)
            for _ in values:
                f = rd.frame()
                assert f.op == Op.REPLY and f.status == Status.OK and int(f.meta["version"]) == 1
            refused = rd.frame()  # the refused PUT's error, in its turn
            assert refused.status == Status.TOO_LARGE and b"maximum" in rd.read(refused.paylen)
            assert rd.frame().status == Status.OK  # pp/after
            head, infos = read_head(rd)  # the GET, after every PUT before it
            assert bytes(c._receive(rd, "pp/0", head, infos, None)[0]) == values["pp/0"]
        finally:
            sock.close()
        assert deepest[0] > 1  # the functions had several PUTs at once
        for k, v in values.items():
            assert c.get(k) == v
        assert c.get("pp/after") == b"after"
        with pytest.raises(UnknownKey):
            c.get("pp/too-big")


def test_puts_of_a_peer_that_hangs_up_still_become_readable(store: LocalStore) -> None:
    values = {f"gone/{i}": os.urandom(2000 + i) for i in range(20)}
    with StoreClient(store.address, store.token, codec=Codec(4, 2)) as c:
        sock = c._borrow()
        for k, v in values.items():
            c._send_put(sock, k, c.codec.stripes(v), len(v), None)
        sock.close()  # no reply read
        def readable() -> bool:  # the daemon finishes what it read; a later client sees every version
            got = [store.daemon.table.latest(k) for k in values]
            return all(o is not None and o.state == "ready" for o in got)

        wait_for(readable, what="the pipelined PUTs of a closed connection to become readable")
        for k, v in values.items():
            assert c.get(k) == v
