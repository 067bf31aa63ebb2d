"""The daemon's durable table shipped to COS, and restored from there on a new host.

A ``TableShipper`` uploads the durable log (``_durable``) under
``<cos_prefix>/control/daemon/<state-id>/`` every ``control_ship_lag_s``,
off the request path (a PUT is acknowledged once its record is in the local
file, as before); with ``control_ship_lag_s = 0`` each record is shipped
before the call that logged it returns (a PUT waits one COS PUT more). Keys::

    <prefix>/g<started ms:015d>-<compactions:010d>/log-<offset:020d>   the log's bytes from that offset

A compaction rewrites the file, so the next round starts a new generation
from offset 0; once a generation's first piece is up, the others are
deleted. ``restore_table`` writes a missing local log from the newest
generation: its pieces in order while they follow one another (the log's
replay cuts a torn last record). Together with the write-behind upload this
bounds what a lost host costs: versions PUT in the last
``control_ship_lag_s`` are unknown to the replacement (their metadata
records still name them: their chunks stay with the functions, unfound), and
versions whose COS upload had not finished (``upload_delay_s`` and the
upload queue) are readable only from function memory that outlived the host.
Not covered: what a restarted daemon does with the restored log
(``_restore``); the metadata journal (``metadata_server._ship``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..private_files import FILE_MODE
from ._durable import DurableLog

__all__ = ["TableShipper", "restore_table", "table_prefix"]

log = logging.getLogger("storage_functions.daemon")
_GEN = re.compile(r"^g(\d{15})-(\d{10})$")
_LOG = re.compile(r"^log-(\d{20})$")
_STATE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def table_prefix(cos_prefix: str, state_id: str) -> str:
    """``<cos_prefix>/control/daemon/<state_id>``."""
    if not _STATE_ID.match(state_id):
        raise ValueError(f"daemon state id {state_id!r} must be 1-63 letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit (e.g. daemon-0)")
    head = cos_prefix.strip("/")
    return f"{head}/control/daemon/{state_id}" if head else f"control/daemon/{state_id}"


class TableShipper:
    """Ships ``table`` to ``cos`` under ``prefix`` every ``lag_s`` seconds (module docstring)."""

    def __init__(self, table: DurableLog, cos: Any, prefix: str, *, lag_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        if not lag_s >= 0:
            raise ValueError(f"control_ship_lag_s must be >= 0 seconds (0: synchronous), got {lag_s!r}")
        self.table, self.cos, self.prefix, self.lag_s = table, cos, prefix.rstrip("/"), lag_s
        self.synchronous = lag_s == 0
        self._ship_lock = threading.Lock()
        self._started_ms = int(clock() * 1000)
        self._compactions = -1
        self._gen = ""
        self._offset = 0
        self._clean = False
        self.pieces = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ship_once(self) -> int:
        """Upload what the log gained since the last call; returns the bytes shipped."""
        with self._ship_lock:
            return self._ship()

    def _ship(self) -> int:
        n = self.table.compactions
        if n != self._compactions:
            self._compactions, self._offset, self._clean = n, 0, False
            self._gen = f"g{self._started_ms:015d}-{n:010d}"
        data = self.table.read_since(n, self._offset)
        if data is None:
            return 0
        if data:
            self.cos.put(f"{self.prefix}/{self._gen}/log-{self._offset:020d}", data)
            self._offset += len(data)
            self.pieces += 1
        if not self._clean and self._offset:
            for key in self.cos.list(self.prefix + "/"):
                if key[len(self.prefix) + 1:].split("/", 1)[0] != self._gen:
                    self.cos.delete(key)
            self._clean = True
        return len(data)

    def start(self) -> None:
        """Ship every ``lag_s`` from a thread (synchronous: the table's hooks ship instead)."""
        if self.synchronous:
            return
        self._thread = threading.Thread(target=self._loop, name="sion-table-shipper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.lag_s):
            self._ship_logged()

    def _ship_logged(self) -> None:
        try:
            self.ship_once()
        except Exception:  # noqa: BLE001 - COS down: keep serving, retry next round, say so
            self.errors += 1
            log.exception("could not ship the durable table to COS under %s (retrying in %.1f s)", self.prefix,
                          self.lag_s)

    def stop(self) -> None:
        """Stop the thread and ship what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._ship_logged()


def restore_table(cos: Any, prefix: str, path: str | Path) -> int:
    """Write the durable log at ``path`` (missing) from COS; returns the bytes written (0:
    nothing shipped under ``prefix``)."""
    path = Path(path)
    prefix = prefix.rstrip("/")
    gens: dict[str, dict[int, str]] = {}
    for key in cos.list(prefix + "/"):
        parts = key[len(prefix) + 1:].split("/")
        if len(parts) == 2 and _GEN.match(parts[0]):
            m = _LOG.match(parts[1])
            if m:
                gens.setdefault(parts[0], {})[int(m.group(1))] = key
    if not gens:
        return 0
    gen = max(gens)
    body = bytearray()
    for offset in sorted(gens[gen]):
        if offset != len(body):
            log.warning("durable table in COS %s/%s: a piece is missing at byte %d; the pieces after it are "
                        "ignored", prefix, gen, len(body))
            break
        body += cos.get(gens[gen][offset])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.write(fd, bytes(body))
    finally:
        os.close(fd)
    log.info("restored the durable table %s from COS %s/%s (%d bytes)", path, prefix, gen, len(body))
    return len(body)
