"""Running one request frame through the generated Thrift processor, cheaply.

``FrameProcessor.process(frame) -> reply`` does what building a
``TMemoryBuffer`` and a ``TBinaryProtocolAccelerated`` for each side and
calling ``Metadata.Processor.process`` does, with the per-call work cut
(about half of the framework's cost per small call on this server):

- one input and one output buffer and one protocol for each, reused for every
  frame (a frame is handled to its end before the next one starts);
- the strict message header (version, method, seqid) read and written with
  ``struct`` instead of four Python-level protocol calls each way; any other
  header (old style, a bad version, an unusual method name) goes through
  Thrift's own ``readMessageBegin``, so its errors stay Thrift's.

Arguments and results are still decoded and encoded by ``fastbinary`` through
the generated ``process_*`` functions, so every service method keeps its
generated behaviour (exceptions, ``TApplicationException`` replies, limits),
with one exception: a successful ``get_batch`` reply is written from the bytes
the handler's ``get_batch_encoded`` returns (``_replies``: the same bytes, without
a struct per object); its arguments and its faults still take the generated path.
Not covered: framing and sockets (``_server``).
"""

from __future__ import annotations

import struct
from io import BytesIO
from typing import Any

from thrift.protocol.TBinaryProtocol import TBinaryProtocol, TBinaryProtocolAccelerated
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import CReadableTransport, TTransportBase

from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.gen.metadata import ttypes as T

__all__ = ["FrameProcessor"]

_HEAD = struct.Struct("!ii")        # version|type, length of the method name
_I32 = struct.Struct("!i")
_VERSION_MASK = TBinaryProtocol.VERSION_MASK
_VERSION_1 = TBinaryProtocol.VERSION_1
_MAX_METHOD = 64
_SUCCESS_LIST = bytes([TType.LIST]) + b"\x00\x00"    # a result struct's field 0 (success), a list
_STOP = bytes([TType.STOP])


class _Buffer(TTransportBase, CReadableTransport):  # type: ignore[misc]
    """A memory transport that can be refilled (Thrift's ``TMemoryBuffer`` cannot)."""

    def __init__(self) -> None:
        self._buffer = BytesIO()

    def refill(self, value: bytes | None = None, offset: int = 0) -> None:
        self._buffer = BytesIO(value) if value is not None else BytesIO()
        if offset:
            self._buffer.seek(offset)

    def isOpen(self) -> bool:
        return True

    def read(self, sz: int) -> bytes:
        return self._buffer.read(sz)

    def write(self, buf: bytes) -> None:
        self._buffer.write(buf)

    def flush(self) -> None:
        pass

    def getvalue(self) -> bytes:
        return self._buffer.getvalue()

    @property
    def cstringio_buf(self) -> BytesIO:
        return self._buffer

    def cstringio_refill(self, partialread: bytes, reqlen: int) -> BytesIO:
        raise EOFError()


class _Protocol(TBinaryProtocolAccelerated):  # type: ignore[misc]
    """The accelerated binary protocol with a precomputed message header."""

    head: tuple[str, int, int] | None = None

    def __init__(self, trans: _Buffer, **kwargs: Any) -> None:
        super().__init__(trans, **kwargs)
        self._heads: dict[tuple[str, int], bytes] = {}

    def readMessageBegin(self) -> tuple[str, int, int]:
        head, self.head = self.head, None
        return head if head is not None else super().readMessageBegin()

    def writeMessageBegin(self, name: str, type: int, seqid: int) -> None:
        prefix = self._heads.get((name, type))
        if prefix is None:
            raw = name.encode("utf-8")
            prefix = self._heads[(name, type)] = _HEAD.pack(_VERSION_1 | type, len(raw)) + raw
        self.trans.write(prefix + _I32.pack(seqid))


class FrameProcessor:
    """``process(frame) -> reply frame body`` for ``handler`` (see the module docstring).
    Not thread-safe: one per server loop."""

    def __init__(self, handler: Any, *, string_length_limit: int) -> None:
        self.processor = Metadata.Processor(handler)
        self._known = {name.encode("ascii"): name for name in self.processor._processMap}
        self._in, self._out = _Buffer(), _Buffer()
        self._iprot = _Protocol(self._in, string_length_limit=string_length_limit)
        self._oprot = _Protocol(self._out)
        if hasattr(handler, "get_batch_encoded"):
            self.processor._processMap["get_batch"] = self._get_batch

    def _get_batch(self, processor: Any, seqid: int, iprot: _Protocol, oprot: _Protocol) -> None:
        """``process_get_batch`` writing the handler's encoded reply (see the module docstring)."""
        args = Metadata.get_batch_args()
        args.read(iprot)
        iprot.readMessageEnd()
        try:
            body = processor._handler.get_batch_encoded(args.token, args.run_id, args.function_name,
                                                        args.object_names)
        except T.MetadataFault as fault:
            oprot.writeMessageBegin("get_batch", TMessageType.REPLY, seqid)
            Metadata.get_batch_result(fault=fault).write(oprot)
            oprot.writeMessageEnd()
            return
        oprot.writeMessageBegin("get_batch", TMessageType.REPLY, seqid)
        oprot.trans.write(_SUCCESS_LIST + body + _STOP)
        oprot.writeMessageEnd()

    def process(self, frame: bytes) -> bytes:
        offset = 0
        self._iprot.head = None
        if len(frame) >= 8:
            version, n = _HEAD.unpack_from(frame, 0)
            if version < 0 and version & _VERSION_MASK == _VERSION_1 and 0 < n <= _MAX_METHOD \
                    and len(frame) >= 12 + n:
                name = self._known.get(frame[8:8 + n])
                if name is not None:
                    self._iprot.head = (name, version & TBinaryProtocol.TYPE_MASK,
                                        _I32.unpack_from(frame, 8 + n)[0])
                    offset = 12 + n
        self._in.refill(frame, offset)
        self._out.refill()
        try:
            self.processor.process(self._iprot, self._oprot)
        finally:
            self._iprot.head = None
        return self._out.getvalue()
