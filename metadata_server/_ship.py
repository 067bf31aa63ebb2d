"""Shipping the journal to COS, and restoring it from there on a host that has lost it.

A ``JournalShipper`` uploads the journal's current generation (its snapshot
and its log, ``_journal``) under ``<cos_prefix>/control/metadata/<state-id>/``
off the request path: replies wait for the local group commit as before, and
a thread ships what the log gained every ``lag_s`` seconds. Keys::

    <prefix>/g<base:020d>-<started ms:015d>/snapshot        the snapshot the log follows (none at base 0)
    <prefix>/g<base:020d>-<started ms:015d>/log-<offset:020d> the log's bytes from that offset: whole records

A compaction (or a new process) starts a new generation; once its snapshot
and first log piece are up, every other generation is deleted. So a host
loss loses exactly the events journaled after the last shipped piece: at
most ``lag_s`` plus one upload's duration of answered requests (see
``restore_journal``). ``lag_s = 0`` ships synchronously instead: the handler
calls ``ship_once`` after each group commit (``MetadataHandler.after_journal``),
before the round's replies, so a host loss loses nothing answered and every
round waits one COS PUT.

``restore_journal`` rebuilds a missing local journal from the newest
generation with a whole snapshot: the snapshot, then the log pieces in order
while they follow one another; a torn piece is cut at its last whole record
when the journal opens, and pieces after a gap are ignored. The metadata
server never imports the COS adapters (``storage_functions``): the store is
any object with ``put``/``get``/``list``/``delete`` (``ControlStore``), which
the CLI opens. Not covered: the daemon's durable table (``storage_functions
.daemon._control_ship``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ._journal import SNAPSHOT_SUFFIX, Journal
from ._journal_format import JournalCorrupt, unframe_snapshot

__all__ = ["ControlStore", "JournalShipper", "RestoreReport", "control_prefix", "restore_journal",
           "DEFAULT_SHIP_LAG_S", "DEFAULT_STATE_ID"]

log = logging.getLogger("funcsion.metadata")

#: ship what the journal gained once a second: a host loss costs at most ~1 s of answered
#: requests, for one COS PUT per second per server (~2.6 M PUTs a month, ~$13 on S3 standard)
DEFAULT_SHIP_LAG_S = 1.0
DEFAULT_STATE_ID = "metadata-0"
_GEN = re.compile(r"^g(\d{20})-(\d{15})$")
_LOG = re.compile(r"^log-(\d{20})$")
_STATE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class ControlStore(Protocol):
    """The COS operations shipping needs (``storage_functions.cos.COS`` has them)."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def delete(self, key: str) -> None: ...


def control_prefix(cos_prefix: str, kind: str, state_id: str) -> str:
    """``<cos_prefix>/control/<kind>/<state_id>``: where one process's control state lives."""
    if not _STATE_ID.match(state_id):
        raise ValueError(f"state id {state_id!r} must be 1-63 letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit (e.g. metadata-0)")
    head = cos_prefix.strip("/")
    return f"{head}/control/{kind}/{state_id}" if head else f"control/{kind}/{state_id}"


