"""The daemon's HELLO gate (``_hello.HelloGate``) on real sockets: one thread reads the
HELLOs of every pending connection, hands a connection on only with its whole HELLO
(read in pieces, nothing past it), refuses a malformed one with an error reply, closes
one past the deadline, and past ``max_pending`` closes the oldest."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from storage_functions.protocol import HEADER, Frame, Op, Status, frame_bytes, recv_exact, recv_frame
from storage_functions.daemon._hello import HelloGate


class _Gate:
    """A gate whose ``on_hello`` records (socket, frame) and whose counters are a Counter."""

    def __init__(self, *, timeout_s: float = 5.0, max_pending: int = 8) -> None:
        self.hellos: list[tuple[socket.socket, Frame]] = []
        self.counts: Counter[str] = Counter()
        self.event = threading.Event()
        self.gate = HelloGate(self._on_hello, self._count, timeout_s=timeout_s, max_pending=max_pending)
        self.peers: list[socket.socket] = []

    def _on_hello(self, sock: socket.socket, hello: Frame) -> None:
        self.hellos.append((sock, hello))
        self.event.set()

    def _count(self, name: str) -> None:
        self.counts[name] += 1
        self.event.set()

    def connect(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        self.peers += [ours, theirs]
        self.gate.add(ours)
        return theirs

    def wait(self, what: str) -> None:
        assert self.event.wait(10), f"the gate did not act: {what}"
        self.event.clear()


@pytest.fixture
def g() -> Iterator[_Gate]:
    gate = _Gate()
    gate.gate.start()
    try:
        yield gate
    finally:
        gate.gate.stop()
        for s in gate.peers:
            s.close()


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_hello_sent_in_pieces_is_handed_on_whole_and_nothing_past_it_is_read(g: _Gate) -> None:
    peer = g.connect()
    hello = frame_bytes(Op.HELLO, reqid=3, meta={"role": "client", "token": "t"})
    after = frame_bytes(Op.PING, reqid=4)
    peer.sendall(hello[:17])  # part of the header
    peer.sendall(hello[17:45])  # the rest of it and a little of the meta
    peer.sendall(hello[45:] + after)  # the rest, and the next request at once
    g.wait("a whole HELLO")
    ((sock, frame),) = g.hellos
    assert (frame.op, frame.reqid, frame.meta) == (Op.HELLO, 3, {"role": "client", "token": "t"})
    assert g.gate.pending() == 0
    sock.settimeout(5)  # handed on blocking, with the next request still on it
    nxt = recv_frame(sock)
    assert nxt is not None and (nxt.op, nxt.reqid) == (Op.PING, 4)


def test_a_malformed_hello_gets_an_error_reply_and_the_connection_closes(g: _Gate) -> None:
    peer = g.connect()
    peer.sendall(frame_bytes(Op.GET, key="r/x"))
    g.wait("a refusal")
    f = recv_frame(peer)
    assert f is not None and f.status == Status.PROTOCOL
    assert "first frame must be HELLO" in recv_exact(peer, f.paylen).decode()
    assert _closed(peer)
    assert g.counts == Counter(bad_frames=1) and not g.hellos


def test_a_declared_meta_over_the_hello_limit_is_refused_before_it_is_read(g: _Gate) -> None:
    peer = g.connect()
    peer.sendall(HEADER.pack(Op.HELLO, 0, 0, 1, 1 << 20, 0, 0, 0, 0))  # 1 MiB of meta, declared only
    g.wait("a refusal")
    f = recv_frame(peer)
    assert f is not None and f.status == Status.PROTOCOL
    assert "over the 4096 this frame may carry" in recv_exact(peer, f.paylen).decode()
    assert _closed(peer)


def test_past_max_pending_the_oldest_is_closed() -> None:
    gate = _Gate(max_pending=2)
    gate.gate.start()
    try:
        first, second, third = gate.connect(), gate.connect(), gate.connect()  # taken in this order
        gate.wait("an eviction")
        assert _closed(first)
        assert gate.counts == Counter(hello_evicted=1)
        third.sendall(frame_bytes(Op.HELLO, meta={"role": "client"}))
        second.sendall(frame_bytes(Op.HELLO, meta={"role": "function"}))
        while len(gate.hellos) < 2:
            gate.wait("two HELLOs")
        assert sorted(f.meta["role"] for _, f in gate.hellos) == ["client", "function"]
    finally:
        gate.gate.stop()
        for s in gate.peers:
            s.close()


def test_a_connection_without_a_whole_hello_is_closed_at_the_deadline() -> None:
    gate = _Gate(timeout_s=0.3)
    gate.gate.start()
    try:
        t0 = time.monotonic()
        peer = gate.connect()
        peer.sendall(frame_bytes(Op.HELLO, meta={"role": "client"})[:30])  # never the rest
        assert _closed(peer)
        assert 0.25 <= time.monotonic() - t0 < 5
        gate.wait("a timeout")
        assert gate.counts == Counter(hello_timeouts=1) and not gate.hellos and gate.gate.pending() == 0
    finally:
        gate.gate.stop()
        for s in gate.peers:
            s.close()
