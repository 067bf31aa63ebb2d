"""The daemon's durable object table (SION keeps it on the daemon's local disk):
an append-only log of what the table holds, so a daemon killed with -9 and
started again knows every live object version, where its chunks were placed,
and whether its COS copy landed.

Records (JSON), each framed as ``u32 length | u32 crc32 | payload``:

- ``{"o": "put", "k": key, "v": version, "m": {size, cos_key, alloc, stripes: [...]}}``:
  a version became readable (logged before the PUT is acknowledged);
- ``{"o": "up", "k": key, "v": version}``: its COS copy landed;
- ``{"o": "ups", "kv": [[key, version], ...]}``: the COS copies of a batch landed;
- ``{"o": "pk", "c": cos_key, "kv": [[key, version, offset], ...]}``: the COS copies of a
  batch of small versions landed as one COS object (a pack), each at its offset;
- ``{"o": "free", "k": [keys]}``: every version of these keys was freed;
- ``{"o": "ev", "k": [keys]}``: the chunks of these keys' versions left function memory
  (evicted at the object's last read): their places are gone, the versions stay;
- ``{"o": "dq", "c": [cos keys]}``: COS objects to delete (a freed version's copy, a pack
  whose versions were all freed, or a pack about to go up: deleted after a kill unless its
  ``pk`` record came first); ``{"o": "dd", "c": [cos keys]}``: those deletes were done;
- ``{"o": "mv", "k": key, "v": version, "a": alloc, "p": [[place, ...] per stripe]}``: the
  metadata server moved chunks of the version (GC compaction) and they landed: its allocation
  and chunk places are these now;
- ``{"o": "start", "n": restarts}``: a daemon process started on this log
  (``n``: how many earlier processes had, after compaction).

A frame is one ``write`` of an ``O_APPEND`` file, so a process killed at any
point leaves whole records and at most one torn frame at the end; replay stops
at the first frame that is short or fails its CRC and cuts the file there.
Compaction rewrites the live image (a ``start``, the pending deletes and one
``put``/``up`` pair per live version) to a temporary file and renames it over the log once the log
holds more than ``compact_factor`` records per live version.

Covers the file, the framing and the pure replay (:func:`replay`); not what a
restarted daemon does with the image (``_restore``).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..private_files import FILE_MODE
from ..protocol import compact_json

__all__ = ["DurableLog", "LogImage", "frame", "read_frames", "replay", "TABLE_LOG"]

#: The log's file name inside the daemon's buffer directory.
TABLE_LOG = "_table.log"
_HEAD = struct.Struct("!II")
_MAX_RECORD = 64 << 20  # a put record of a huge object's stripes is far below this


def frame(record: dict[str, Any]) -> bytes:
    """One record as it goes to the file."""
    raw = compact_json(record).encode()
    return _HEAD.pack(len(raw), zlib.crc32(raw)) + raw


def read_frames(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The whole records at the start of ``data`` and how many bytes they span: a frame that
    is short, too long, fails its CRC or is not a JSON object ends the log (a torn tail)."""
    out: list[dict[str, Any]] = []
    pos = 0
    while pos + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + n
        if n > _MAX_RECORD or end > len(data):
            break
        raw = data[pos + _HEAD.size:end]
        if zlib.crc32(raw) != crc:
            break
        try:
            rec = json.loads(raw)
        except ValueError:
            break
        if not isinstance(rec, dict):
            break
        out.append(rec)
        pos = end
    return out, pos


