"""What the server decides from a frame's first bytes: the call's header and token, the
fault reply for a refused call, and how many bad peers get a log line."""

from __future__ import annotations

import pytest
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc import errors as E
from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server._handler import CONTROL_CALLS, RUN_CALLS
from metadata_server._frames import NEED_MORE, FrameHead, LogLimiter, fault_frame, peek_head


def sent(call: str, *args: object, strict: bool = True) -> bytes:
    """The message body a generated client sends for ``call`` (no length prefix)."""
    buf = TMemoryBuffer()
    client = Metadata.Client(TBinaryProtocol(buf, strictWrite=strict))
    getattr(client, f"send_{call}")(*args)
    return buf.getvalue()


@pytest.mark.parametrize("strict", [True, False])
def test_the_header_names_method_token_and_run(strict):
    body = sent("get_batch", "tok-\u00e9", "r-17", "F1", ["a", "b"], strict=strict)
    assert peek_head(body, 1024) == FrameHead("get_batch", 0, "tok-\u00e9", "r-17")
    assert peek_head(sent("stats", "adm"), 1024) == FrameHead("stats", 0, "adm", "")
    assert peek_head(sent("fetch_instructions", "adm", 5, 10, None, None, None), 1024) == FrameHead("fetch_instructions", 0, "adm")


def test_a_prefix_inside_the_header_needs_more():
    body = sent("lookup", "t" * 32, "r-1", "obj")
    end = len(body) - len(b"obj") - 4 - 3 - 1          # up to the end of field 2
    for n in range(end):
        assert peek_head(body[:n], 1024) == NEED_MORE, n
    assert peek_head(body[:end + 1], 1024) == FrameHead("lookup", 0, "t" * 32, "r-1")


def test_what_is_no_call_is_refused():
    assert peek_head(bytes(range(16)), 1024) is None                   # bad version
    assert peek_head(b"\x80\x01\x00\x02" + sent("stats", "a")[4:], 1024) is None   # a REPLY, not a CALL
    assert peek_head(b"\x00\x00\x10\x00" + b"x" * 8, 1024) is None       # old style, method name too long
    assert peek_head(sent("stats", "a" * 2000), 1024) is None            # a token over the limit
    wds = sent("register_workflow", "adm", "x" * 5000, {}, "src")
    assert peek_head(wds, 1024) == FrameHead("register_workflow", 0, "adm", "")   # field 2 not needed


def test_fault_frames_decode_as_the_call_s_fault():
    frame = fault_frame("get_batch", 9, E.Unauthorized("wrong token for run r-1", run_id="r-1"))
    assert frame is not None and int.from_bytes(frame[:4], "big") == len(frame) - 4
    client = Metadata.Client(TBinaryProtocol(TMemoryBuffer(frame[4:])))
    with pytest.raises(T.MetadataFault) as info:
        client.recv_get_batch()
    assert (info.value.code, info.value.message, info.value.run_id) == (E.ErrorCode.UNAUTHORIZED,
                                                                        "wrong token for run r-1", "r-1")
    assert fault_frame("health", 1, E.InvalidRequest("x")) is None
    assert fault_frame("no_such_call", 1, E.InvalidRequest("x")) is None


def test_every_call_but_health_is_checked_by_its_token():
    methods = {m for m in vars(Metadata.Iface) if not m.startswith("_")}
    assert CONTROL_CALLS | RUN_CALLS | {"health"} == methods and not CONTROL_CALLS & RUN_CALLS


def test_log_limiter_lets_a_burst_through_per_window_and_counts_the_rest():
    lim = LogLimiter(burst=3, window_s=60)
    assert [lim.allow(t) for t in (0, 1, 2)] == [(True, 0)] * 3
    assert [lim.allow(t)[0] for t in range(3, 50)] == [False] * 47
    assert lim.allow(60) == (True, 47)                 # a new window reports what it held back
    assert lim.allow(61) == (True, 0)
    with pytest.raises(ValueError):
        LogLimiter(burst=0)
