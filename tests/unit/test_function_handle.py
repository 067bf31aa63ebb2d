"""``FunctionHandle.attach``: an invocation's two connections may say HELLO in either order
and at once (a function dials both before awaiting either welcome); requests reach the
instance only after the first HELLO was acted on, so a GET never goes to a lost instance
before recovery has taken its chunks."""

from __future__ import annotations

import socket
import threading
from typing import Any

from storage_functions.daemon._functions import FunctionHandle
from storage_functions.protocol import Frame, Op, Status, recv_frame, send_frame


def _hello(h: FunctionHandle, kind: str, *, lost: bool) -> Frame:
    return Frame(op=Op.HELLO, status=0, reqid=0, key="", crc=0, a=0, b=0, paylen=0,
                 meta={"role": "function", "name": h.name, "secret": h.secret, "conn": kind,
                       "instance": "i-2", "term": 1, "hash": "", "diff_rank": 0, "lost": lost})


def _handle_in_recovery() -> tuple[FunctionHandle, threading.Event, threading.Event, threading.Event]:
    """A handle whose lost-instance hook (recovery taking the chunks) signals ``recovering``
    and holds its HELLO's thread until ``release``; and ``invoked``, set when it is invoked."""
    recovering, release, invoked = threading.Event(), threading.Event(), threading.Event()

    def on_lost(h: FunctionHandle) -> None:
        recovering.set()
        assert release.wait(10)

    h = FunctionHandle(0, "sion-0", invoke=lambda name, ev: invoked.set(),
                       event=lambda h, warmup: {"secret": h.secret}, invoke_timeout_s=30.0,
                       on_lost=on_lost, on_mem=lambda h, m: None)
    return h, recovering, release, invoked


def test_requests_wait_until_the_first_hello_was_acted_on_whichever_connection_is_last() -> None:
    h, recovering, release, invoked = _handle_in_recovery()
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


