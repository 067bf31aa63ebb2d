"""Faults around a stack's life take seconds, not timeouts (issue 30, 3): with every storage
function killed as it starts, an embedded stack's start-up gives up on warming them at once
(it waited 20 s); once a whole `funcsion up` stack is killed, a client stops waiting for its
daemon to come back as soon as its metadata server is gone too (a daemon restart is waited
for, up to 30 s, only while the rest of the stack lives)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk._client import Client, parse_addr
from sdk._config import Config
from sdk.cli._common import stack_endpoints
from sdk.local._stack import Stack
from storage_functions.exceptions import StorageError

from tests._waiting import wait_for


def _listening(addr: str) -> bool:
    try:
        socket.create_connection(parse_addr(addr), timeout=1.0).close()
    except OSError:
        return False
    return True


def test_start_up_does_not_wait_for_warm_ups_that_are_killed(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path / "state"), kill_rate=1.0, env={})
    t0 = time.monotonic()
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        took = time.monotonic() - t0
        assert took < 10, f"start-up took {took:.1f} s"
        handles = stack.store.daemon.handles
        assert handles and handles[0].warm_failed


def test_a_dead_stacks_daemon_is_not_waited_for(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = subprocess.run([sys.executable, "-m", "sdk.cli", "up", "--state-dir", str(state)], capture_output=True,
                        text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    info = json.loads((state / "stack.json").read_text())
    ep = stack_endpoints(info)
    try:
        with Client(ep) as client:
            assert client._store.stats()["objects"] == 0
            assert _listening(ep.metadata)
            os.kill(int(info["pid"]), signal.SIGKILL)
            wait_for(lambda: not _listening(ep.metadata), 30, "the killed stack's metadata server to stop listening")
            t0 = time.monotonic()
            with pytest.raises((StorageError, OSError)):
                client._store.stats()
            assert time.monotonic() - t0 < 5  # not the 30 s a restarting daemon is given
    finally:
        try:
            os.kill(int(info["pid"]), signal.SIGKILL)
        except ProcessLookupError:
            pass
