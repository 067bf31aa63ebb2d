"""A run whose driver was killed is ended by the next stack on its state directory, not left
to its TTL (issue 30, 3): ``kill -9`` of ``funcsion run`` (and its embedded stack) while the run
holds data, then a stack starts there: the run is ended at once and its COS copies go."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdk._config import Config
from sdk.local._drivers import DRIVERS_DIR
from sdk.local._stack import Stack

from tests._waiting import wait_for

SLOW = Path(__file__).resolve().parent / "slowwf"


def _wait(what: str, cond: Callable[[], Any], timeout: float) -> Any:
    return wait_for(cond, timeout, what)


def _copies(state: Path, run_id: str) -> list[Path]:
    """The daemon's COS copies of the run's objects (outputs and persisted copies aside)."""
    return [p for p in (state / "cos").rglob("*") if p.is_file() and "objects" in p.parts
            and f"k-{run_id}%252F" in str(p)]


@pytest.mark.slow
def test_a_killed_drivers_run_is_ended_when_a_stack_starts(tmp_path: Path) -> None:
    wf = tmp_path / "wf"
    shutil.copytree(SLOW, wf)
    (wf / "src.txt").write_text("payload ")
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "run", str(wf / "slow.wds.json"), "--state-dir",
                             str(state), "--input", f"src={wf / 'src.txt'}", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=wf)
    try:
        run_id = _wait("the consumer task to start", lambda: (wf / "STARTED").exists() and
                       (wf / "STARTED").read_text(), 60)
        _wait("the run's COS copy", lambda: _copies(state, run_id), 30)
        assert (state / DRIVERS_DIR / f"{run_id}.lock").exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    cfg = Config.load(state_dir=str(state), env={})
    assert cfg.run_ttl_s >= 600  # the default TTL: only the driver check can end the run in time
    t0 = time.monotonic()
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        assert stack.orphans_ended == [run_id]
        summary = next(r for r in stack.stats()["runs"] if r["run_id"] == run_id)
        assert summary["state"] == "ended" and summary["outcome"] == "aborted"
        _wait("the killed run's COS copies to go", lambda: not _copies(state, run_id), 10)
    assert time.monotonic() - t0 < 20
    assert not (state / DRIVERS_DIR / f"{run_id}.lock").exists()
    assert (state / "cos" / "persisted" / run_id).is_dir()  # a persisted copy stays


@pytest.mark.slow
def test_a_run_on_a_stack_that_dies_gives_up_in_seconds(tmp_path: Path) -> None:
    """`funcsion up`, a run on it, the stack killed while a task holds data: the run ends
    with a report within seconds (it took 30-62 s: the driver and the tasks waited for the
    dead daemon as for one restarting), and the report names the stack it used."""
    import json
    import os
    import signal
    import threading

    import sdk
    from sdk.cli._summary import format_report

    wf = tmp_path / "wf"
    shutil.copytree(SLOW, wf)
    (wf / "src.txt").write_text("payload ")
    state = tmp_path / "state"
    up = subprocess.run([sys.executable, "-m", "sdk.cli", "up", "--state-dir", str(state)], capture_output=True,
                        text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    pid = int(json.loads((state / "stack.json").read_text())["pid"])
    killed = threading.Event()
    when: list[float] = []

    def kill_when_started() -> None:
        _wait("the consumer task to start", lambda: (wf / "STARTED").exists(), 60)
        os.kill(pid, signal.SIGKILL)
        when.append(time.monotonic())
        killed.set()
        (wf / "RELEASE").write_text("")  # the consumer goes on, to a stack that is gone

    killer = threading.Thread(target=kill_when_started, daemon=True)
    killer.start()
    try:
        report = sdk.run(wf / "slow.wds.json", inputs={"src": wf / "src.txt"}, state_dir=str(state))
    finally:
        if not killed.is_set():
            os.kill(pid, signal.SIGKILL)
    took = time.monotonic() - when[0]
    assert report.status == "failed" and "metadata server" in str(report.error)
    assert took < 10, f"the run took {took:.1f} s to give up"
    stack = report.raw["stack"]
    assert stack["kind"] == "up" and stack["stack_file"] == str((state / "stack.json").resolve())
    assert stack["pid"] == pid and stack["metadata"] and stack["daemon"]
    assert f"  stack: the one `funcsion up` keeps in {state.resolve()}" in format_report(report.raw)
