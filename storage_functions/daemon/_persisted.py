"""Lifetimes of the SDK's persisted copies (Pocket's PERSIST with a timeout, Sec. 3.2):
``put(..., persist=<lifetime>)`` keeps a COS copy ``persisted/<run_id>/<name>`` for that
long after its run ends, then the daemon's sweep deletes it. ``PersistedCopies`` is the
policy: which copies have a lifetime, when each expires (fixed when its run ends: the
lifetime counts from the end of the job, as in Pocket), which are due at a given time.
It takes times as arguments (no clock, no I/O); the daemon carries out the deletions and
keeps each record durable as a small JSON object in COS (``record_key``), so a restarted
daemon still sweeps what an earlier one recorded. A copy without a lifetime (persist=True
with no default) is not recorded here: it lives until ``Client.delete``, as before.
Not here: the COS calls (``Daemon``), the SDK's side (``sdk._client``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = ["PersistedCopy", "PersistedCopies", "record_key", "key_of_record", "run_of_copy", "RECORD_DIR"]

#: Under the daemon's ``cos_prefix``: one JSON record per persisted copy with a lifetime.
RECORD_DIR = "persist-ttl"


def record_key(cos_prefix: str, key: str) -> str:
    return f"{cos_prefix}/{RECORD_DIR}/{quote(key, safe='')}"


def key_of_record(cos_prefix: str, record: str) -> str | None:
    head = f"{cos_prefix}/{RECORD_DIR}/"
    return unquote(record[len(head):]) if record.startswith(head) else None


@dataclass(slots=True)
class PersistedCopy:
    key: str                   # persisted/<run_id>/<name>
    keep_s: float              # the lifetime after the run ends
    expires_at: float | None   # epoch seconds; None while the run has not ended

    def to_json(self) -> bytes:
        return json.dumps({"key": self.key, "keep_s": self.keep_s, "expires_at": self.expires_at}).encode()

    @classmethod
    def from_json(cls, data: bytes | bytearray) -> PersistedCopy:
        d = json.loads(bytes(data))
        exp = d.get("expires_at")
        return cls(str(d["key"]), float(d["keep_s"]), None if exp is None else float(exp))


def run_of_copy(key: str) -> str:
    """``persisted/r-3/x`` -> ``r-3``."""
    parts = key.split("/", 2)
    return parts[1] if len(parts) == 3 else ""


class PersistedCopies:
    """The persisted copies that have a lifetime, by COS key. Every method that changes a
    record returns the records to write back (or the keys to delete)."""

    def __init__(self) -> None:
        self.copies: dict[str, PersistedCopy] = {}
        self.ended: dict[str, float] = {}  # run -> when it ended (a copy written after that expires from then)

    def record(self, key: str, keep_s: float, now: float) -> PersistedCopy:
        """A copy written with a lifetime of ``keep_s`` seconds after its run ends."""
        if not math.isfinite(keep_s) or keep_s < 0:
            raise ValueError(f"persisted copy {key!r}: lifetime {keep_s!r} s must be finite and >= 0")
        ended = self.ended.get(run_of_copy(key))
        copy = PersistedCopy(key, keep_s, None if ended is None else max(ended, now) + keep_s)
        self.copies[key] = copy
        return copy

    def restore(self, copy: PersistedCopy) -> None:
        self.copies[copy.key] = copy

    def run_ended(self, run_id: str, now: float) -> list[PersistedCopy]:
        """The run ended at ``now``: each of its copies expires ``keep_s`` later."""
        self.ended.setdefault(run_id, now)
        changed = []
        for c in self.copies.values():
            if c.expires_at is None and run_of_copy(c.key) == run_id:
                c.expires_at = now + c.keep_s
                changed.append(c)
        return changed

    def forget(self, key: str) -> bool:
        return self.copies.pop(key, None) is not None

    def due(self, now: float) -> list[str]:
        """The copies whose lifetime is over at ``now`` (taken out of the table)."""
        keys = [k for k, c in self.copies.items() if c.expires_at is not None and c.expires_at <= now]
        for k in keys:
            del self.copies[k]
        return keys

    def get(self, key: str) -> PersistedCopy | None:
        return self.copies.get(key)
