"""The replies of one connection in request order while its GETs are served
at once (``storage_functions.daemon._lanes``), over a socket pair: a lane
behind the head keeps what it is handed until every lane before it has
finished, ``done`` callbacks run once their bytes were written, a new lane
waits while the ones behind the head would hold more than the byte budget,
and a dead connection releases everyone who waits."""

from __future__ import annotations

import socket
import threading

from storage_functions.daemon._lanes import Lanes
from storage_functions.daemon._outbox import Outbox
from storage_functions.protocol import recv_exact


def test_a_lane_behind_the_head_is_written_after_it_whole_and_in_order() -> None:
    ours, client = socket.socketpair()
    out = Outbox(ours)
    lanes = Lanes(out)
    first, second, third = lanes.open(10), lanes.open(10), lanes.open(10)
    assert first.head and not second.head and second.busy
    done: list[str] = []
    scratch = bytearray(b"b1")
    with second.lock:
        assert not second.send_locked([scratch], lambda: done.append("b1"))  # held, and copied: borrowed
    scratch[:] = b"XX"
    third.send_last([b"c1"])  # finished before the lanes ahead of it
    with first.lock:
        assert first.send_locked([b"a1"])  # the head writes at once
    second.send_last([b"b2"])
    assert done == []  # nothing of the second lane was written yet
    first.finish()
    assert recv_exact(client, 8) == b"a1b1b2c1"
    assert out.wait_idle(5) and done == ["b1"]
    assert lanes.idle()
    out.close()
    ours.close()
    client.close()


def test_a_new_lane_waits_while_those_behind_the_head_hold_the_budget() -> None:
    ours, client = socket.socketpair()
    out = Outbox(ours)
    lanes = Lanes(out, max_lanes=8, max_bytes=100)
    head = lanes.open(1 << 30)  # the head may be any size: it is written as it comes
    lanes.open(60).send_last([b"x"])  # behind the head: always admitted, whatever its size
    opened = threading.Event()

    def third() -> None:
        lanes.open(60).send_last([b"y"])
        opened.set()

    t = threading.Thread(target=third)
    t.start()
    assert not opened.wait(0.2)  # 60 + 60 bytes behind the head: over the budget of 100
    head.send_last([b"h"])
    assert opened.wait(5)
    t.join(5)
    assert recv_exact(client, 3) == b"hxy"
    out.close()
    ours.close()
    client.close()


def test_a_dead_connection_releases_lanes_waiting_for_room_or_their_turn() -> None:
    ours, client = socket.socketpair()
    out = Outbox(ours)
    lanes = Lanes(out, max_lanes=2)
    lanes.open(0)
    behind = lanes.open(0)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(behind.wait_head(30) and lanes.open(0) is not None))
    t.start()
    out.close()  # the client went away: nothing more is written, nobody waits for it
    t.join(5)
    assert not t.is_alive() and got == [True]
    ours.close()
    client.close()
