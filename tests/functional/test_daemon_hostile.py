"""Hostile bytes against a live daemon (``funcsion serve daemon`` in a
subprocess, so its memory is its own): garbage after a length prefix,
lengths declared far beyond what a frame may carry (before and after
authentication), truncated frames, a slow-drip peer, tokens that are not
ASCII or not strings, allocations outside the pool. Each gets an error reply
or a closed connection, never a thread traceback nor memory it only
declared, and a normal client is served after every one of them."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._waiting import wait_for
from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.auth import mint_run_token
from storage_functions.exceptions import AuthError, ProtocolError, StoreError
from storage_functions.protocol import HEADER, Op, Status, frame_bytes, pack_header, recv_exact, recv_frame

REPO = Path(__file__).resolve().parents[2]
HELLO_TIMEOUT_S = 1.0
MiB = 1 << 20


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    addr: tuple[str, int]
    token: str
    stderr: Path

    def rss(self) -> int:
        """The daemon's resident memory in bytes (VmRSS)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("hostile")
    err = root / "daemon.stderr"
    with open(err, "wb") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sdk.cli", "serve", "daemon", "--json", "--port", "0", "--root", str(root / "store"),
             "--function-memory-mb", "256", "--group-size", "3", "--max-functions", "6", "--idle-s", "1",
             "--hello-timeout-s", str(HELLO_TIMEOUT_S)],
            stdout=subprocess.PIPE, stderr=errf, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)})  # this checkout's daemon
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the daemon did not print its address within 30 s"
        info = json.loads(proc.stdout.readline())
        host, _, port = info["address"].rpartition(":")
        yield Daemon(proc, (host, int(port)), info["token"], err)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def connect(d: Daemon) -> socket.socket:
    return socket.create_connection(d.addr, timeout=5)


def header(op: int, *, keylen: int = 0, metalen: int = 0, paylen: int = 0) -> bytes:
    return HEADER.pack(op, 0, keylen, 1, metalen, 0, 0, 0, paylen)


