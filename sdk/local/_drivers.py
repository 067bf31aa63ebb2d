"""Which process drives each run, so that runs whose driver died are ended at once rather
than at their TTL (an hour by default, holding their COS copies meanwhile).

A driver (``run_workflow``: ``funcsion run``, ``sdk.run``) takes an exclusive ``flock`` on
``<state_dir>/drivers/<run_id>.lock`` as soon as its run started and holds it until the run
is ended and reported; the file names the driver (pid and command line). The kernel drops
the lock when the process dies, even by ``kill -9``, so a lock file that can be locked
belongs to a dead driver. ``end_orphaned_runs`` (a stack starting on the state directory,
and every driver before it starts a run on a stack ``funcsion up`` keeps) ends each run the
metadata server still has running whose lock file is free, as ``aborted``; the stack's
control loop then drops its data. A run without a lock file (driven through ``sdk.Client``
directly, or started elsewhere) is left to its TTL.

Not here: the state directory's own lock (``_statedir``), or what ending a run frees.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from storage_functions.private_files import open_private, private_dir

__all__ = ["DriverLock", "DRIVERS_DIR", "orphaned", "end_orphaned_runs"]

DRIVERS_DIR = "drivers"
log = logging.getLogger("funcsion.drivers")


class DriverLock:
    """This process drives run ``run_id`` (see the module docstring)."""

    def __init__(self, state_dir: str | Path, run_id: str) -> None:
        self.path = Path(state_dir) / DRIVERS_DIR / f"{run_id}.lock"
        self._fh: IO[Any] | None = None

    def acquire(self) -> DriverLock:
        """Lock a new file, then give it its name: a sweep never sees it unlocked while we live."""
        private_dir(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fh = open_private(tmp, "wb")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fh.write(f"{os.getpid()} {' '.join(sys.argv)}\n".encode())
            fh.flush()
            os.replace(tmp, self.path)
        except BaseException:
            fh.close()
            tmp.unlink(missing_ok=True)
            raise
        self._fh = fh
        return self

    def release(self) -> None:
        """The run was ended: the file goes (unlinked while still locked, so a sweep that opened
        it meanwhile finds the run ended, never a live driver's run)."""
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                self.path.unlink(missing_ok=True)
            finally:
                fh.close()

    def __enter__(self) -> DriverLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def orphaned(state_dir: str | Path, run_ids: Iterable[str]) -> list[str]:
    """The runs among ``run_ids`` whose driver lock file exists and is not held: their driver died."""
    d = Path(state_dir) / DRIVERS_DIR
    out = []
    for run_id in run_ids:
        try:
            fh = open(d / f"{run_id}.lock", "rb")
        except OSError:
            continue  # no driver recorded: not ours to end
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its driver holds it
            out.append(run_id)
    return out


def end_orphaned_runs(state_dir: str | Path, metadata: Any) -> list[str]:
    """End (``aborted``) every running run of ``metadata`` (an admin ``MetadataClient``) whose
    driver died; returns their ids. Best effort: a run that cannot be ended is left to its TTL."""
    try:
        running = [r["run_id"] for r in metadata.stats().get("runs", []) if r.get("state") == "running"]
    except Exception as exc:  # noqa: BLE001 - no server to ask: nothing to end now
        log.debug("listing runs to end orphans: %r", exc)
        return []
    ended = []
    for run_id in orphaned(state_dir, running):
        try:
            metadata.end_run(run_id, "aborted")
        except Exception as exc:  # noqa: BLE001 - ended meanwhile, or the server went away
            log.debug("ending run %s whose driver is gone: %r", run_id, exc)
            continue
        ended.append(run_id)
        (Path(state_dir) / DRIVERS_DIR / f"{run_id}.lock").unlink(missing_ok=True)
    return ended
