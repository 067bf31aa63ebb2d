"""The journal's file format: length-prefixed msgpack records with a CRC each. Pure, no I/O.

A journal file is ``MAGIC`` followed by records. A record is one group commit:
the events of one server loop round (or of one ``Journal.append`` call)::

    <payload length: u32 LE> <event count: u32 LE> <crc32 of the 8 bytes before and the payload: u32 LE>
    <payload: msgpack array of entries>

An event entry is ``[kind, field values...]`` in the order of the event's
dataclass fields. A record whose count is 0 holds one schema entry instead,
``["$schema", {kind: [field names]}]``: the field names the following
records were written with, so a journal written before a field was added,
removed or moved still replays (a missing field takes its default; a field
this version does not know is an error naming it). A writer emits a schema
record when a file starts and whenever its schema differs from the file's
last one. A file's first schema record may carry a third element, its base:
how many events precede the file's first (a compacted journal's, folded into
its snapshot; absent means 0). A snapshot file (``frame_snapshot``) is
``SNAP_MAGIC`` and one checked frame around the state's encoding.

``scan`` walks the records of a file image checking lengths and CRCs and says
where the valid prefix ends. What follows a valid prefix is a torn tail (a
crash during the last write: a partial header, a length past the end, a CRC
that fails with no valid record after it), which the journal truncates, or
corruption in the middle of the file (a record whose CRC fails although the
bytes after it form valid records), which it refuses to open. Not covered:
reading or writing files (``_journal``), the older SQLite journals
(``_journal_legacy``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import msgpack

from funcsion_errors import FuncsionError

from ._events import EVENT_TYPES, Event

__all__ = ["MAGIC", "SNAP_MAGIC", "frame_snapshot", "unframe_snapshot", "HEADER", "SCHEMA_KIND", "JournalCorrupt", "Scan", "current_schema", "encode_record",
           "encode_schema", "decode_record", "records", "scan"]

MAGIC = b"funcsion journal v1\n"
SNAP_MAGIC = b"funcsion snapshot v1\n"
_SNAP_HEAD = struct.Struct("<QQI")
HEADER = struct.Struct("<III")
SCHEMA_KIND = "$schema"
Schema = dict[str, tuple[str, ...]]

_GETTERS: dict[type[Event], tuple[str, Any]] = {}


class JournalCorrupt(FuncsionError):
    """A journal file that cannot be replayed: not a journal, or damaged before its end."""


def current_schema() -> Schema:
    """This version's event kinds and their field names."""
    return {name: tuple(f.name for f in fields(cls)) for name, cls in EVENT_TYPES.items()}


_MINE = current_schema()


def _getter(cls: type[Event]) -> tuple[str, Any]:
    got = _GETTERS.get(cls)
    if got is None:
        names = [f.name for f in fields(cls)]
        got = _GETTERS[cls] = (cls.__name__, attrgetter(*names))
    return got


def _packer() -> msgpack.Packer:
    # lone surrogates can reach the core from in-process callers; they must round-trip, not fail
    return msgpack.Packer(unicode_errors="surrogatepass", use_bin_type=True)


def _frame(payload: bytes, count: int) -> bytes:
    head = struct.pack("<II", len(payload), count)
    return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + payload


def encode_record(events: Sequence[Event], packer: msgpack.Packer | None = None) -> bytes:
    """One record holding ``events`` (a group commit)."""
    entries = []
    for e in events:
        name, get = _getter(type(e))
        entries.append((name, *get(e)))
    return _frame((packer or _packer()).pack(entries), len(entries))


def encode_schema(schema: Schema, base: int = 0) -> bytes:
    """A schema record (count 0); ``base``: the events before this file's first (compaction
    folded them into a snapshot), written in a file's first record only."""
    doc: list[Any] = [SCHEMA_KIND, {k: list(v) for k, v in schema.items()}]
    if base:
        doc.append(base)
    return _frame(_packer().pack(doc), 0)


@dataclass(slots=True)
class Scan:
    """What ``scan`` found: the valid prefix ends at ``end``; ``events`` and ``records``
    count what it holds; ``schema`` is the last schema record in it (None: none yet);
    ``torn`` is how many bytes after ``end`` are a torn tail; ``base`` is how many events
    precede the file's first (its first schema record says; 0 for a journal never compacted)."""

    end: int
    events: int
    records: int
    schema: Schema | None
    torn: int
    base: int = 0


Image = Any  # bytes, bytearray or an mmap: anything sliced into bytes


def _valid_at(buf: Image, pos: int) -> tuple[int, int] | None:
    """(payload length, count) of a whole record with a good CRC at ``pos``, else None."""
    if len(buf) - pos < HEADER.size:
        return None
    n, count, crc = HEADER.unpack_from(buf, pos)
    start = pos + HEADER.size
    if n > len(buf) - start:
        return None
    if zlib.crc32(buf[start:start + n], zlib.crc32(buf[pos:pos + 8])) != crc:
        return None
    return n, count


