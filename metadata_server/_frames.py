"""What the metadata server decides about a frame before it runs it. No sockets, no clock.

- ``peek_head``: the call a frame carries (method, seqid) and its leading
  string arguments (every service method but ``health`` takes its token as
  field 1, and run calls their run id as field 2), read from the frame's first
  bytes in TBinaryProtocol (strict or old-style message header). The server
  uses it to check a large frame's token before it holds the body
  (``funcsion_rpc.limits.HANDSHAKE_BYTES``).
- ``fault_frame``: a complete framed reply carrying a ``MetadataFault``, for a
  call refused from its header alone (unauthorized, too large).
- ``LogLimiter``: how many bad peers get a log line: at most ``burst`` per
  ``window_s``, the rest counted and reported with the next line let through,
  so a peer that reconnects and misbehaves forever cannot grow the log without bound.

Not covered: the socket loop (``_server``) and the token check itself (``MetadataHandler.check_caller``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Literal

from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc.errors import MetadataError
from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.gen.metadata import ttypes as T

__all__ = ["FrameHead", "LogLimiter", "NEED_MORE", "fault_frame", "peek_head"]

NEED_MORE: Final = "need-more"
_I32 = struct.Struct("!i")
_I16 = struct.Struct("!h")
_VERSION_MASK = -65536              # 0xffff0000 as a signed i32
_VERSION_1 = -2147418112            # 0x80010000
_MAX_METHOD = 64                    # longer than any method of the service


@dataclass(frozen=True, slots=True)
class FrameHead:
    method: str
    seqid: int
    token: str = ""                 # field 1 when it is a string
    run_id: str = ""                # field 2 when it is a string


class _Short(Exception):
    """The prefix ended before the header did."""


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise _Short
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return self.take(1)[0]

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])


def peek_head(prefix: bytes, max_string: int) -> FrameHead | Literal["need-more"] | None:
    """The header of the call in ``prefix`` (a frame's first bytes, length prefix excluded);
    ``NEED_MORE`` when ``prefix`` ends inside it; None when it is no call of this protocol
    (bad version, not a CALL, a method name or token over ``max_string`` bytes). A field 2
    over ``max_string`` bytes is left out (no run id is that long)."""
    r = _Reader(prefix)
    try:
        first = r.i32()
        if first < 0:                                   # strict: version | type, name, seqid
            if (first & _VERSION_MASK) != _VERSION_1:
                return None
            mtype = first & 0xFF
            size = r.i32()
            if not 0 < size <= _MAX_METHOD:
                return None
            name = r.take(size)
            seqid = r.i32()
        else:                                           # old style: name, type, seqid
            if not 0 < first <= _MAX_METHOD:
                return None
            name = r.take(first)
            mtype = r.i8()
            seqid = r.i32()
        if mtype not in (TMessageType.CALL, TMessageType.ONEWAY):
            return None
        try:
            method = name.decode("ascii")
        except UnicodeDecodeError:
            return None
        strings: dict[int, str] = {}
        while len(strings) < 2:
            ftype = r.i8()
            if ftype == TType.STOP:
                break
            fid = r.i16()
            if ftype != TType.STRING or fid not in (1, 2) or fid in strings:
                break
            size = r.i32()
            if size < 0 or (fid == 1 and size > max_string):
                return None                             # a token this long is no token
            if size > max_string:
                break                                   # field 2 of a control call (a WDS, ...): not needed
            strings[fid] = r.take(size).decode("utf-8", "replace")
    except _Short:
        return NEED_MORE
    return FrameHead(method, seqid, strings.get(1, ""), strings.get(2, ""))


def fault_frame(method: str, seqid: int, error: MetadataError) -> bytes | None:
    """The framed reply to call ``seqid`` of ``method`` raising ``error``; None for a
    method that cannot raise a fault (``health``) or that the service does not have."""
    result_cls = getattr(Metadata, f"{method}_result", None)
    if result_cls is None:
        return None
    try:
        result = result_cls(fault=T.MetadataFault(error.code, error.message, error.run_id, error.function,
                                                  error.object))
    except TypeError:
        return None
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin(method, TMessageType.REPLY, seqid)
    result.write(proto)
    proto.writeMessageEnd()
    body: bytes = buf.getvalue()
    return _I32.pack(len(body)) + body


class LogLimiter:
    """At most ``burst`` lines per ``window_s`` seconds; ``allow(now)`` returns whether to
    log and how many lines were held back since the last one it let through."""

    def __init__(self, burst: int = 10, window_s: float = 60.0) -> None:
        if burst <= 0 or window_s <= 0:
            raise ValueError("burst and window_s must be positive")
        self.burst, self.window_s = burst, window_s
        self._start = float("-inf")
        self._count = 0
        self.suppressed = 0

    def allow(self, now: float) -> tuple[bool, int]:
        if now - self._start >= self.window_s:
            self._start, self._count = now, 0
        if self._count >= self.burst:
            self.suppressed += 1
            return False, 0
        self._count += 1
        held, self.suppressed = self.suppressed, 0
        return True, held
