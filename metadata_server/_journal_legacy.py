"""Journals of earlier versions: SQLite (WAL) databases with one row per event.

``is_sqlite`` recognises one from its first bytes; ``read_events`` yields its
events oldest first, in batches. Before reading, ``scrub_clear_tokens``
rewrites the ``StartRun`` rows of the oldest versions, which held the run's
token in clear, to its digest, with SQLite's ``secure_delete`` on and a WAL
checkpoint after, so the clear tokens are overwritten in the file (and its
``-wal``) before ``_journal`` converts the file and unlinks it. Not covered:
writing SQLite journals (nothing writes them any more).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ._events import EVENT_TYPES, Event
from ._tokens import token_digest

__all__ = ["SQLITE_MAGIC", "is_sqlite", "open_legacy", "read_events", "scrub_clear_tokens"]

log = logging.getLogger("funcsion.metadata")
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(head: bytes) -> bool:
    """True when a file starting with ``head`` is a SQLite database."""
    return head.startswith(SQLITE_MAGIC)


def open_legacy(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def scrub_clear_tokens(db: sqlite3.Connection, path: Path) -> int:
    """Rewrite ``StartRun`` rows with a clear ``token`` to ``token_digest``; how many changed."""
    rows = db.execute("SELECT seq, body FROM events WHERE kind = 'StartRun' AND body LIKE ?",
                      ('%"token":%',)).fetchall()
    fixed = []
    for seq, body in rows:
        doc = json.loads(body)
        if "token" in doc:
            doc["token_digest"] = token_digest(doc.pop("token"))
            fixed.append((json.dumps(doc, separators=(",", ":")), seq))
    if fixed:
        db.execute("PRAGMA secure_delete=ON")
        db.execute("BEGIN")
        db.executemany("UPDATE events SET body = ? WHERE seq = ?", fixed)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        log.info("journal %s: replaced the clear tokens of %d runs by their digests", path, len(fixed))
    return len(fixed)


def read_events(db: sqlite3.Connection, batch: int = 10_000) -> Iterator[list[Event]]:
    """Every event of a SQLite journal, oldest first, ``batch`` at a time."""
    has_table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone()
    if not has_table:
        return
    cur = db.execute("SELECT kind, body FROM events ORDER BY seq")
    while True:
        rows = cur.fetchmany(batch)
        if not rows:
            return
        yield [EVENT_TYPES[kind](**json.loads(body)) for kind, body in rows]