def _decode_schema(payload: bytes, where: int) -> Schema:
    return _decode_schema_base(payload, where)[0]


def _decode_schema_base(payload: bytes, where: int) -> tuple[Schema, int]:
    doc = msgpack.unpackb(payload, raw=False, unicode_errors="surrogatepass")
    if not (isinstance(doc, list) and len(doc) in (2, 3) and doc[0] == SCHEMA_KIND and isinstance(doc[1], dict)
            and (len(doc) == 2 or (isinstance(doc[2], int) and doc[2] >= 0))):
        raise JournalCorrupt(f"the record at byte {where} should hold the event schema and does not")
    return {str(k): tuple(v) for k, v in doc[1].items()}, (doc[2] if len(doc) == 3 else 0)


def scan(buf: Image) -> Scan:
    """Check a whole file image (from ``MAGIC`` on); see the module docstring."""
    if buf[:len(MAGIC)] != MAGIC:
        raise JournalCorrupt("the file does not start like a funcsion journal")
    pos, events, records, schema, base = len(MAGIC), 0, 0, None, 0
    while pos < len(buf):
        ok = _valid_at(buf, pos)
        if ok is None:
            break
        n, count = ok
        start = pos + HEADER.size
        if count == 0:
            schema, b = _decode_schema_base(buf[start:start + n], pos)
            if records == 0:
                base = b
        events += count
        records += 1
        pos = start + n
    if pos < len(buf) and len(buf) - pos >= HEADER.size:
        n = HEADER.unpack_from(buf, pos)[0]
        after = pos + HEADER.size + n
        if after < len(buf) and _valid_at(buf, after) is not None:
            raise JournalCorrupt(f"the record at byte {pos} is damaged (its checksum fails) and valid records "
                                 f"follow it, so this is no torn tail of a crash")
    return Scan(pos, events, records, schema, len(buf) - pos, base)


def decode_record(payload: bytes, count: int, schema: Schema | None, where: int
                  ) -> tuple[list[Event], Schema | None]:
    """The events of one record (and the schema in force after it)."""
    if count == 0:
        return [], _decode_schema(payload, where)
    if schema is None:
        raise JournalCorrupt(f"the record at byte {where} has events but no schema record precedes it")
    entries = msgpack.unpackb(payload, raw=False, unicode_errors="surrogatepass", strict_map_key=True)
    if len(entries) != count:
        raise JournalCorrupt(f"the record at byte {where} announces {count} events and holds {len(entries)}")
    mine = _MINE
    out: list[Event] = []
    for kind, *values in entries:
        cls = EVENT_TYPES.get(kind)
        names = schema.get(kind)
        if cls is None or names is None:
            raise JournalCorrupt(f"the record at byte {where} holds an event of unknown kind {kind!r}")
        if names == mine[kind]:
            out.append(cls(*values))
            continue
        unknown = set(names) - set(mine[kind])
        if unknown:
            raise JournalCorrupt(f"{kind} events in this journal have fields this version does not know: "
                                 f"{', '.join(sorted(unknown))}")
        out.append(cls(**dict(zip(names, values))))
    return out, schema


def records(buf: Image, end: int) -> Iterator[tuple[int, bytes, int]]:
    """(offset, payload, count) of each record of a scanned image up to ``end``."""
    pos = len(MAGIC)
    while pos < end:
        n, count, _ = HEADER.unpack_from(buf, pos)
        start = pos + HEADER.size
        yield pos, buf[start:start + n], count
        pos = start + n


def frame_snapshot(payload: bytes, seq: int) -> bytes:
    """A snapshot file: ``SNAP_MAGIC``, ``<seq: u64 LE> <payload length: u64 LE> <crc32 of
    those 16 bytes and the payload: u32 LE>``, the payload (the state after ``seq`` events)."""
    head = struct.pack("<QQ", seq, len(payload))
    return SNAP_MAGIC + head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + payload


def unframe_snapshot(blob: bytes | memoryview, what: str = "snapshot") -> tuple[int, memoryview]:
    """(seq, payload) of a whole snapshot; ``JournalCorrupt`` naming ``what`` if it is not one."""
    view = memoryview(blob)
    start = len(SNAP_MAGIC) + _SNAP_HEAD.size
    if bytes(view[:len(SNAP_MAGIC)]) != SNAP_MAGIC or len(view) < start:
        raise JournalCorrupt(f"{what} does not start like a funcsion snapshot")
    seq, n, crc = _SNAP_HEAD.unpack_from(view, len(SNAP_MAGIC))
    payload = view[start:start + n]
    head = view[len(SNAP_MAGIC):len(SNAP_MAGIC) + 16]
    if len(payload) != n or zlib.crc32(payload, zlib.crc32(head)) != crc:
        raise JournalCorrupt(f"{what} is torn or damaged (its length or checksum fails)")
    return seq, payload
