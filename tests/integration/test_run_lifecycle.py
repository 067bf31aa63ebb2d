"""Every way a run stops ends it, and nothing of it stays behind: Ctrl-C in a
stack kept up by `funcsion up`, a failing output copy, `kill -9` of the whole
embedded stack (restarted later), two runs on one state directory, and the
modes of what the stack writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk._client import parse_addr
from sdk._store_client import StoreClient
from sdk.cli._common import stack_endpoints
from sdk.local._stack import read_stack_file

SLOW = Path(__file__).resolve().parent / "slowwf"


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    d = tmp_path / "wf"
    shutil.copytree(SLOW, d)
    (d / "src.txt").write_text("payload ")
    return d


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def start_run(wf: Path, state: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sdk.cli", "run", str(wf / "slow.wds.json"), "--json",
                             "--state-dir", str(state), "--input", f"src={wf / 'src.txt'}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=wf, env=env)


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def started(wf: Path, proc: subprocess.Popen[str]) -> str:
    """The run id, once the consumer task holds its input (or fail if the run ended first)."""
    def ready() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early ({proc.returncode}): {proc.communicate()}")
        marker = wf / "STARTED"
        return marker.read_text() if marker.exists() and marker.read_text() else None
    return str(wait_for("the consumer task to start", ready))


def daemon_copies(state: Path, run_id: str) -> list[Path]:
    """Files the daemon wrote for the run: COS copies under cos/sion/objects, buffer files."""
    # the COS key's segment k-<run>%2F<name> is percent-encoded once more as a directory name
    cos = [p for p in (state / "cos").rglob("*") if p.is_file() and "objects" in p.parts
           and f"k-{run_id}%252F" in str(p)]
    buf = [p for p in (state / "buffer").glob("*.buf") if f"k-{run_id}%2F" in p.name]
    return cos + buf


def cos_leftovers(state: Path) -> list[str]:
    """Everything in the COS directory but outputs and persisted copies, its temp dir, and the
    storage functions' insertion logs and snapshots (SION Sec. 5.5.1: per function, not per run)."""
    root = state / "cos"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and p.relative_to(root).parts[0] not in ("outputs", "persisted", "%tmp")
                  and p.relative_to(root).parts[:2] != ("sion", "functions"))


