"""The append-only journal: every event that changed the state, in order, in SQLite.

The core is deterministic (events carry their time, run ids come from a
counter, tokens are in the ``StartRun`` event), so replaying the journal into
a fresh ``MetadataState`` rebuilds workflows, runs, counters, commit buffers,
allocations and the pending storage instructions exactly.

WAL mode; one transaction per RPC (a batch RPC is one transaction), committed
before the reply goes out. ``sync="normal"`` (default) survives a killed
server process (the data is in the OS once ``commit`` returns); ``"full"``
also survives power loss at the price of an fsync per RPC; ``"off"`` is for
benchmarks. Not covered: snapshots/compaction (a long-lived server's journal
grows with its history; start a fresh journal between deployments).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ._events import EVENT_TYPES, Event

__all__ = ["Journal"]

_SYNC = {"off": "OFF", "normal": "NORMAL", "full": "FULL"}


class Journal:
    def __init__(self, path: str | Path, *, sync: str = "normal") -> None:
        if sync not in _SYNC:
            raise ValueError(f"journal sync must be one of {', '.join(_SYNC)}, got {sync!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={_SYNC[sync]}")
        self._db.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                         "body TEXT NOT NULL)")
        row = self._db.execute("SELECT MAX(seq) FROM events").fetchone()
        self.seq: int = row[0] or 0

    def append(self, events: Sequence[Event]) -> None:
        """Write ``events`` in one transaction."""
        if not events:
            return
        rows = []
        for ev in events:
            self.seq += 1
            rows.append((self.seq, type(ev).__name__, json.dumps(ev.to_json(), separators=(",", ":"))))
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
            self._db.execute("COMMIT")

    def replay(self) -> Iterator[Event]:
        """Every journaled event, oldest first."""
        cur = self._db.execute("SELECT kind, body FROM events ORDER BY seq")
        for kind, body in cur:
            yield EVENT_TYPES[kind](**json.loads(body))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