class JournalShipper:
    """Ships ``journal`` under ``prefix`` within ``lag_s`` (see the module docstring)."""

    def __init__(self, journal: Journal, store: ControlStore, prefix: str, *, lag_s: float = DEFAULT_SHIP_LAG_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not lag_s >= 0:
            raise ValueError(f"control_ship_lag_s must be >= 0 seconds (0: synchronous), got {lag_s!r}")
        self.journal, self.store, self.prefix, self.lag_s = journal, store, prefix.rstrip("/"), lag_s
        self.synchronous = lag_s == 0
        self._ship_lock = threading.Lock()
        self._halted = False
        self._started_ms = int(clock() * 1000)
        self._gen = ""
        self._base = -1
        self._offset = 0
        self._clean = False
        self.shipped_bytes = 0
        self.restored: RestoreReport | None = None      # what the process restored from COS at start
        self.pieces = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _gen_name(self, base: int) -> str:
        return f"g{base:020d}-{self._started_ms:015d}"

    def ship_once(self) -> int:
        """Upload what the journal gained since the last call; returns the bytes shipped
        (nothing once ``halt`` was called)."""
        with self._ship_lock:
            return 0 if self._halted else self._ship()

    def _ship(self) -> int:
        base = self._base
        if self.journal.base != base:   # compacted (or the first call): read the snapshot only then
            base, snap = self.journal.generation()
            gen = self._gen_name(base)
            if snap is not None:
                self.store.put(f"{self.prefix}/{gen}/snapshot", snap)
            self._gen, self._base, self._offset, self._clean = gen, base, 0, False
        data = self.journal.read_since(base, self._offset)
        if data is None:            # compacted meanwhile: the next call starts the new generation
            return 0
        if data:
            self.store.put(f"{self.prefix}/{self._gen}/log-{self._offset:020d}", data)
            self._offset += len(data)
            self.shipped_bytes += len(data)
            self.pieces += 1
        if not self._clean and self._offset:
            for key in self.store.list(self.prefix + "/"):
                gen = key[len(self.prefix) + 1:].split("/", 1)[0]
                if gen != self._gen:
                    self.store.delete(key)
            self._clean = True
        return len(data)

    def start(self) -> None:
        """Ship every ``lag_s`` from a thread (synchronous: nothing to start, the handler ships)."""
        if self.synchronous:
            return
        self._thread = threading.Thread(target=self._loop, name="journal-shipper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.lag_s):
            self._ship_logged()

    def _ship_logged(self) -> None:
        try:
            self.ship_once()
        except Exception:  # noqa: BLE001 - COS down: keep the server up, retry next round, say so
            self.errors += 1
            log.exception("could not ship the journal to COS under %s (will retry in %.1f s; a host loss "
                          "now loses what was journaled since the last shipped piece)", self.prefix, self.lag_s)

    def halt(self) -> None:
        """Stop the thread without shipping what is left, as a killed process would (the
        embedded stack's ``kill_metadata``): COS keeps what was shipped, no more."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._ship_lock:               # waits for a round in progress
            self._halted = True

    def stop(self) -> None:
        """Stop the thread and ship what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._ship_logged()


@dataclass(slots=True)
class RestoreReport:
    """What ``restore_journal`` did: the generation it used (``""``: nothing in COS), the
    snapshot's events (``base``), the log pieces it wrote and those after a gap it ignored."""

    generation: str = ""
    base: int = 0
    pieces: int = 0
    log_bytes: int = 0
    ignored: int = 0


def restore_journal(store: ControlStore, prefix: str, path: str | Path) -> RestoreReport:
    """Write the journal at ``path`` (which must not exist or be empty) from COS."""
    path = Path(path)
    snap_path = path.with_name(path.name + SNAPSHOT_SUFFIX)
    if (path.exists() and path.stat().st_size) or snap_path.exists():
        raise ValueError(f"journal {path} exists already: restore from COS only into an empty state directory "
                         "(move the journal aside to restore)")
    prefix = prefix.rstrip("/")
    gens: dict[str, dict[int, str]] = {}
    snaps: dict[str, str] = {}
    for key in store.list(prefix + "/"):
        parts = key[len(prefix) + 1:].split("/")
        if len(parts) != 2 or not _GEN.match(parts[0]):
            continue
        gens.setdefault(parts[0], {})
        m = _LOG.match(parts[1])
        if m:
            gens[parts[0]][int(m.group(1))] = key
        elif parts[1] == "snapshot":
            snaps[parts[0]] = key
    report = RestoreReport()
    for gen in sorted(gens, reverse=True):
        base = int(_GEN.match(gen).group(1))  # type: ignore[union-attr]
        snap = b""
        if base:
            if gen not in snaps:
                continue            # its snapshot never arrived: an upload the old host did not finish
            snap = store.get(snaps[gen])
            try:
                seq, _ = unframe_snapshot(snap, f"COS object {snaps[gen]}")
            except JournalCorrupt as exc:
                log.warning("skipping generation %s: %s", gen, exc)
                continue
            if seq != base:
                continue
        body = bytearray()
        pieces = gens[gen]
        for offset in sorted(pieces):
            if offset != len(body):
                break
            body += store.get(pieces[offset])
            report.pieces += 1
        report.ignored = len(pieces) - report.pieces
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if snap:
            snap_path.write_bytes(snap)
            snap_path.chmod(0o600)
        path.write_bytes(bytes(body))
        path.chmod(0o600)
        report.generation, report.base, report.log_bytes = gen, base, len(body)
        log.info("restored journal %s from COS %s/%s: snapshot of %d events, %d log pieces (%d bytes), "
                 "%d after a gap ignored", path, prefix, gen, base, report.pieces, len(body), report.ignored)
        return report
    return report
