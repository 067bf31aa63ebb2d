"""Wire framing of ``storage_functions.protocol`` without a network: header
layout, key/meta/payload order, partial reads, multi-piece sends, errors."""

from __future__ import annotations

import struct

import pytest

from storage_functions.exceptions import ChunkCorrupt, ProtocolError, StoreError, UnknownKey
from storage_functions.protocol import (HEADER, HEADER_SIZE, HELLO_LIMIT, Op, Status, drain, error_for, frame_bytes,
                                        pack_header, recv_exact, recv_frame, send_frame, sendmsg_all, status_for)


class FakeSock:
    """A byte stream double: reads hand out at most ``step`` bytes per call,
    writes accept at most ``step`` bytes per ``sendmsg``."""

    def __init__(self, data: bytes = b"", step: int = 7) -> None:
        self.data = bytearray(data)
        self.pos = 0
        self.step = step
        self.out = bytearray()
        self.calls = 0

    def recv_into(self, view: memoryview, n: int = 0) -> int:
        n = min(n or len(view), len(view), self.step, len(self.data) - self.pos)
        view[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n

    def sendmsg(self, views: list[memoryview]) -> int:
        self.calls += 1
        left = self.step
        for v in views:
            take = min(left, len(v))
            self.out += v[:take]
            left -= take
            if not left:
                break
        return self.step - left

    def sendall(self, data: bytes) -> None:
        self.calls += 1
        self.out += data


def test_header_is_40_bytes_big_endian() -> None:
    assert HEADER_SIZE == 40
    raw = pack_header(Op.PUT, status=2, reqid=7, key=b"k", meta=b"{}", crc=0xDEADBEEF, a=1 << 40, b=3, paylen=9)
    assert raw[:4] == bytes([Op.PUT, 2]) + struct.pack("!H", 1)
    assert HEADER.unpack_from(raw) == (Op.PUT, 2, 1, 7, 2, 0xDEADBEEF, 1 << 40, 3, 9)
    assert raw[40:] == b"k{}"


@pytest.mark.parametrize("step", [1, 3, 40, 1 << 20])
def test_frame_round_trip_with_partial_reads(step: int) -> None:
    out = FakeSock(step=5)
    send_frame(out, Op.STRIPE, reqid=42, key="ключ/1", meta={"d": 4, "crcs": [1, 2]}, crc=5, a=6, b=7,
               payload=[b"abc", bytearray(b"de"), memoryview(b"fgh")])
    inp = FakeSock(bytes(out.out) + frame_bytes(Op.END, reqid=42), step=step)
    f = recv_frame(inp)
    assert f is not None
    assert (f.op, f.reqid, f.key, f.meta, f.crc, f.a, f.b, f.paylen) == (Op.STRIPE, 42, "ключ/1",
                                                                         {"d": 4, "crcs": [1, 2]}, 5, 6, 7, 8)
    assert recv_exact(inp, f.paylen) == b"abcdefgh"
    end = recv_frame(inp)
    assert end is not None and end.op == Op.END and end.paylen == 0
    assert recv_frame(inp) is None  # clean EOF between frames


def test_header_only_frame_leaves_the_payload_to_the_caller() -> None:
    out = FakeSock(step=1 << 20)
    send_frame(out, Op.CHUNK, a=1, b=2, paylen=1000)
    assert len(out.out) == HEADER_SIZE and HEADER.unpack_from(out.out)[-1] == 1000


def test_sendmsg_all_resumes_after_short_writes() -> None:
    s = FakeSock(step=3)
    pieces = [b"0123456789", b"", bytearray(b"ab"), memoryview(b"xyz" * 10)[2:]]
    sendmsg_all(s, pieces)
    assert bytes(s.out) == b"0123456789ab" + (b"xyz" * 10)[2:]
    assert s.calls == -(-len(s.out) // 3)


def test_eof_mid_frame_and_bad_meta_are_errors() -> None:
    raw = frame_bytes(Op.PUT, key="k", meta={"n": 1}, payload=b"12345")
    with pytest.raises(ConnectionError):
        recv_frame(FakeSock(raw[:20]))
    f = recv_frame(FakeSock(raw[:-2]))
    assert f is not None
    with pytest.raises(ConnectionError):
        recv_exact(FakeSock(raw[:-2]), 10**6)
    bad = pack_header(Op.PUT, meta=b"{not json")
    with pytest.raises(ProtocolError, match="not JSON"):
        recv_frame(FakeSock(bad))


def test_drain_discards_exactly_n_bytes() -> None:
    s = FakeSock(b"a" * 100 + b"tail", step=9)
    drain(s, 100, bytearray(16))
    assert recv_exact(s, 4) == b"tail"


def test_status_codes_map_to_the_error_tree_both_ways() -> None:
    assert isinstance(error_for(Status.UNKNOWN_KEY, "x"), UnknownKey)
    assert isinstance(error_for(Status.CORRUPT, "x"), ChunkCorrupt)
    assert type(error_for(99, "x")) is StoreError
    assert status_for(UnknownKey("x")) == Status.UNKNOWN_KEY
    assert status_for(RuntimeError("x")) == Status.ERROR


def test_declared_lengths_over_the_limit_are_refused_before_reading_them() -> None:
    big = HEADER.pack(Op.HELLO, 0, 0, 1, 1 << 30, 0, 0, 0, 0)  # a HELLO declaring 1 GiB of meta
    sock = FakeSock(big)
    with pytest.raises(ProtocolError, match="1073741824 meta bytes, over the 4096"):
        recv_frame(sock, max_meta=HELLO_LIMIT)
    assert sock.pos == HEADER_SIZE                     # nothing past the header was read (or allocated)
    per_op = {Op.FREE: 100}
    assert recv_frame(FakeSock(frame_bytes(Op.FREE, meta={"keys": ["a"]})), max_meta=per_op) is not None
    with pytest.raises(ProtocolError, match="over the 4096"):   # ops the mapping does not name: HELLO_LIMIT
        recv_frame(FakeSock(frame_bytes(Op.GET, key="k" * 5000)), max_meta=per_op)
    with pytest.raises(ProtocolError, match="payload, over the 0"):
        recv_frame(FakeSock(frame_bytes(Op.HELLO, payload=b"x")), max_payload=0)


@pytest.mark.parametrize("raw,why", [
    (pack_header(Op.HELLO, key=b"\xff\xfe"), "key is not UTF-8"),
    (pack_header(Op.HELLO, meta=b"[1, 2]"), "meta is a JSON list, not an object"),
    (pack_header(Op.HELLO, meta=b'"token"'), "meta is a JSON str, not an object"),
])
def test_a_key_or_meta_that_cannot_be_read_is_a_protocol_error(raw: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        recv_frame(FakeSock(raw))
