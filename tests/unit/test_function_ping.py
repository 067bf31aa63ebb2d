"""``FunctionHandle``'s PING revalidation over socket pairs: a request to an instance silent
for ``ping_idle_s`` waits for a PING's answer; the PONG sends it, no PONG within
``ping_timeout_s`` takes the instance as gone (its connections closed, the function silent
and invoked again), fails the held requests at once and keeps a held DEL for the next
instance; an instance heard lately is not pinged."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from storage_functions.daemon._functions import FunctionHandle
from storage_functions.protocol import Frame, Op, recv_frame, send_frame

PING_TIMEOUT_S = 0.2


@dataclass
class _Active:
    h: FunctionHandle
    small_peer: socket.socket
    large_peer: socket.socket
    invoked: threading.Semaphore
    verdicts: list[bool | None] = field(default_factory=list)
    gone: list[str | None] = field(default_factory=list)


def _hello(h: FunctionHandle, kind: str) -> Frame:
    return Frame(op=Op.HELLO, status=0, reqid=0, key="", crc=0, a=0, b=0, paylen=0,
                 meta={"role": "function", "name": h.name, "secret": h.secret, "conn": kind,
                       "instance": "i-1", "term": 1, "hash": "", "diff_rank": 0, "lost": False})


def _recv(peer: socket.socket) -> Frame:
    f = recv_frame(peer)
    assert f is not None, "the connection closed"
    return f


def _into(replies: list[Frame | None], ev: threading.Event) -> Callable[[Frame | None, socket.socket | None], None]:
    """A reply callback that keeps the frame and sets ``ev``."""
    def cb(f: Frame | None, s: socket.socket | None) -> None:
        replies.append(f)
        ev.set()
    return cb


@pytest.fixture
def active() -> Iterator[_Active]:
    """A handle with an active instance on two socket pairs, its small connection served, its
    connections last heard from long ago."""
    invoked = threading.Semaphore(0)
    box: dict[str, _Active] = {}
    h = FunctionHandle(0, "sion-0", invoke=lambda name, ev: invoked.release(),
                       event=lambda h, warmup: {"secret": h.secret}, invoke_timeout_s=30.0,
                       on_lost=lambda h: None, on_mem=lambda h, m: None,
                       on_instance_gone=lambda h: box["a"].gone.append(h.instance),
                       ping_idle_s=1.0, ping_timeout_s=PING_TIMEOUT_S,
                       on_ping=lambda h, ok: box["a"].verdicts.append(ok))
    h.warm()
    assert invoked.acquire(timeout=10)
    small, small_peer = socket.socketpair()
    large, large_peer = socket.socketpair()
    a = box["a"] = _Active(h, small_peer, large_peer, invoked)
    try:
        h.attach(_hello(h, "small"), small)
        h.attach(_hello(h, "large"), large)
        assert h.state == "active"
        for peer in (small_peer, large_peer):
            peer.settimeout(10)
            assert _recv(peer).op == Op.REPLY  # the welcomes
        threading.Thread(target=h.serve, args=(h.conns["small"],), daemon=True).start()
        threading.Thread(target=h.serve, args=(h.conns["large"],), daemon=True).start()
        h.last_heard = time.monotonic() - 10.0  # silent for longer than ping_idle_s
        yield a
    finally:
        h.close()
        for s in (small, small_peer, large, large_peer):
            s.close()


def test_the_pong_sends_the_held_requests(active: _Active) -> None:
    h, peer = active.h, active.small_peer
    replies: list[Frame | None] = []
    done = threading.Event()
    h.request(Op.GET, "k1", _into(replies, done))
    h.request(Op.STAT, "k2", lambda f, s: replies.append(f))  # queued behind the PING
    ping = _recv(peer)
    assert ping.op == Op.PING and h.pings == 1 and active.verdicts == [None]
    peer.settimeout(0.1)
    with pytest.raises(TimeoutError):
        _recv(peer)  # nothing but the PING until it is answered
    peer.settimeout(10)
    send_frame(peer, Op.PONG, reqid=ping.reqid)
    got = [_recv(peer) for _ in range(2)]
    assert [(f.op, f.key) for f in got] == [(Op.GET, "k1"), (Op.STAT, "k2")]
    send_frame(peer, Op.REPLY, reqid=got[0].reqid)
    assert done.wait(10) and replies[0] is not None
    assert active.verdicts == [None, True] and h.pings_failed == 0 and h.state == "active"


def test_no_pong_takes_the_instance_as_gone_and_fails_the_held_requests_at_once(active: _Active) -> None:
    h, peer = active.h, active.small_peer
    failed = threading.Event()
    replies: list[Frame | None] = []
    t = time.monotonic()
    h.request(Op.GET, "k1", _into(replies, failed))
    h.delete(["k0"])  # not held: a DEL goes out as it comes
    h.request(Op.DEL, "", lambda f, s: None, meta={"keys": ["k2"]})  # held: kept for the next instance
    assert _recv(peer).op == Op.PING  # ... and never answered (the instance is frozen)
    assert failed.wait(10)
    assert time.monotonic() - t < PING_TIMEOUT_S + 2.0
    assert replies == [None] and h.pings_failed == 1 and active.verdicts == [None, False]
    assert h.silent and active.gone == ["i-1"]
    assert active.invoked.acquire(timeout=10)  # invoked again
    assert h.state == "invoking" and "k2" in h.pending_deletes
    # the next instance's HELLO ends the silence
    small, small_peer = socket.socketpair()
    try:
        h.attach(_hello(h, "small"), small)
        assert not h.silent
    finally:
        small.close()
        small_peer.close()


def test_an_instance_heard_lately_is_not_pinged(active: _Active) -> None:
    h, peer = active.h, active.small_peer
    h.last_heard = time.monotonic()
    h.request(Op.GET, "k1", lambda f, s: None)
    assert _recv(peer).op == Op.GET and h.pings == 0 and active.verdicts == []


def test_a_streamed_put_to_an_instance_that_misses_its_ping_fails_at_once(active: _Active) -> None:
    h, peer = active.h, active.small_peer
    errors: list[BaseException] = []

    def put() -> None:
        try:
            h.request_put_stream("k", 0, 0, 0, 3, None, lambda f, s: None, large=False, payload=b"abc")
        except TimeoutError as exc:
            errors.append(exc)

    worker = threading.Thread(target=put)
    worker.start()
    assert _recv(peer).op == Op.PING
    worker.join(10)
    assert not worker.is_alive() and len(errors) == 1 and "did not answer a PING" in str(errors[0])
    assert h.pings_failed == 1


def test_a_bye_while_a_ping_is_out_is_refused(active: _Active) -> None:
    """The instance's BYE crossed the request: it is told to stay (its PONG sends the request)."""
    h, peer = active.h, active.small_peer
    h.request(Op.GET, "k1", lambda f, s: None)
    ping = _recv(peer)
    assert ping.op == Op.PING
    send_frame(peer, Op.BYE, meta={"term": 1, "hash": "", "diff_rank": 0, "mem": 0})
    assert _recv(peer).op == Op.BYE_NACK and h.state == "active"
    send_frame(peer, Op.PONG, reqid=ping.reqid)
    assert _recv(peer).op == Op.GET and h.pings_failed == 0