@dataclass
class LogImage:
    """What the log says the table holds: ``live[key][version]`` is the version's meta
    (``put`` record's ``m``) plus ``"uploaded": bool``; ``starts``: daemon processes that
    started on this log before."""

    live: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    starts: int = 0
    deletes: set[str] = field(default_factory=set)  # COS objects to delete (``dq`` not yet ``dd``)
    _n: int = 0  # versions in ``live``, kept as records apply (a count per append must not walk the table)

    def versions(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        for key, vs in self.live.items():
            for v, meta in sorted(vs.items()):
                yield key, v, meta

    def count(self) -> int:
        """Versions plus pending deletes: what a compacted log holds records for."""
        return self._n + len(self.deletes)

    def apply(self, rec: dict[str, Any]) -> None:
        """One record; unknown or malformed ones change nothing (a newer daemon's)."""
        op = rec.get("o")
        if op == "put" and isinstance(rec.get("m"), dict):
            vs = self.live.setdefault(str(rec.get("k")), {})
            v = int(rec.get("v", 0))
            self._n += v not in vs
            vs[v] = dict(rec["m"], uploaded=False)
        elif op == "up":
            self._landed(rec.get("k"), rec.get("v", 0))
        elif op == "ups":
            for kv in rec.get("kv") or []:
                if isinstance(kv, list) and len(kv) == 2:
                    self._landed(kv[0], kv[1])
        elif op == "pk":
            self._packed(rec.get("c"), rec.get("kv") or [])
        elif op in ("dq", "dd"):
            keys = [str(k) for k in rec.get("c") or [] if isinstance(k, str)]
            if op == "dq":
                self.deletes.update(keys)
            else:
                self.deletes.difference_update(keys)
        elif op == "free":
            for k in rec.get("k") or []:
                self._n -= len(self.live.pop(str(k), {}))
        elif op == "ev":
            for k in rec.get("k") or []:
                for meta in self.live.get(str(k), {}).values():
                    for st in meta.get("stripes") or []:
                        if isinstance(st, dict) and isinstance(st.get("places"), list):
                            st["places"] = [None] * len(st["places"])
        elif op == "mv":
            moving = self.live.get(str(rec.get("k")), {}).get(int(rec.get("v", 0)))
            stripes = moving.get("stripes") if moving is not None else None
            places = rec.get("p")
            if moving is not None and isinstance(stripes, list) and isinstance(places, list) and len(
                    places) == len(stripes):
                moving["alloc"] = rec.get("a")
                for st, pl in zip(stripes, places):
                    if isinstance(st, dict):
                        st["places"] = pl
        elif op == "start":
            self.starts = max(self.starts + 1, int(rec.get("n", 0)))

    def _landed(self, key: Any, version: Any) -> None:
        try:
            meta = self.live.get(str(key), {}).get(int(version))
        except (TypeError, ValueError):
            return
        if meta is not None:
            meta["uploaded"] = True

    def _packed(self, pack: Any, members: list[Any]) -> None:
        """A pack landed: its live members were uploaded into it. It stays to delete (a
        ``dq`` came before it went up) while none of its members is live any more."""
        if not isinstance(pack, str):
            return
        live = 0
        for kv in members:
            if not (isinstance(kv, list) and len(kv) == 3):
                continue
            try:
                meta = self.live.get(str(kv[0]), {}).get(int(kv[1]))
                at = int(kv[2])
            except (TypeError, ValueError):
                continue
            if meta is not None:
                meta["uploaded"] = True
                meta["pack"] = [pack, at]
                live += 1
        if live:
            self.deletes.discard(pack)

    def records(self) -> Iterator[dict[str, Any]]:
        """The image as a minimal log (compaction): ``start`` first, the pending deletes,
        then the live versions."""
        yield {"o": "start", "n": self.starts}
        if self.deletes:
            yield {"o": "dq", "c": sorted(self.deletes)}
        for key, v, meta in self.versions():
            yield {"o": "put", "k": key, "v": v, "m": {k: x for k, x in meta.items() if k != "uploaded"}}
            if meta.get("uploaded"):
                yield {"o": "up", "k": key, "v": v}


def replay(records: Iterable[dict[str, Any]]) -> LogImage:
    """The table the records describe (pure)."""
    img = LogImage()
    for rec in records:
        img.apply(rec)
    return img


class DurableLog:
    """``DurableLog(path)``: ``open()`` replays the file (cutting a torn tail), appends a
    ``start`` and returns the image; then ``append`` each record. Thread-safe. ``fsync``:
    each record is flushed to the disk before ``append`` returns (a kill -9 needs only the
    write: the kernel has it)."""

    def __init__(self, path: str, *, fsync: bool = False, compact_factor: int = 4, compact_min: int = 1024) -> None:
        self.path = path
        self.fsync = fsync
        self.compact_factor, self.compact_min = compact_factor, compact_min
        self.image = LogImage()
        self.records = 0  # in the file now
        self.torn_bytes = 0  # cut from the end at open
        self.compactions = 0
        self.earlier_starts = 0  # daemon processes that opened this log before this one
        self._fd: int | None = None
        self._lock = threading.Lock()

    def open(self) -> LogImage:
        data = b""
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            pass
        recs, good = read_frames(data)
        self.torn_bytes = len(data) - good
        self.image = replay(recs)
        self.records = len(recs)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        if self.torn_bytes:
            os.ftruncate(fd, good)
        self._fd = fd
        self.earlier_starts = self.image.starts
        self.append({"o": "start", "n": self.earlier_starts + 1})
        return self.image

    def append(self, rec: dict[str, Any]) -> None:
        data = frame(rec)
        with self._lock:
            if self._fd is None:
                return  # closed: the daemon is stopping
            os.write(self._fd, data)
            if self.fsync:
                os.fsync(self._fd)
            self.image.apply(rec)
            self.records += 1
            if self.records > max(self.compact_min, self.compact_factor * self.image.count()):
                self._compact_locked()

    def compact(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._compact_locked()

    def _compact_locked(self) -> None:
        assert self._fd is not None
        tmp = self.path + ".tmp"
        recs = list(self.image.records())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        try:
            os.write(fd, b"".join(frame(r) for r in recs))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        self.records = len(recs)
        self.compactions += 1

    def read_since(self, compactions: int, offset: int) -> bytes | None:
        """The file's bytes after ``offset`` (whole records) if it was compacted ``compactions``
        times since it was opened, else None (rewritten since: start again from 0)."""
        with self._lock:
            if compactions != self.compactions:
                return None
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(offset)
                    return fh.read()
            except FileNotFoundError:
                return b""

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