class _SlowWelcome:
    """A socket whose first send waits until ``go`` is set: the HELLO thread that registered
    this connection is descheduled before its welcome goes out."""

    def __init__(self, sock: socket.socket, started: threading.Event, go: threading.Event) -> None:
        self._sock, self._started, self._go, self._first = sock, started, go, True

    def sendall(self, data: Any) -> None:
        if self._first:
            self._first = False
            self._started.set()
            assert self._go.wait(10)
        self._sock.sendall(data)

    def sendmsg(self, buffers: Any) -> int:
        self.sendall(b"".join(bytes(b) for b in buffers))
        return sum(len(memoryview(b).cast("B")) for b in buffers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def test_no_request_goes_out_on_a_connection_before_its_welcome() -> None:
    """The first HELLO (small) is being acted on when the second (large) registers its
    connection, whose thread is then descheduled before it sends the welcome; the first then
    opens the handle and sends the backlog on the large connection. The request must still
    follow that welcome (before, it went first: the function read the request as its welcome
    and the payload as frames, and served nothing until its idle time was up, a 2 s PUT)."""
    h, recovering, release, invoked = _handle_in_recovery()
    h.request(Op.PING, "", lambda f, s: None, large=True)  # queued for the large connection
    assert invoked.wait(10)
    small, small_peer = socket.socketpair()
    large, large_peer = socket.socketpair()
    started, go = threading.Event(), threading.Event()
    try:
        first = threading.Thread(target=h.attach, args=(_hello(h, "small", lost=True), small))
        first.start()
        assert recovering.wait(10)                 # the first HELLO is being acted on
        second = threading.Thread(target=h.attach, args=(_hello(h, "large", lost=True),
                                                          _SlowWelcome(large, started, go)))
        second.start()
        assert started.wait(10)                    # the large one registered, its welcome not out
        release.set()                              # the first opens the handle: the PING is due
        first.join(0.3)
        go.set()
        first.join(10)
        second.join(10)
        assert h.state == "active"
        large_peer.settimeout(10)
        assert recv_frame(large_peer).op == Op.REPLY   # the welcome first
        assert recv_frame(large_peer).op == Op.PING
    finally:
        release.set()
        go.set()
        for s in (small, small_peer, large, large_peer):
            s.close()


def test_an_instance_that_dies_is_forgotten_before_its_requests_are_failed() -> None:
    """A PUT whose reply callback retries at once (``_put``'s armed completion) must reach a new
    instance: when the callbacks of a dead connection run, the handle no longer offers it."""
    invocations: list[str] = []
    invoked = threading.Event()

    def invoke(name: str, ev: Any) -> None:
        invocations.append(name)
        invoked.set()

    h = FunctionHandle(0, "sion-0", invoke=invoke, event=lambda h, warmup: {"secret": h.secret},
                       invoke_timeout_s=30.0, on_lost=lambda h: None, on_mem=lambda h, m: None)
    h.request(Op.PING, "", lambda f, s: None)  # queued: the function is invoked
    assert invoked.wait(10)
    invoked.clear()
    small, small_peer = socket.socketpair()
    large, large_peer = socket.socketpair()
    seen: list[tuple[str, bool]] = []
    retried: list[Frame | None] = []

    def on_reply(f: Frame | None, s: Any) -> None:
        seen.append((h.state, "small" in h.conns))
        h.request(Op.PING, "", lambda f2, s2: retried.append(f2))  # the retry
    try:
        h.attach(_hello(h, "small", lost=False), small)
        h.attach(_hello(h, "large", lost=False), large)
        assert h.state == "active"
        for peer in (small_peer, large_peer):
            assert recv_frame(peer).op == Op.REPLY  # the welcomes
        assert recv_frame(small_peer).op == Op.PING  # the queued PING went out
        h.request(Op.PUT, "k", on_reply)
        assert recv_frame(small_peer).op == Op.PUT
        reader = threading.Thread(target=h.serve, args=(h.conns["small"],))
        reader.start()
        small_peer.close()  # the instance dies with the PUT unanswered
        reader.join(10)
        assert seen == [("sleeping", False)]  # the dead connection was no longer offered ...
        assert invoked.wait(10) and not retried  # ... so the retry waits for a new instance
        assert h.last_died > 0
    finally:
        for s in (small, large, large_peer):
            s.close()


def test_an_error_replys_message_is_read_whatever_its_callback_does() -> None:
    """A callback that never reads its reply's payload (a prefetch's did not) must not leave an
    error's message to be read as the next frame: the reader takes it, the callback sees
    ``paylen`` 0, and the next reply on the connection reaches its own callback."""
    invoked = threading.Event()
    h = FunctionHandle(0, "sion-0", invoke=lambda name, ev: invoked.set(), event=lambda h, warmup: {"secret": h.secret},
                       invoke_timeout_s=30.0, on_lost=lambda h: None, on_mem=lambda h, m: None)
    small, small_peer = socket.socketpair()
    large, large_peer = socket.socketpair()
    got: list[Frame | None] = []
    second = threading.Event()
    try:
        h.request(Op.GET, "k1", lambda f, s: got.append(f))  # queued (the function is invoked); never reads a payload
        assert invoked.wait(10)
        h.attach(_hello(h, "small", lost=False), small)
        h.attach(_hello(h, "large", lost=False), large)
        assert h.state == "active"
        for peer in (small_peer, large_peer):
            assert recv_frame(peer).op == Op.REPLY  # the welcomes
        h.request(Op.GET, "k2", lambda f, s: (got.append(f), second.set()))
        first, nxt = recv_frame(small_peer), recv_frame(small_peer)
        reader = threading.Thread(target=h.serve, args=(h.conns["small"],), daemon=True)
        reader.start()
        send_frame(small_peer, Op.REPLY, status=Status.NOT_FOUND, reqid=first.reqid,
                   payload=b"1/0/1/hot: COSNotFound('no key sion/obj')")
        send_frame(small_peer, Op.REPLY, reqid=nxt.reqid, a=7)
        assert second.wait(10)
        assert [(f.status, f.paylen) for f in got if f is not None] == [(Status.NOT_FOUND, 0), (Status.OK, 0)]
        assert h.state == "active" and "small" in h.conns  # the connection stayed in step
    finally:
        for s in (small, small_peer, large, large_peer):
            s.close()
