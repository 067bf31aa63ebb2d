"""A run's data in the daemon: held per run (STAT), dropped whole when the run
ends (also what an earlier, killed daemon left in COS and the buffer), and
swept at start for runs that are not running; buffer and COS files private."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore, cos_object_key

MiB = 1 << 20


def keys_of(st: LocalStore, run: str) -> list[str]:
    return st.cos.list(f"sion/objects/k-{run}%2F")


def leftover_buffer_file(st: LocalStore, key: str, version: int) -> Path:
    """What a daemon killed while a PUT streamed leaves in its buffer directory."""
    path = Path(st.daemon.buffer_dir) / (cos_object_key("sion", key, version).replace("/", "_") + ".buf")
    path.write_bytes(b"cut short")
    return path


def test_stat_counts_per_run_and_drop_run_takes_everything_of_one_run() -> None:
    with LocalStore(idle_s=1.0) as st, StoreClient(st.address, st.token) as c:
        c.put("r-1/a", os.urandom(2 * MiB))
        c.put("r-1/b", b"small" * 10)
        c.put("r-10/a", os.urandom(MiB))  # r-1's prefix must not take r-10
        c.put("unscoped", b"x")
        assert st.daemon.wait_uploads(20)
        runs = c.stats()["runs"]
        assert runs["r-1"] == {"objects": 2, "bytes": 2 * MiB + 50} and runs["r-10"]["objects"] == 1
        assert "unscoped" not in runs
        stray = leftover_buffer_file(st, "r-1/c", 1)
        assert len(keys_of(st, "r-1")) == 2
        assert st.daemon.drop_run("r-1") == 2
        assert keys_of(st, "r-1") == [] and not stray.exists()
        assert "r-1" not in c.stats()["runs"]
        assert len(keys_of(st, "r-10")) == 1 and c.get("r-10/a")
        assert c.get("unscoped") == b"x"


@pytest.mark.slow
def test_a_restarted_daemon_drops_what_a_killed_one_left() -> None:
    root = tempfile.mkdtemp(prefix="sion-runs-")
    with LocalStore(root, idle_s=1.0) as st, StoreClient(st.address, st.token) as c:
        for run in ("r-1", "r-2", "r-3"):
            c.put(f"{run}/x", os.urandom(MiB + 1))
        assert st.daemon.wait_uploads(20)
    # the daemon process is gone; a new one restores these versions from its table log
    # (_durable) but not a buffer file no table ever recorded
    with LocalStore(root, idle_s=1.0) as st:
        stray = leftover_buffer_file(st, "r-1/y", 3)
        # r-3 ends now: its drop finds the restored version and drops it, COS copy included
        assert st.daemon.drop_run("r-3") == 1
        assert keys_of(st, "r-3") == []
        assert st.daemon.sweep_runs(lambda run: run == "r-2") == ["r-1"]  # r-2 still running
        assert keys_of(st, "r-1") == [] and not stray.exists()
        assert len(keys_of(st, "r-2")) == 1


@pytest.mark.slow
def test_buffer_and_cos_files_are_private() -> None:
    old = os.umask(0o022)  # a usual umask: what is private must not depend on it
    try:
        with LocalStore(upload_delay_s=1.0, idle_s=1.0) as st, StoreClient(st.address, st.token) as c:
            c.put("r-1/a", os.urandom(2 * MiB))
            bufs = list(Path(st.daemon.buffer_dir).iterdir())  # the upload waits: the file is there
            assert bufs and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in bufs)
            assert stat.S_IMODE(os.stat(st.daemon.buffer_dir).st_mode) == 0o700
            assert st.daemon.wait_uploads(20)
            cos_root = Path(st.root) / "cos"
            modes = {p: (p.is_dir(), stat.S_IMODE(p.stat().st_mode)) for p in [cos_root, *cos_root.rglob("*")]}
    finally:
        os.umask(old)
    assert any(not is_dir for is_dir, _ in modes.values())
    assert all(m == (0o700 if is_dir else 0o600) for is_dir, m in modes.values()), modes