@pytest.fixture
def stack_up(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    up = cli("up", "--state-dir", str(state), cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    try:
        yield state
    finally:
        cli("down", "--state-dir", str(state), cwd=tmp_path)


@pytest.mark.slow
def test_sigint_ends_the_run_in_a_stack_kept_up(workflow: Path, stack_up: Path) -> None:
    state = stack_up
    info = read_stack_file(state)
    assert info is not None
    ep = stack_endpoints(info)
    proc = start_run(workflow, state)
    try:
        run_id = started(workflow, proc)
        with StoreClient(parse_addr(ep.daemon), ep.store_token) as store:
            assert store.stats()["bytes"] >= 3 * 2**20  # the run holds 'mid' in the daemon (the only run)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 1, err
            assert "Traceback" not in err
            report = json.loads(out.strip().splitlines()[-1])
            assert report["status"] == "aborted" and report["run_id"] == run_id
            assert "SIGINT" in report["error"] and "consumer" in report["error"]
            assert report["memory"]["leaked_bytes"] == 0
            assert report["tasks"]["producer"]["state"] == "succeeded"
            assert run_id not in store.stats()["runs"]  # the stack's daemon holds nothing for the run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    from sdk._client import Client

    with Client(ep) as c:
        summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run_id)
    assert summary["state"] == "ended" and summary["outcome"] == "aborted"
    assert summary["live_bytes"] == 0 and summary["allocated_bytes"] == 0
    assert wait_for("the daemon's COS copies of the run to go", lambda: not daemon_copies(state, run_id), 10)
    assert (state / "cos" / "persisted" / run_id).is_dir()  # the persisted copy stays


@pytest.mark.slow
def test_an_output_copy_that_fails_ends_the_run_with_a_report(workflow: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "cos").mkdir(parents=True)
    (state / "cos" / "outputs").write_text("in the way")  # COS cannot make the directory outputs/<run>/
    (workflow / "RELEASE").write_text("")
    proc = cli("run", str(workflow / "slow.wds.json"), "--json", "--state-dir", str(state),
               "--input", f"src={workflow / 'src.txt'}", cwd=workflow)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["status"] == "failed" and report["failed_task"] is None
    assert "output copy of 'result'" in report["error"]
    assert report["memory"]["leaked_bytes"] == 0
    assert "output copy of 'result'" in proc.stderr


@pytest.mark.slow
def test_kill_9_of_a_run_and_its_stack_leaves_nothing_after_a_restart(workflow: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    # short, but longer than the producer's first put may take while the run's storage functions warm up
    # (handlers load before the run starts, so that put comes at once); a put in flight is no activity
    env = {**os.environ, "FUNCSION_RUN_TTL_S": "6"}
    proc = start_run(workflow, state, env=env)  # the embedded stack lives in this process
    try:
        run_id = started(workflow, proc)
        wait_for("the run's COS copy", lambda: any("objects" in p.parts for p in daemon_copies(state, run_id)))
    finally:
        proc.kill()
        proc.communicate()
    assert daemon_copies(state, run_id)
    (state / "buffer" / f"sion_objects_k-{run_id}%2Fmid_00000009.buf").write_bytes(b"x" * 100)  # a write cut short
    # and leftovers of a run the metadata server never heard of (say, its journal was lost)
    unknown = state / "cos" / "sion" / "objects" / "k-r-99%252Fx"
    unknown.mkdir(parents=True)
    (unknown / "00000001%obj").write_bytes(b"x" * 100)
    (state / "buffer" / "sion_objects_k-r-99%2Fx_00000001.buf").write_bytes(b"x" * 100)
    assert len(daemon_copies(state, "r-99")) == 2
    up = cli("up", "--state-dir", str(state), cwd=tmp_path, env=env)
    assert up.returncode == 0, up.stderr
    try:
        assert daemon_copies(state, "r-99") == []  # swept before the stack came up
        # the restarted stack's metadata server expires the run (its TTL passed), and the daemon
        # drops what the killed one left for it
        wait_for("the killed run's COS copies and buffer files to go", lambda: not daemon_copies(state, run_id), 30)
        assert cos_leftovers(state) == []
        assert (state / "cos" / "persisted" / run_id).is_dir()
    finally:
        cli("down", "--state-dir", str(state), cwd=tmp_path)


@pytest.mark.slow
def test_a_second_embedded_run_on_one_state_dir_fails_at_once(workflow: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_run(workflow, state)
    try:
        run_id = started(workflow, first)
        t0 = time.monotonic()
        second = cli("run", str(workflow / "slow.wds.json"), "--state-dir", str(state),
                     "--input", f"src={workflow / 'src.txt'}", cwd=workflow, timeout=60)
        assert time.monotonic() - t0 < 30
        assert second.returncode == 1, second.stderr
        assert "Traceback" not in second.stderr
        assert f"is in use by another funcsion stack (pid {first.pid}" in second.stderr
        assert "--state-dir" in second.stderr and "funcsion up" in second.stderr
        up = cli("up", "--state-dir", str(state), cwd=tmp_path, timeout=60)  # nor can a stack start there
        assert up.returncode == 2 and f"in use by another funcsion stack (pid {first.pid}" in up.stderr
        (workflow / "RELEASE").write_text("")
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        assert report["status"] == "succeeded" and report["run_id"] == run_id
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()


@pytest.mark.slow
def test_what_the_stack_writes_is_private(workflow: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    (workflow / "RELEASE").write_text("")
    old = os.umask(0o022)  # a usual umask: what is private must not depend on it
    try:
        proc = cli("run", str(workflow / "slow.wds.json"), "--state-dir", str(state),
                   "--input", f"src={workflow / 'src.txt'}", cwd=workflow)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    journal = {"metadata.journal", "metadata.journal-wal", "metadata.journal-shm"}  # the journal's own modes
    seen = {"dirs": 0, "files": 0}
    for p in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        if p.is_dir():
            seen["dirs"] += 1
            assert mode == 0o700, f"{p}: {oct(mode)}"
        elif p.name not in journal:
            seen["files"] += 1
            assert mode == 0o600, f"{p}: {oct(mode)}"
    names = {p.relative_to(state).parts[0] for p in state.rglob("*")}
    assert {"cos", "logs", "lock"} <= names
    assert any(p.suffix == ".log" for p in (state / "logs").iterdir())
    assert seen["files"] >= 4


def test_crash_names_an_unknown_task(workflow: Path, tmp_path: Path) -> None:
    proc = cli("run", str(workflow / "slow.wds.json"), "--state-dir", str(tmp_path / "state"),
               "--input", f"src={workflow / 'src.txt'}", "--crash", "consumr", cwd=workflow, timeout=60)
    assert proc.returncode == 2
    assert "--crash consumr" in proc.stderr and "no task 'consumr'" in proc.stderr
    assert "did you mean 'consumer'?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists()  # refused before any stack started


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_input_must_be_a_regular_file(workflow: Path, tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)  # no writer: reading it would wait forever
        what = "a FIFO"
    elif kind == "dev_zero":
        path = Path("/dev/zero")  # reading it never ends (MemoryError)
        what = "a character device"
    else:
        path = tmp_path
        what = "a directory"
    proc = cli("run", str(workflow / "slow.wds.json"), "--state-dir", str(tmp_path / "state"),
               "--input", f"src={path}", cwd=workflow, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"--input src={path}: not a regular file ({what})" in proc.stderr
    assert "Traceback" not in proc.stderr