def reply(sock: socket.socket) -> tuple[int, str]:
    """(status, message) of the daemon's next reply."""
    f = recv_frame(sock)
    assert f is not None, "the daemon closed the connection without a reply"
    return f.status, recv_exact(sock, f.paylen).decode(errors="replace")


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Does the daemon close the connection within ``seconds`` (reading and dropping what it sends)?"""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def authed(d: Daemon) -> socket.socket:
    sock = connect(d)
    sock.sendall(frame_bytes(Op.HELLO, meta={"role": "client", "token": d.token}))
    assert reply(sock) == (Status.OK, "")
    return sock


def assert_served(d: Daemon) -> None:
    """A normal client (store token and run token) still puts and gets."""
    data = os.urandom(50_000)
    with StoreClient(d.addr, d.token, codec=Codec(2, 1), timeout=30) as c:
        c.put("ok/x", data)
        assert c.get("ok/x") == data
    with StoreClient(d.addr, mint_run_token(d.token, "ok"), codec=Codec(2, 1), timeout=30) as c:
        assert c.get("ok/x") == data


@pytest.mark.parametrize("raw", [
    header(Op.HELLO, metalen=64) + b"\x00not json at all" + bytes(48),          # garbage meta
    header(Op.HELLO, keylen=4) + b"\xff\xfe\xfd\xfc",                            # a key that is not UTF-8
    header(Op.HELLO, metalen=2) + b"[]",                                         # meta that is no object
    b"\xff" * 40,                                                                # a header of all ones
    frame_bytes(Op.GET, key="r/x"),                                              # not a HELLO first
    header(Op.HELLO, paylen=10) + bytes(10),                                     # a HELLO with a payload
    frame_bytes(Op.HELLO, meta={"role": "admin", "token": "t"}),                 # no such role
], ids=["garbage-meta", "key-not-utf8", "meta-not-object", "all-ones", "not-hello", "hello-payload", "bad-role"])
def test_malformed_hellos_get_an_error_reply_and_a_closed_connection(daemon: Daemon, raw: bytes) -> None:
    with connect(daemon) as sock:
        sock.sendall(raw)
        status, message = reply(sock)
        assert status == Status.PROTOCOL and message
        assert closed_within(sock, 5)
    assert_served(daemon)


def test_declared_lengths_allocate_nothing(daemon: Daemon) -> None:
    assert_served(daemon)
    before = daemon.rss()
    for _ in range(3):  # a HELLO declaring 1 GiB of meta, three times
        with connect(daemon) as sock:
            sock.sendall(header(Op.HELLO, metalen=1 << 30))
            status, message = reply(sock)
            assert status == Status.PROTOCOL and "over the 4096" in message
            assert closed_within(sock, 5)
    # after authentication too: every declared length is bounded by its frame type
    for raw in (header(Op.GET, keylen=3, metalen=1 << 30),              # meta a GET cannot carry
                header(Op.FREE, metalen=(1 << 32) - 1),                 # more keys than any FREE
                header(Op.GET, keylen=3, paylen=1 << 40) + b"r/x",      # a GET carries no payload
                frame_bytes(Op.PUT, key="r/x", meta={"n": 1, "size": 10})      # a stripe over its PUT's size
                + pack_header(Op.STRIPE, meta=b'{"d":1,"crcs":[0]}', paylen=1 << 40)):
        with authed(daemon) as sock:
            sock.sendall(raw)
            status, _ = reply(sock)
            assert status == Status.PROTOCOL
            assert closed_within(sock, 5)
    grown = daemon.rss() - before
    print(f"daemon RSS {before / MiB:.1f} MiB, grew by {grown / MiB:.2f} MiB over 7 oversized declarations")
    assert grown < 8 * MiB, f"the daemon's RSS grew by {grown / MiB:.1f} MiB"
    assert_served(daemon)


@pytest.mark.parametrize("raw,auth", [
    (header(Op.HELLO, metalen=40)[:20], False),                                     # half a header
    (header(Op.HELLO, metalen=100) + b'{"role": "cli', False),                      # meta cut short
    (frame_bytes(Op.PUT, key="r/x", meta={"n": 1, "size": 10})
     + frame_bytes(Op.STRIPE, meta={"d": 1, "crcs": [0]}, payload=b"0123456789")[:-7], True),  # payload cut
    (frame_bytes(Op.PUT, key="r/x", meta={"n": 2, "size": 10})[:-3], True),         # PUT meta cut short
], ids=["header", "hello-meta", "stripe-payload", "put-meta"])
def test_truncated_frames_end_only_their_connection(daemon: Daemon, raw: bytes, auth: bool) -> None:
    sock = authed(daemon) if auth else connect(daemon)
    with sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        assert closed_within(sock, 5)
    assert_served(daemon)


def test_a_slow_drip_peer_is_closed_after_the_hello_deadline(daemon: Daemon) -> None:
    raw = frame_bytes(Op.HELLO, meta={"role": "client", "token": daemon.token})
    with connect(daemon) as sock:
        t0 = time.monotonic()
        sent = 0
        while sent < len(raw):
            sock.sendall(raw[sent:sent + 1])
            sent += 1
            readable, _, _ = select.select([sock], [], [], 0.1)  # paces the drip; readable = the daemon acted
            if readable:
                break
        assert closed_within(sock, 5)
        took = time.monotonic() - t0
    assert sent < len(raw), "the drip finished before the daemon gave up on it"
    assert HELLO_TIMEOUT_S * 0.9 <= took < HELLO_TIMEOUT_S + 3
    assert_served(daemon)


@pytest.mark.parametrize("token", ["tökén-✓", "\ud800", "\x00", 12345, None, ["a"], {"t": 1}],
                         ids=["non-ascii", "lone-surrogate", "nul", "int", "null", "list", "object"])
def test_tokens_that_are_not_ascii_or_not_strings_are_unauthorized(daemon: Daemon, token: object) -> None:
    with connect(daemon) as sock:
        sock.sendall(frame_bytes(Op.HELLO, meta={"role": "client", "token": token}))
        status, message = reply(sock)
        assert status == Status.AUTH and "wrong store or run token" in message
        assert closed_within(sock, 5)
    assert_served(daemon)


def test_a_non_ascii_token_is_an_auth_error_for_the_sdk_and_functions(daemon: Daemon) -> None:
    with pytest.raises(AuthError, match="wrong store or run token"):
        StoreClient(daemon.addr, "tökén").get("ok/x")
    assert_served(daemon)  # (sion-0 exists now)
    for name, secret in (("sion-0", "sëcret"), ("sion-0", "\udfff"), (7, "s"), ("sion-0", 3)):
        with connect(daemon) as sock:
            sock.sendall(frame_bytes(Op.HELLO, meta={"role": "function", "name": name, "secret": secret,
                                                     "conn": "small", "term": "x", "mem": "lots"}))
            assert reply(sock)[0] == Status.AUTH
            assert closed_within(sock, 5)


BLOCKS = (256 - 64)  # function_memory_mb - runtime_overhead_mb, in 1 MiB blocks


@pytest.mark.parametrize("place,why", [
    ((-1, 0, 0), "function -1 is outside the pool of 6"),
    ((10 ** 6, 0, 0), "function 1000000 is outside the pool"),
    (("sion-6", 0, 0), "function 6 is outside the pool"),
    ((0, -1, 0), "block -1"),
    ((0, BLOCKS, 0), f"outside function 0's {BLOCKS} blocks"),
    ((0, 10 ** 12, 0), "block 1000000000000"),
    ((0, BLOCKS - 1, MiB - 10), f"outside function 0's {BLOCKS} blocks"),   # runs past the last block
    ((0, 0, -5), "offset -5 is outside a block"),
    ((0, 0, MiB), f"offset {MiB} is outside a block"),
])
def test_allocations_outside_the_pool_are_refused(daemon: Daemon, place: tuple[object, int, int], why: str) -> None:
    with StoreClient(daemon.addr, daemon.token, codec=Codec(2, 1), timeout=30) as c:
        with pytest.raises(StoreError, match="(the allocation cannot be used|no room where the metadata server placed it): .*" + re.escape(why)):
            c.put("alloc/x", b"y" * 100, alloc=[(*place, 100)])  # type: ignore[list-item]
        c.put("alloc/x", b"z" * 100, alloc=[(1, BLOCKS - 1, 0, 100)])  # the last block is fine; same connection
        assert c.get("alloc/x") == b"z" * 100
        c.delete("alloc/x")


def test_malformed_allocations_and_stripes_are_protocol_errors(daemon: Daemon) -> None:
    for meta, stripe in (({"n": 1, "size": 3, "alloc": [["sion-0", "a", 0, 3]]}, {"d": 1, "crcs": [0]}),
                         ({"n": 1, "size": 3, "alloc": [[0, 0, 0, 3], [1, 0, 0, 3]]}, {"d": 1, "crcs": [0]}),
                         ({"n": 1, "size": 3, "alloc": [[0, 0, 0]]}, {"d": 1, "crcs": [0]}),
                         ({"n": 1, "size": 3}, {"d": 0, "crcs": [0]}),
                         ({"n": 1, "size": 3}, {"d": 1, "crcs": ["x"]}),
                         ({"n": "1", "size": 3}, {"d": 1, "crcs": [0]}),
                         ({"n": 9, "size": 3}, {"d": 1, "crcs": [0]})):
        with authed(daemon) as sock:
            sock.sendall(frame_bytes(Op.PUT, key="m/x", meta=meta)
                         + frame_bytes(Op.STRIPE, meta=stripe, payload=b"abc"))
            status, message = reply(sock)
            assert status == Status.PROTOCOL and "PUT 'm/x'" in message, message
            assert closed_within(sock, 5)
    with pytest.raises(ProtocolError):
        with StoreClient(daemon.addr, daemon.token) as c:
            c.put("m/x", b"abc", alloc=[("sion-0", None, 0, 3)])  # type: ignore[list-item]
    assert_served(daemon)


def test_idle_unauthenticated_connections_hold_no_thread_and_close_at_the_deadline(daemon: Daemon) -> None:
    """200 connections that never say HELLO: one thread of the daemon reads every pending
    HELLO, so its thread count stays where it was (it was one thread per connection); an
    authenticated client is served meanwhile; each idle one is closed at the deadline."""
    def threads() -> int:
        for line in Path(f"/proc/{daemon.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no Threads")

    def stats() -> dict[str, int]:
        with StoreClient(daemon.addr, daemon.token) as c:
            return c.stats()

    assert_served(daemon)  # the threads a PUT and GET start (functions, uploaders) exist already
    before, timeouts = threads(), stats()["hello_timeouts"]
    t0 = time.monotonic()
    idle = [connect(daemon) for _ in range(200)]
    try:
        wait_for(lambda: stats()["hello_pending"] >= 200, 10, "the daemon to take the 200 connections")
        during = threads()
        assert during <= before + 4, f"{during - before} more threads for 200 idle connections"
        assert_served(daemon)
        assert all(closed_within(s, HELLO_TIMEOUT_S + 5) for s in idle)
        took = time.monotonic() - t0
    finally:
        for s in idle:
            s.close()
    assert took >= HELLO_TIMEOUT_S * 0.9
    st = stats()
    assert st["hello_timeouts"] >= timeouts + 200 and st["hello_pending"] == 0 and st["hello_evicted"] == 0


def test_nothing_crashed_and_every_refusal_was_counted(daemon: Daemon) -> None:
    assert_served(daemon)
    assert daemon.proc.poll() is None
    with StoreClient(daemon.addr, daemon.token) as c:
        st = c.stats()
    assert st["bad_frames"] >= 10 and st["hello_timeouts"] >= 1 and st["auth_failures"] >= 7
    assert st["conn_errors"] == 0
    log = daemon.stderr.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
