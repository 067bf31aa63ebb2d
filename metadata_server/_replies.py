"""The core's replies in wire form; batched reads encoded straight to bytes, once per
object. No sockets, no state.

A ``get_batch`` of 1,000 objects built 1,000 ``GetResult`` structs (each with a
``Placement``) for ``fastbinary`` to walk and encode, and the server built them
again on every read of the same objects. ``GetResultEncoder.encode(outs)``
writes the ``list<GetResult>`` of a batch's core replies directly:

- the part of an object's result that does not change between reads (fields 1-4:
  name, size, checksum, placement) is encoded once and kept, keyed by the
  placement object (the core builds one per write and never mutates it;
  ``Placement`` is frozen) and the object's name, since the COS tier shares one;
- the per-read flags (fields 5-8: recorded, already_committed, freed_by_read,
  last_read) are one of sixteen constant tails.

The bytes are those the generated code writes for the same structs (TBinaryProtocol,
fields in id order, absent optional fields left out): a client cannot tell.
``tests/unit/test_metadata_replies.py`` checks that against Thrift's own encoder.
``read_columns(outs)`` is the reply of ``read_batch``: two byte strings, one byte per
read (``funcsion_rpc.reads``), so neither side builds anything per object.
``to_thrift_placement`` and ``to_thrift_instruction`` build the generated structs of a
core placement and storage instruction.
Not covered: framing and the message header (``_process``), which objects a batch
reads (the core).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.Thrift import TType
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc.gen.metadata import ttypes as T
from funcsion_rpc.reads import ALREADY_COMMITTED, FREED_BY_READ, RECORDED, LAST_READ, TIER_CODES

from . import _events as ev

__all__ = ["GetResultEncoder", "encode_struct", "freed_or_last", "read_columns", "to_thrift_instruction", "to_thrift_placement"]

_I32 = struct.Struct("!i")
_I64 = struct.Struct("!q")
_FIELD_NAME = bytes([TType.STRING]) + b"\x00\x01"
_FIELD_SIZE = bytes([TType.I64]) + b"\x00\x02"
_FIELD_CHECKSUM = bytes([TType.STRING]) + b"\x00\x03"
_FIELD_PLACEMENT = bytes([TType.STRUCT]) + b"\x00\x04"
_STOP = bytes([TType.STOP])
_LIST_OF_STRUCTS = bytes([TType.STRUCT])


def to_thrift_placement(p: ev.Placement) -> T.Placement:
    return T.Placement(p.tier, p.kind, [T.Extent(e.function, e.block, e.offset, e.length, e.chunk)
                                        for e in p.extents], p.data_chunks, p.parity_chunks, p.chunk_size,
                       p.daemon or None)     # one daemon: unset, as before


def to_thrift_instruction(i: ev.StorageInstruction) -> T.Instruction:
    if isinstance(i, ev.DropObject):
        return T.Instruction(i.seq, "drop", i.run_id, i.object,
                             [T.Extent(e.function, e.block, e.offset, e.length, e.chunk) for e in i.extents],
                             i.keep_cos, 0, "", i.reason, i.tier)
    if isinstance(i, ev.ScaleOut):
        return T.Instruction(i.seq, "scale_out", "", "", [], False, i.blocks, "", i.reason, "")
    if isinstance(i, ev.MoveChunks):
        return T.Instruction(i.seq, "move", i.run_id, i.object,
                             [T.Extent(e.function, e.block, e.offset, e.length, e.chunk) for e in i.new],
                             False, 0, i.daemon, "", "memory",
                             [T.Extent(e.function, e.block, e.offset, e.length, e.chunk) for e in i.old])
    assert isinstance(i, ev.ReleaseFunction)
    return T.Instruction(i.seq, "release_function", "", "", [], False, 0, i.function, "", "")


def _flag(fid: int, value: bool) -> bytes:
    return bytes([TType.BOOL, 0, fid, 1 if value else 0])


# (recorded, already_committed, freed_by_read, last_read) -> fields 5-8 and the struct's
# STOP; freed_by_read and last_read are optional and only ever sent as true (None otherwise)
_TAILS = {(rec, done, freed, rel): _flag(5, rec) + _flag(6, done) + (_flag(7, True) if freed else b"")
          + (_flag(8, True) if rel else b"") + _STOP
          for rec in (False, True) for done in (False, True) for freed in (False, True) for rel in (False, True)}


def freed_or_last(out: list[ev.Instruction], name: str) -> tuple[bool, bool]:
    """Whether the core's reply ``out`` to a read of ``name`` freed it (the oracle's last read)
    and whether it was the last declared read (funcstore's: the reader's ``read_done`` releases
    its function memory)."""
    if len(out) < 2:
        return False, False
    return (any(type(i) is ev.Freed and i.object == name for i in out),
            any(type(i) is ev.LastRead and i.object == name for i in out))


def encode_struct(value: object) -> bytes:
    """A generated struct's TBinaryProtocol bytes (fastbinary when it is there)."""
    buf = TMemoryBuffer()
    value.write(TBinaryProtocolAccelerated(buf))  # type: ignore[attr-defined]
    out: bytes = buf.getvalue()
    return out


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _I32.pack(len(raw)) + raw


