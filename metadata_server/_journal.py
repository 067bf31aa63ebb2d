"""The append-only journal: every event that changed the state, in order, in SQLite.

The core is deterministic (events carry their time, run ids come from a
counter, token digests are in the ``StartRun`` event), so replaying the journal into
a fresh ``MetadataState`` rebuilds workflows, runs, counters, commit buffers,
allocations and the pending storage instructions exactly.

At rest: a run's token is never written, only its SHA-256 digest (``_tokens``).
Journals of older versions held ``StartRun`` events with the clear token; opening
one rewrites those rows to digests in one transaction, with SQLite's
``secure_delete`` on and a WAL checkpoint after, so the clear tokens leave the
file. A journal file the server creates is mode 0600, in directories it
creates with mode 0700 (SQLite gives its ``-wal``/``-shm`` files the journal's
mode); existing files and directories keep theirs.

WAL mode; one transaction per RPC (a batch RPC is one transaction), committed
before the reply goes out. ``sync="normal"`` (default) survives a killed
server process (the data is in the OS once ``commit`` returns); ``"full"``
also survives power loss at the price of an fsync per RPC; ``"off"`` is for
benchmarks. Not covered: snapshots/compaction (a long-lived server's journal
grows with its history; start a fresh journal between deployments).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ._events import EVENT_TYPES, Event
from ._tokens import token_digest

__all__ = ["Journal"]

log = logging.getLogger("funcsion.metadata")
_SYNC = {"off": "OFF", "normal": "NORMAL", "full": "FULL"}


def _create_private(path: Path) -> None:
    """Create ``path``'s missing directories (0700) and ``path`` itself (0600) if it is missing."""
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


class Journal:
    def __init__(self, path: str | Path, *, sync: str = "normal") -> None:
        if sync not in _SYNC:
            raise ValueError(f"journal sync must be one of {', '.join(_SYNC)}, got {sync!r}")
        self.path = Path(path)
        _create_private(self.path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={_SYNC[sync]}")
        self._db.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                         "body TEXT NOT NULL)")
        row = self._db.execute("SELECT MAX(seq) FROM events").fetchone()
        self.seq: int = row[0] or 0
        self.migrated = self._digest_clear_tokens()

    def _digest_clear_tokens(self) -> int:
        """Rewrite ``StartRun`` rows of older versions (clear ``token``) to ``token_digest``;
        returns how many rows changed."""
        rows = self._db.execute("SELECT seq, body FROM events WHERE kind = 'StartRun' AND body LIKE ?",
                                ('%"token":%',)).fetchall()
        fixed = []
        for seq, body in rows:
            doc = json.loads(body)
            if "token" in doc:
                doc["token_digest"] = token_digest(doc.pop("token"))
                fixed.append((json.dumps(doc, separators=(",", ":")), seq))
        if fixed:
            self._db.execute("PRAGMA secure_delete=ON")
            self._db.execute("BEGIN")
            self._db.executemany("UPDATE events SET body = ? WHERE seq = ?", fixed)
            self._db.execute("COMMIT")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            log.info("journal %s: replaced the clear tokens of %d runs by their digests", self.path, len(fixed))
        return len(fixed)

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
