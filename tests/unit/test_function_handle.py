"""``FunctionHandle.attach``: an invocation's two connections may say HELLO in either order
and at once (a function dials both before awaiting either welcome); requests reach the
instance only after the first HELLO was acted on, so a GET never goes to a lost instance
before recovery has taken its chunks."""

from __future__ import annotations

import socket
import threading
from typing import Any

from storage_functions.daemon._functions import FunctionHandle
from storage_functions.protocol import Frame, Op, recv_frame


def _hello(h: FunctionHandle, kind: str, *, lost: bool) -> Frame:
    return Frame(op=Op.HELLO, status=0, reqid=0, key="", crc=0, a=0, b=0, paylen=0,
                 meta={"role": "function", "name": h.name, "secret": h.secret, "conn": kind,
                       "instance": "i-2", "term": 1, "hash": "", "diff_rank": 0, "lost": lost})


def test_requests_wait_until_the_first_hello_was_acted_on_whichever_connection_is_last() -> None:
    recovering = threading.Event()
    release = threading.Event()

    def on_lost(h: FunctionHandle) -> None:
        recovering.set()
        assert release.wait(10)

    invoked = threading.Event()
    h = FunctionHandle(0, "sion-0", invoke=lambda name, ev: invoked.set(),
                       event=lambda h, warmup: {"secret": h.secret}, invoke_timeout_s=30.0,
                       on_lost=on_lost, on_mem=lambda h, m: None)
    replies: list[Any] = []
    h.request(Op.PING, "", lambda f, s: replies.append(f))  # queued: the function is invoked
    assert invoked.wait(10) and h.state == "invoking"
    small, small_peer = socket.socketpair()
    large, large_peer = socket.socketpair()
    try:
        first = threading.Thread(target=h.attach, args=(_hello(h, "small", lost=True), small))
        first.start()
        assert recovering.wait(10)                 # the first HELLO is being acted on ...
        assert h.attach(_hello(h, "large", lost=True), large) is not None
        assert h.state == "invoking"               # ... so the second does not open the gates
        assert recv_frame(small_peer).op == Op.REPLY and recv_frame(large_peer).op == Op.REPLY
        small_peer.settimeout(0.2)
        try:
            got = recv_frame(small_peer)
        except TimeoutError:
            got = None
        assert got is None                         # the queued PING has not gone out
        release.set()
        first.join(10)
        assert h.state == "active" and h.lost_count == 1
        small_peer.settimeout(10)
        assert recv_frame(small_peer).op == Op.PING
    finally:
        release.set()
        for s in (small, small_peer, large, large_peer):
            s.close()
