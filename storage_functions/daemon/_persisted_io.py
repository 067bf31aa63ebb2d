"""The daemon's side of persisted copies with a lifetime (``_persisted`` holds the policy):
records each one (in memory and as a JSON object in COS), fixes their expiry when their run
ends (``Daemon.drop_run``), and deletes the copies whose lifetime is over from a sweep
thread every ``persist_sweep_s``. Not here: which keys the SDK may write (``_session``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from ._persisted import PersistedCopies, PersistedCopy, key_of_record, record_key, run_of_copy

__all__ = ["PersistedLifetimes", "PERSIST_PREFIX"]

log = logging.getLogger("storage_functions.daemon")

PERSIST_PREFIX = "persisted/"


class PersistedLifetimes:
    def __init__(self, cos: Any, cos_prefix: str, default_keep_s: float, count: Callable[[str, int], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.cos, self.cos_prefix, self.default_keep_s = cos, cos_prefix, default_keep_s
        self.count, self.clock = count, clock
        self.policy = PersistedCopies()
        self._lock = threading.Lock()

    def load(self) -> int:
        """The records an earlier daemon process left in COS; returns how many."""
        if self.cos is None:
            return 0
        n = 0
        for rec in self.cos.list(record_key(self.cos_prefix, "")):
            if key_of_record(self.cos_prefix, rec) is None:
                continue
            try:
                copy = PersistedCopy.from_json(self.cos.get(rec))
            except Exception as exc:  # noqa: BLE001 - one unreadable record must not stop the daemon
                log.warning("persisted-copy record %s is unreadable (%s); its copy lives until deleted", rec, exc)
                continue
            with self._lock:
                self.policy.restore(copy)
            n += 1
        return n

    def _write(self, copies: list[PersistedCopy]) -> None:
        for c in copies:
            self.cos.put(record_key(self.cos_prefix, c.key), c.to_json())

    def written(self, key: str, keep_s: float | None) -> None:
        """COS_PUT of ``persisted/<run>/<name>``: ``keep_s`` is the lifetime the SDK asked for
        (None: the default, ``persist_ttl_s``; 0 there means until deleted)."""
        if not key.startswith(PERSIST_PREFIX):
            return
        keep = self.default_keep_s if keep_s is None else keep_s
        with self._lock:
            if keep_s is None and not keep:
                self.policy.forget(key)  # rewritten without a lifetime: kept until deleted
                copy = None
            else:
                copy = self.policy.record(key, keep, self.clock())
        if copy is not None:
            self._write([copy])
        else:
            self.cos.delete(record_key(self.cos_prefix, key))

    def deleted(self, key: str) -> None:
        if key.startswith(PERSIST_PREFIX):
            with self._lock:
                known = self.policy.forget(key)
            if known:
                self.cos.delete(record_key(self.cos_prefix, key))

    def run_ended(self, run_id: str) -> None:
        with self._lock:
            changed = self.policy.run_ended(run_id, self.clock())
        if self.cos is not None:
            self._write(changed)

    def runs_waiting(self) -> set[str]:
        """The runs with copies whose expiry is not fixed yet (their end not seen)."""
        with self._lock:
            return {run_of_copy(c.key) for c in self.policy.copies.values() if c.expires_at is None}

    def lookup(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            c = self.policy.get(key)
        return None if c is None else {"keep_s": c.keep_s, "expires_at": c.expires_at}

    def sweep(self) -> list[str]:
        """Delete the copies whose lifetime is over (and their records); returns their keys."""
        with self._lock:
            due = self.policy.due(self.clock())
        for key in due:
            try:
                self.cos.delete(key)
                self.cos.delete(record_key(self.cos_prefix, key))
            except Exception as exc:  # noqa: BLE001 - retried by the next sweep
                log.warning("deleting expired persisted copy %s failed (%s); retrying", key, exc)
                with self._lock:
                    self.policy.restore(PersistedCopy(key, 0.0, self.clock()))
                continue
            self.count("persisted_expired", 1)
        return due