class GetResultEncoder:
    """``encode(outs) -> bytes``: the ``list<GetResult>`` for the core's replies to a batch
    of ``Get`` events (``outs[i][0]`` is each one's ``ReadRecorded``). ``placement`` turns a
    core placement into its Thrift struct (the handler's cached converter). The cache keeps
    at most ``max_entries`` objects and ``max_bytes`` of encoded fields, then starts over."""

    def __init__(self, placement: Callable[[ev.Placement], T.Placement], max_entries: int = 100_000,
                 max_bytes: int = 16 << 20) -> None:
        self._to_thrift = placement
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._bytes = 0
        # (id(placement), object) -> (placement, size, checksum, fields 1-4 encoded)
        self._heads: dict[tuple[int, str], tuple[ev.Placement, int, str, bytes]] = {}
        # id(placement) -> (placement, the Placement struct encoded)
        self._placements: dict[int, tuple[ev.Placement, bytes]] = {}

    def _room(self, more: int) -> None:
        if len(self._heads) >= self.max_entries or len(self._placements) >= self.max_entries \
                or self._bytes + more > self.max_bytes:
            self._heads.clear()
            self._placements.clear()
            self._bytes = 0
        self._bytes += more

    def _placement_bytes(self, p: ev.Placement) -> bytes:
        hit = self._placements.get(id(p))
        if hit is not None and hit[0] is p:
            return hit[1]
        raw = encode_struct(self._to_thrift(p))
        self._room(len(raw))
        self._placements[id(p)] = (p, raw)
        return raw

    def _head(self, r: ev.ReadRecorded) -> bytes:
        p = r.placement
        head = (_FIELD_NAME + _string(r.object) + _FIELD_SIZE + _I64.pack(r.size) + _FIELD_CHECKSUM
                + _string(r.checksum) + _FIELD_PLACEMENT + self._placement_bytes(p))
        self._room(len(head))
        self._heads[(id(p), r.object)] = (p, r.size, r.checksum, head)
        return head

    def encode(self, outs: list[list[ev.Instruction]]) -> bytes:
        heads, tails, get_head = self._heads, _TAILS, self._head
        parts = [_LIST_OF_STRUCTS + _I32.pack(len(outs))]
        add = parts.append
        for out in outs:
            r = out[0]
            assert type(r) is ev.ReadRecorded
            p = r.placement
            hit = heads.get((id(p), r.object))
            add(hit[3] if hit is not None and hit[0] is p and hit[1] == r.size and hit[2] == r.checksum
                else get_head(r))
            freed, rel = freed_or_last(out, r.object)
            add(tails[(r.recorded, r.already_committed, freed, rel)])
        return b"".join(parts)


def read_columns(outs: list[list[ev.Instruction]]) -> T.ReadBatch:
    """``read_batch``'s reply for the core's replies to a batch of ``Get`` events (with several
    daemons, the id of the daemon holding each object too)."""
    tiers = bytearray(len(outs))
    flags = bytearray(len(outs))
    daemons: list[str] = []           # several daemons: which holds each object
    codes = TIER_CODES
    for i, out in enumerate(outs):
        r = out[0]
        assert type(r) is ev.ReadRecorded
        tiers[i] = codes[r.placement.tier]
        daemons.append(r.placement.daemon)
        f = (RECORDED if r.recorded else 0) | (ALREADY_COMMITTED if r.already_committed else 0)
        freed, rel = freed_or_last(out, r.object)
        f |= (FREED_BY_READ if freed else 0) | (LAST_READ if rel else 0)
        flags[i] = f
    return T.ReadBatch(bytes(tiers), bytes(flags), daemons if any(daemons) else None)
