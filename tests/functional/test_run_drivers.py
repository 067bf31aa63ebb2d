"""Runs whose driver died are ended, and locks name only live holders (issue 30, 3): the state
directory's lock file is emptied on release; a run's driver lock is free once its driver is
killed (even by ``kill -9``), held while it lives, and ``end_orphaned_runs`` ends the runs of
free locks only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from sdk.local._drivers import DRIVERS_DIR, DriverLock, end_orphaned_runs, orphaned
from sdk.local._statedir import LOCK_FILE, StateDirLock

HOLD = """
import sys
from sdk.local._drivers import DriverLock
lock = DriverLock(sys.argv[1], sys.argv[2]).acquire()
print("locked", flush=True)
sys.stdin.read()  # until the test closes it, or kills this process
"""


def _driver(state: Path, run_id: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state), run_id], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
    return proc


def test_the_state_dir_lock_names_no_one_once_released(tmp_path: Path) -> None:
    lock = StateDirLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).read_text().startswith(f"{os.getpid()} ")
    lock.release()
    assert (tmp_path / LOCK_FILE).read_text() == ""
    again = StateDirLock(tmp_path).acquire()  # and the next holder names itself
    assert (tmp_path / LOCK_FILE).read_text().startswith(f"{os.getpid()} ")
    again.release()


class _Metadata:
    """The two admin calls ``end_orphaned_runs`` makes, on a dict of runs."""

    def __init__(self, runs: dict[str, str]) -> None:
        self.runs = runs

    def stats(self) -> dict[str, Any]:
        return {"runs": [{"run_id": r, "state": s} for r, s in self.runs.items()]}

    def end_run(self, run_id: str, outcome: str) -> dict[str, Any]:
        assert self.runs[run_id] == "running"
        self.runs[run_id] = f"ended {outcome}"
        return {}


def test_runs_of_dead_drivers_are_ended_and_live_ones_kept(tmp_path: Path) -> None:
    live, killed = _driver(tmp_path, "r-1"), _driver(tmp_path, "r-2")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
        assert orphaned(tmp_path, ["r-1", "r-2", "r-3"]) == ["r-2"]  # r-3: no driver recorded
        md = _Metadata({"r-1": "running", "r-2": "running", "r-3": "running", "r-4": "ended"})
        assert end_orphaned_runs(tmp_path, md) == ["r-2"]
        assert md.runs == {"r-1": "running", "r-2": "ended aborted", "r-3": "running", "r-4": "ended"}
        assert not (tmp_path / DRIVERS_DIR / "r-2.lock").exists()
        assert (tmp_path / DRIVERS_DIR / "r-1.lock").read_text().startswith(f"{live.pid} ")
    finally:
        for proc in (live, killed):
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)
    with DriverLock(tmp_path, "r-5"):
        assert orphaned(tmp_path, ["r-5"]) == []
    assert not (tmp_path / DRIVERS_DIR / "r-5.lock").exists()  # a run ended by its driver leaves no file
    assert [p.name for p in (tmp_path / DRIVERS_DIR).iterdir()] == ["r-1.lock"]
