"""The state directory's lock: one embedded stack per state directory.

Two stacks on one directory would share its metadata journal and COS and
corrupt both (SQLite refuses the second writer's events mid-run). A stack
takes an exclusive ``flock`` on ``<state_dir>/lock`` before it opens
anything and holds it until it stops; the kernel drops it when the process
dies, even by ``kill -9``, so a crash never leaves a stale lock. The file
names the holder (pid and command line) for the error a second stack gets, and is
emptied when the holder releases it (a stack stopped, ``funcsion run`` after Ctrl-C).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from typing import IO, Any

from storage_functions.private_files import open_private, private_dir

from ._stack_errors import StateDirBusy

__all__ = ["StateDirLock", "LOCK_FILE"]

LOCK_FILE = "lock"


class StateDirLock:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / LOCK_FILE
        self._fh: IO[Any] | None = None

    def acquire(self) -> StateDirLock:
        """Take the lock or raise ``StateDirBusy`` at once (never waits)."""
        private_dir(self.dir, tighten=True)
        fh = open_private(self.path, "ab")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise StateDirBusy(self._busy_message()) from None
        except BaseException:
            fh.close()
            raise
        fh.truncate(0)
        fh.write(f"{os.getpid()} {' '.join(sys.argv)}\n".encode())
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.truncate(0)  # still ours: once released, the file names no holder (a dead pid misleads)
            finally:
                fh.close()  # closing drops the flock; the file stays (unlinking it would race a new holder)

    @property
    def held(self) -> bool:
        return self._fh is not None

    def _busy_message(self) -> str:
        try:
            holder = self.path.read_text(errors="replace").strip()
        except OSError:
            holder = ""
        pid, _, cmd = holder.partition(" ")
        who = f"pid {pid}: {cmd}" if cmd else f"pid {pid}" if pid else "another process"
        return (f"state directory {self.dir} is in use by another funcsion stack ({who}); wait for it to "
                "finish, give this one its own --state-dir, or keep one stack up with `funcsion up` so that "
                "runs share it")
