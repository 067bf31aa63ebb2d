"""The daemon's per-client outbox over a socket pair: a hand-over never blocks
on a client that does not read, bytes arrive whole and in order, borrowed
buffers are copied only when they have to queue, ``done`` runs once the
bytes were written, and closing drops the rest without hanging."""

from __future__ import annotations

import os
import socket
import threading
import time

from storage_functions.daemon._outbox import BufferPool, Outbox
from storage_functions.protocol import recv_exact

KiB = 1 << 10


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * KiB)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
    return a, b


def test_hand_overs_never_block_and_arrive_in_order() -> None:
    ours, client = _pair()
    out = Outbox(ours)
    pieces = [os.urandom(100 * KiB + n) for n in range(20)]  # far more than the socket buffers hold
    done: list[int] = []
    scratch = bytearray(200 * KiB)
    slowest = 0.0
    for n, p in enumerate(pieces):
        view = memoryview(scratch)[:len(p)]
        view[:] = p
        t = time.perf_counter()
        with out.lock:
            if out.send_locked([b"hdr", view], lambda n=n: done.append(n), copy=True):
                done.append(n)
        slowest = max(slowest, time.perf_counter() - t)
        view[:] = bytes(len(p))  # the borrowed buffer is reused at once: what queued was a copy
    assert out.busy and out.queued_bytes > 0 and slowest < 0.5
    expect = b"".join(b"hdr" + p for p in pieces)
    got = recv_exact(client, len(expect))
    assert got == expect
    assert out.wait_idle(5)
    assert done == list(range(len(pieces)))
    assert out.queued_bytes == 0 and not out.busy
    with out.lock:
        assert out.send_locked([b"fast"])  # nothing queued: written at once again
    assert recv_exact(client, 4) == b"fast"
    out.close()
    ours.close()
    client.close()


def test_close_with_a_stalled_reader_drops_the_queue() -> None:
    ours, client = _pair()
    out = Outbox(ours)
    big = os.urandom(512 * KiB)
    for _ in range(4):
        out.send([big], copy=False)
    assert out.busy
    t = time.perf_counter()
    out.close()  # the writer is blocked on the client: it is released, not waited for
    assert time.perf_counter() - t < 2 and out.dead
    with out.lock:
        assert not out.send_locked([b"late"])
    ours.close()
    client.close()


def test_a_client_gone_marks_the_outbox_dead() -> None:
    ours, client = _pair()
    out = Outbox(ours)
    out.send([os.urandom(512 * KiB)], copy=False)
    client.close()
    deadline = time.monotonic() + 5
    while not out.dead and time.monotonic() < deadline:
        out.send([b"x" * 1024])
        time.sleep(0.01)
    assert out.dead and out.queued_bytes == 0
    out.close()
    ours.close()


def test_pool_reuses_rounded_buffers() -> None:
    pool = BufferPool(max_bytes=256 * KiB, grain=64 * KiB)
    buf, view = pool.take(100 * KiB)
    assert len(buf) == 128 * KiB and len(view) == 100 * KiB
    pool.give(buf)
    again, _ = pool.take(120 * KiB)
    assert again is buf
    pool.give(again)
    pool.give(bytearray(192 * KiB))  # over max_bytes with the first one kept: dropped
    assert pool.take(192 * KiB)[0] is not None
    threads = [threading.Thread(target=lambda: pool.give(pool.take(64 * KiB)[0])) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(5)
